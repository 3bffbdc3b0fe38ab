"""ERM: plain empirical risk minimisation (cross-entropy on the train split, optionally restricted
with --train-groups / --train-sizes: the paper's ERM-easy trains on the Easy tier's groups and sizes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..train import FitResult, TrainSettings, fit


def train_erm(
    settings: TrainSettings,
    out: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    stop_after_epoch: int | None = None,
    announce: Callable[[str], None] = print,
) -> tuple[FitResult, dict]:
    result = fit(
        settings, out, resume=resume, overwrite=overwrite, stop_after_epoch=stop_after_epoch, announce=announce
    )
    return result, {
        "method": "erm",
        "best_epoch": result.best["epoch"] if result.best else None,
        "epoch_seconds": result.epoch_seconds,
    }
