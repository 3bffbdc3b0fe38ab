"""ERM: plain empirical risk minimisation (cross-entropy on the train split, optionally restricted
with --train-groups / --train-sizes: the paper's ERM-easy trains on the Easy tier's groups and sizes)."""

from __future__ import annotations

from pathlib import Path

from training.folder import RunFolder
from training.loop import FitResult, TrainSettings, fit
from training.methods.options import MethodOptions, RunControl


def train_erm(
    settings: TrainSettings, out: Path | RunFolder, options: MethodOptions, control: RunControl
) -> tuple[FitResult, dict]:
    result = fit(settings, out, **control.fit_keywords())
    return result, {
        "method": "erm",
        "best_epoch": result.best["epoch"] if result.best else None,
        "epoch_seconds": result.epoch_seconds,
    }
