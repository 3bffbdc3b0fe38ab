"""JTT, Just Train Twice (Liu et al., ICML 2021, arXiv:2107.09044; as the authors' code does it): stage 1
trains ERM for T epochs; its errors (by default those of the last stage-1 training pass, each batch
predicted before its step; `eval`: an eval-mode pass at epoch T) are repeated lambda_up more times in
stage 2, a fresh model selected on validation worst-group accuracy. The paper: T = 60, lambda_up = 100
on Waterbirds; T = 1, lambda_up = 50 on CelebA."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from training.folder import RunFolder, run_folder
from training.groups import group_or_none
from training.loop import LAST, FitResult, TrainError, TrainSettings, evaluate_split, fit, is_main_process
from training.methods.options import MethodOptions, RunControl
from training.state import read_last, restore

JTT_ERRORS = ("train-pass", "eval")
ERROR_SET_NAME = "jtt_error_set.json"


def upsample_counts(error_keys: Iterable[str], lambda_up: int) -> dict[str, int]:
    """key -> extra copies: each error sample is seen 1 + lambda_up times per epoch."""
    if lambda_up < 0:
        raise TrainError(f"--jtt-upweight must be >= 0, got {lambda_up}")
    return {key: lambda_up for key in sorted(set(error_keys))}


def eval_pass_errors(stage1: FitResult, settings: TrainSettings) -> dict[str, str | None]:
    """key -> group of the train samples the stage-1 model (at epoch T) misclassifies in eval mode."""
    path = stage1.out / LAST
    restore(read_last(path), path, ("model", stage1.model), rng=False)
    rows = evaluate_split(stage1.model, stage1.preprocessing, settings, settings.train_split).rows
    wrong = {row["key"]: group_or_none(row["meta"]) for row in rows if row["status"] == "ok" and not row["correct"]}
    return dict(sorted(wrong.items()))


def error_set_summary(errors: Mapping[str, str | None], lambda_up: int, source: str) -> dict:
    return {
        "size": len(errors),
        "lambda_up": lambda_up,
        "from": source,
        "groups": dict(sorted(Counter(g or "unknown" for g in errors.values()).items())),
        "keys": sorted(errors),
    }


def train_jtt(
    settings: TrainSettings, out: Path | RunFolder, options: MethodOptions, control: RunControl
) -> tuple[FitResult, dict]:
    """Stage 1 for `options.jtt_epochs` (T), then stage 2 with the errors seen 1 + `jtt_upweight` times."""
    stage1_epochs, lambda_up, errors = options.jtt_epochs, options.jtt_upweight, options.jtt_errors
    if errors not in JTT_ERRORS:
        raise TrainError(f"--jtt-errors must be one of {', '.join(JTT_ERRORS)}, got {errors!r}")
    if stage1_epochs < 1:
        raise TrainError(f"--jtt-epochs (T) must be at least 1, got {stage1_epochs}")
    with run_folder(out) as folder:
        folder.check_writable(ERROR_SET_NAME)
        stage1_settings = replace(settings, epochs=stage1_epochs, select="mean")
        passed = errors == "train-pass"
        stage1 = fit(stage1_settings, folder.child("stage1"), record_errors=passed, **control.fit_keywords())
        found = stage1.train_errors if passed else eval_pass_errors(stage1, stage1_settings)
        summary = error_set_summary(found or {}, lambda_up, errors)
        if is_main_process():
            folder.write_json(ERROR_SET_NAME, summary)
        control.announce(f"hsi train: JTT error set {summary['size']} samples ({errors}), by group {summary['groups']}")
        repeats = upsample_counts(summary["keys"], lambda_up)
        stage2 = fit(settings, folder.child("stage2"), repeats=repeats, **control.fit_keywords())
    info = {
        "method": "jtt",
        "stage1_epochs": stage1_epochs,
        "lambda_up": lambda_up,
        "errors_from": errors,
        "error_set_size": summary["size"],
        "error_set_groups": summary["groups"],
        "best_epoch": stage2.best["epoch"] if stage2.best else None,
    }
    return stage2, info
