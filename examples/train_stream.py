"""A short training loop on a release, streamed straight from its shards with `stream(...)`.

    python examples/train_stream.py hard-spurious-imagenet --steps 20
    python examples/train_stream.py hard-spurious-imagenet --config hard-spurious-imagenet-10 --split train

Linear probe on 32x32 thumbnails: small enough to run on a CPU; the point is the data path
(shuffle buffer, workers, per-sample group metadata for per-group accuracy). The splits and the
classes (the number of outputs) come from the config's manifest: without `--split`, `train` if the
config has one, else its first split.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np
import torch

from builder.formats.stream import source_manifest, stream


def to_tensor(image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(image.resize((32, 32)), dtype=np.float32) / 255.0).permute(2, 0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="release folder, composed dataset folder or hf://datasets/ORG/NAME@vX.Y.Z")
    parser.add_argument("--config", default=None)
    parser.add_argument("--split", default=None, help="default: train if the config has it, else its first split")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    try:
        _, manifest = source_manifest(args.source, args.config)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    splits = sorted(manifest.get("splits") or {})
    split = args.split or ("train" if "train" in splits else (splits or ["test"])[0])
    if split not in splits:
        parser.error(
            f"split {split!r} is not in {args.source}"
            + (f" (config {args.config})" if args.config else "")
            + f"; it has {', '.join(splits) or 'none'}"
        )
    classes = len(manifest.get("class_names") or []) or 1000  # labels index the config's own class list
    print(f"training on split {split} of {manifest.get('config')}: {classes} classes")
    data = stream(args.source, args.config, split, shuffle_buffer=256, transform=to_tensor)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, num_workers=args.workers)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, classes))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    step, epoch = 0, 0
    while step < args.steps:
        data.set_epoch(epoch)
        correct, seen = Counter(), Counter()
        for batch in loader:
            logits = model(batch["image"])
            loss = torch.nn.functional.cross_entropy(logits, batch["label"])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            hits = (logits.argmax(1) == batch["label"]).tolist()
            for group, hit in zip(batch["group"], hits):
                correct[group] += hit
                seen[group] += 1
            step += 1
            print(f"epoch {epoch} step {step} loss {loss.item():.3f}")
            if step >= args.steps:
                break
        epoch += 1
    print("training accuracy per group:", {g: round(correct[g] / seen[g], 3) for g in sorted(seen)})


if __name__ == "__main__":
    main()
