"""What the SCGS tests share (tests/ is on sys.path): a random ERM checkpoint in `hsi train`'s
format, the `hsi scgs` command line of the tests, and the generated samples of a config folder."""

from __future__ import annotations

from pathlib import Path

from planted_spurious import CLASSES

from builder.core.manifest import Manifest
from builder.core.shard_read import iter_shard


def write_erm_checkpoint(path: Path, seed: int = 0) -> Path:
    """A random-init timm test_resnet saved as `hsi train` saves best.pt (weights, settings, wnids)."""
    import timm
    import torch

    torch.manual_seed(seed)
    model = timm.create_model("test_resnet", num_classes=len(CLASSES))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "settings": {"model": "test_resnet"}, "wnids": sorted(CLASSES)}, path)
    return path


def scgs_command(source: Path, out: Path, checkpoint: Path, pipeline: Path, *extra: str) -> list[str]:
    return [
        "scgs",
        str(source),
        "--out",
        str(out),
        "--checkpoint",
        str(checkpoint),
        "--sd-model",
        str(pipeline),
        "--steps",
        "1",
        "--strength",
        "1.0",
        "--device",
        "cpu",
        "--sd-dtype",
        "float32",
        "--shard-size",
        "4",
        "--fraction",
        "0.1",
        "--clusters",
        "2",
        "--no-progress",
        *extra,
    ]


def generated(folder: Path) -> dict[str, dict[str, bytes]]:
    """{key: members} of the generated samples of a config folder's train split."""
    manifest = Manifest.read(folder)
    samples = {}
    for path in manifest.shard_paths(folder, "train"):
        for key, members in iter_shard(path):
            if "augment.json" in members:
                samples[key] = members
    return samples
