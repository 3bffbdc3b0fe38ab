"""A planted spurious set, composed by the toolkit's own compose stage from synthetic parts: flat
objects whose colour tells the class only weakly (a small step in red, plus per-image jitter) on
flat backgrounds whose colour tells it strongly. The -10 subset planner draws the splits: train
`majority` on the own class's background (the rest on the paired class's), a group-balanced `val`
carved from train by source image, and a balanced test (every object on both backgrounds).

    from planted_spurious import compose_planted   # tests/ is on sys.path (conftest; benchmarks add it)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml
from parts_factory import FakeImage, distinct_color, write_parts

from builder.compose.stage import compose_dataset
from builder.core.stage import RunOptions

CLASSES = ("n01443537", "n02134084", "n02391049", "n02437312")


def _jitter(source_id: str, spread: int) -> int:
    return int.from_bytes(hashlib.sha256(source_id.encode()).digest()[:2], "little") % (2 * spread + 1) - spread


def planted_images(per_class: int, step: int = 6, spread: int = 10) -> list[FakeImage]:
    images = []
    red = min(170, 255 - spread - step * (len(CLASSES) - 1))  # every object's red stays within 0..255
    for c, wnid in enumerate(CLASSES):
        for i in range(per_class):
            source_id = f"ILSVRC2012_val_{c * per_class + i + 1:08d}"
            j = _jitter(source_id, spread)
            images.append(
                FakeImage(
                    source_id,
                    wnid,
                    crop_color=(red + step * c + j, 190 + j, 190 - j),
                    background_color=distinct_color(c * 4),
                )
            )
    return images


def compose_planted(
    root: Path,
    *,
    per_class: int = 160,
    majority: float = 0.95,
    holdout: float = 0.25,
    canvas: int = 64,
    sizes=(24,),
    positions=("center", "top-right"),
    step: int = 6,
    spread: int = 10,
) -> Path:
    """Compose the planted set under `root`; returns the dataset folder (train, val, test). `step`:
    the red step between classes' objects (their only class cue; larger is easier to learn)."""
    root = Path(root)
    write_parts(root / "parts", {"val": planted_images(per_class, step, spread)}, shard_size=64)
    pairs = {CLASSES[i]: CLASSES[(i + 1) % len(CLASSES)] for i in range(len(CLASSES))}
    spec = {
        "name": "planted-spurious",
        "canvas": canvas,
        "sizes": list(sizes),
        "positions": list(positions),
        "backgrounds": ["original", "paired"],
        "splits": ["val"],
        "shard_size": 400,
        "jpeg_quality": 95,
        "subset": {"pairs": pairs, "majority": majority, "train_fraction": 0.5},
        "holdout": {"from": "train", "fraction": holdout, "name": "val"},
    }
    spec_path = root / "planted.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=True))
    summary = compose_dataset(root / "parts", str(spec_path), root / "out", options=RunOptions(progress=False))
    return summary.dataset_dir
