"""Two figures of the SAM masker that a CPU can give, in one run on the demo photos (builder/demo_data):

    python benchmarks/extract_cpu.py                     # a small random SAM at the real 1024 px input
    python benchmarks/extract_cpu.py --sam-model vit_b   # segment-anything's vit_b, random weights (slow)

1. precision: the masks of every demo box with the image encoder in float32 and under bf16 autocast
   (`--precision fp32` against `bf16`), as the share of the image's pixels whose mask value differs,
   per box, and as 1 - IoU of the two masks.
2. prepare-ahead: the SAM masker alone over batches of the demo photos, then the real extract
   shard builder (SAM + Telea) over the demo photos repeated `--repeat` times, each with the masker
   readying the next batch in a thread (as extract runs) and serially (the hint ignored), in
   interleaved rounds: the ratio of their best times, and a check that both wrote the same shard.

Weights: none can be downloaded here; SAM is randomly initialised (segment-anything's own classes,
seeded), so the masks mean nothing as segmentations: the disagreement measures how much bf16
rounding moves random logits across the threshold, which is not the figure for Meta's trained
weights (whose logits sit far from it on most pixels). Say so wherever the figure is quoted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEMO = ROOT / "builder" / "demo_data" / "imagenet"


def small_architecture():
    """A SAM at the real 1024 px input with a 2-block, 64-wide encoder: quick on a CPU."""
    from builder.backends.sam import SamArchitecture

    return SamArchitecture(
        image_size=1024,
        patch_size=16,
        embed_dim=64,
        depth=2,
        num_heads=2,
        mlp_ratio=4.0,
        window_size=14,
        global_attn_indexes=(1,),
        qkv_bias=True,
        use_rel_pos=True,
        prompt_dim=64,
        mask_in_chans=16,
        num_multimask_outputs=3,
        decoder_depth=2,
        decoder_mlp_dim=256,
        decoder_heads=8,
        iou_head_depth=3,
        iou_head_hidden_dim=64,
    )


def write_checkpoint(folder: Path, model: str, seed: int) -> Path:
    import torch
    from segment_anything import sam_model_registry

    from builder.backends.sam import build_sam

    torch.manual_seed(seed)
    sam = build_sam(small_architecture()) if model == "small" else sam_model_registry[model]()
    path = folder / f"sam_{model}_random.pth"
    torch.save(sam.state_dict(), path)
    return path


def demo_records():
    from builder.extract.sources import load_sources

    return load_sources(DEMO, "val", None, announce=lambda _: None).records


def extract_config(checkpoint: Path, precision: str, batch: int):
    from builder.extract.shard_builder import ExtractConfig

    return ExtractConfig(
        masker="sam",
        inpainter="telea",
        sam_model="auto",
        sam_checkpoint=str(checkpoint),
        device="cpu",
        precision=precision,
        batch_size=batch,
        dilation=15,
    )


def precision_disagreement(checkpoint: Path) -> list[dict]:
    from builder.backends.torch_threads import stage_threads
    from builder.extract.images import decode_image
    from builder.extract.shard_builder import load_backends

    rows = []
    records = demo_records()
    images = [decode_image(Path(r.path), 120_000_000).rgb for r in records]
    masks = {}
    with stage_threads():
        for precision in ("fp32", "bf16"):
            masker, _ = load_backends(extract_config(checkpoint, precision, 4))
            masks[precision] = masker.masks_batch(images, [list(r.boxes) for r in records])
    for index, record in enumerate(records):
        for number, (a, b) in enumerate(zip(masks["fp32"][index], masks["bf16"][index])):
            union = np.logical_or(a, b).sum()
            rows.append(
                {
                    "box": f"{record.image_id}#{number}",
                    "pixel_share": float((a != b).mean()),
                    "one_minus_iou": float(1 - np.logical_and(a, b).sum() / union) if union else 0.0,
                    "mask_share_fp32": float(a.mean()),
                }
            )
    return rows


def time_shards(checkpoint: Path, repeat: int, batch: int, rounds: int) -> dict:
    from builder.core.hashing import sha256_file
    from builder.core.runner import ShardPlan
    from builder.extract.shard_builder import ExtractShardBuilder, load_backends

    records = [
        replace(record, image_id=f"{record.image_id}_{copy:02d}") for copy in range(repeat) for record in demo_records()
    ]
    plan = ShardPlan("val", 0, tuple(sorted(records, key=lambda r: r.image_id)))
    config = extract_config(checkpoint, "fp32", batch)
    masker, _ = load_backends(config)
    ahead_hint = masker.prepare_ahead
    times: dict[str, list[float]] = {"serial": [], "ahead": []}
    digests: dict[str, set[str]] = {"serial": set(), "ahead": set()}
    with tempfile.TemporaryDirectory() as folder:
        for round_index in range(rounds + 1):  # round 0 warms up (allocator, first calls)
            for mode in ("serial", "ahead"):
                masker.prepare_ahead = ahead_hint if mode == "ahead" else (lambda images: None)
                out = Path(folder) / f"{mode}-{round_index}"
                out.mkdir()
                started = time.perf_counter()
                ExtractShardBuilder(config, str(out))(plan)
                if round_index:
                    times[mode].append(time.perf_counter() - started)
                digests[mode].add(sha256_file(out / plan.filename))
    masker.prepare_ahead = ahead_hint
    return {"images": len(records), "times": times, "same_bytes": digests["serial"] == digests["ahead"]}


def time_masker(checkpoint: Path, repeat: int, batch: int, rounds: int) -> dict:
    """The SAM masker alone over the same batches: `masks_batch` per batch, with the next batch
    hinted (prepared in a thread meanwhile) or not."""
    from builder.backends.torch_threads import stage_threads
    from builder.extract.images import decode_image
    from builder.extract.shard_builder import load_backends

    records = demo_records() * repeat
    images = [decode_image(Path(r.path), 120_000_000).rgb.copy() for r in records]
    boxes = [list(r.boxes) for r in records]
    masker, _ = load_backends(extract_config(checkpoint, "fp32", batch))
    batches = [(images[i : i + batch], boxes[i : i + batch]) for i in range(0, len(images), batch)]
    times: dict[str, list[float]] = {"serial": [], "ahead": []}
    with stage_threads():
        for round_index in range(rounds + 1):
            for mode in ("serial", "ahead"):
                started = time.perf_counter()
                for index, (chunk, chunk_boxes) in enumerate(batches):
                    if mode == "ahead" and index + 1 < len(batches):
                        masker.prepare_ahead(batches[index + 1][0])
                    masker.masks_batch(chunk, chunk_boxes)
                if round_index:
                    times[mode].append(time.perf_counter() - started)
    return {"images": len(images), "times": times}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sam-model", choices=["small", "vit_b"], default="small")
    parser.add_argument("--repeat", type=int, default=4, help="copies of the 4 demo photos in the timed shard")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = write_checkpoint(Path(folder), args.sam_model, args.seed)
        print(f"SAM: {args.sam_model}, random weights (seed {args.seed}), 1024 px input, on the CPU")
        rows = precision_disagreement(checkpoint)
        print("\n1. fp32 against bf16 encoder masks, per demo box")
        print(f"{'box':<28} {'pixels differing':>17} {'1 - IoU':>9} {'fp32 mask share':>16}")
        for row in rows:
            print(
                f"{row['box']:<28} {row['pixel_share']:>16.4%} {row['one_minus_iou']:>9.4f} "
                f"{row['mask_share_fp32']:>16.2%}"
            )
        shares = [row["pixel_share"] for row in rows]
        print(f"mean {np.mean(shares):.4%} of pixels, max {np.max(shares):.4%}, over {len(rows)} boxes")
        timing = time_shards(checkpoint, args.repeat, args.batch_size, args.rounds)
        alone = time_masker(checkpoint, args.repeat, args.batch_size, args.rounds)
    serial, ahead = min(alone["times"]["serial"]), min(alone["times"]["ahead"])
    print(
        f"\n2. the SAM masker alone on {alone['images']} images, batch {args.batch_size}, best of {args.rounds} rounds"
    )
    print(f"serial {serial:.2f} s, prepare-ahead {ahead:.2f} s: ratio {serial / ahead:.3f} (serial / prepare-ahead)")
    serial, ahead = min(timing["times"]["serial"]), min(timing["times"]["ahead"])
    print(
        f"\n3. one extract shard of {timing['images']} images (SAM + Telea, batch {args.batch_size}), best of "
        f"{args.rounds} interleaved rounds"
    )
    print(
        f"serial {serial:.2f} s ({timing['images'] / serial:.2f} images/s), prepare-ahead {ahead:.2f} s "
        f"({timing['images'] / ahead:.2f} images/s): ratio {serial / ahead:.3f} (serial time / prepare-ahead time)"
    )
    print(
        f"all rounds: serial {' '.join(f'{t:.2f}' for t in timing['times']['serial'])} s, "
        f"ahead {' '.join(f'{t:.2f}' for t in timing['times']['ahead'])} s"
    )
    print(f"same shard bytes both ways: {timing['same_bytes']}")
    return 0 if timing["same_bytes"] else 1


if __name__ == "__main__":
    sys.exit(main())
