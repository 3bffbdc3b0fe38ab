"""Run under `torchrun --nproc-per-node 2` (gloo on CPU): one DDP epoch of `fit`, then each rank writes
the keys its own stream gave it in that epoch and a digest of its weights to OUT/rank-<r>.json.

    torchrun --nproc-per-node 2 tests/training/ddp_probe.py DATASET OUT
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from settings_factory import small_run  # noqa: E402

from evaluation.predicting.data import SourceSplit  # noqa: E402
from training.data import TrainSamples  # noqa: E402
from training.loop import fit  # noqa: E402


def weights_digest(module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main(dataset: str, out: str) -> None:
    import torch.distributed as dist

    settings = small_run(dataset, Path(out) / "run", model="test_efficientnet", batch_size=16)
    # Stopped after epoch 1 of 2, as a kill would: the weights are the trained ones, not best.pt reloaded.
    result = fit(settings, stop_after_epoch=1, announce=lambda _: None)
    data = TrainSamples(SourceSplit(dataset, None, "train"), result.preprocessing, seed=0, shuffle_buffer=32)
    data.set_epoch(0)
    rank = dist.get_rank()
    record = {
        "rank": rank,
        "world_size": dist.get_world_size(),
        "keys": sorted(item["key"] for item in data),
        "weights": weights_digest(result.model),
        "samples_trained": result.history[0]["samples"] if result.history else None,
    }
    (Path(out) / f"rank-{rank}.json").write_text(json.dumps(record) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
