"""Shared fixtures of the SCGS tests: a small planted -10-style config (train, val, test), a random
tiny timm ERM checkpoint in `hsi train`'s format, and the tiny inpainting pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest
from planted_spurious import CLASSES, compose_planted


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """The tiny models' ops are too small to split: one torch thread is faster on a busy machine."""
    from tiny_sd import one_intra_op_thread

    with one_intra_op_thread():
        yield


@pytest.fixture(scope="session")
def planted_source(tmp_path_factory) -> Path:
    return compose_planted(tmp_path_factory.mktemp("scgs-planted"), per_class=16, holdout=0.34)


def write_erm_checkpoint(path: Path, seed: int = 0) -> Path:
    """A random-init timm test_resnet saved as `hsi train` saves best.pt (weights, settings, wnids)."""
    import timm
    import torch

    torch.manual_seed(seed)
    model = timm.create_model("test_resnet", num_classes=len(CLASSES))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "settings": {"model": "test_resnet"}, "wnids": sorted(CLASSES)}, path)
    return path


@pytest.fixture(scope="session")
def erm_checkpoint(tmp_path_factory) -> Path:
    return write_erm_checkpoint(tmp_path_factory.mktemp("scgs-erm") / "best.pt")


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory) -> Path:
    from tiny_sd import cached_tiny_inpaint_pipeline

    return cached_tiny_inpaint_pipeline(tmp_path_factory)


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
