"""One method for one or several seeds: train, score the test split into `predictions.parquet` (the
evaluation package's format, so every analysis reads it) and `scores.json`, in OUT/<method>/seed-<s>."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import Field

from builder.core.hashing import sha256_file
from builder.core.interrupts import ctrl_c_stops
from builder.core.untrusted import StrictModel
from evaluation.predicting.predictions import write_predictions
from training.folder import RunFolder, run_folder
from training.gradmix import AUGMENTS
from training.loop import (
    BEST,
    TrainSettings,
    check_selection_split,
    evaluate_split,
    is_main_process,
    percent_or_na,
    require_groups,
    split_scores,
    train_manifest,
)
from training.methods import METHODS, method
from training.methods.options import MethodOptions, RunControl
from training.state import SplitScores

__all__ = ["MethodOptions", "RunControl", "run_label", "run_seed", "run_seeds"]

SCORES_NAME, PREDICTIONS_NAME = "scores.json", "predictions.parquet"
# A run's label (`erm`, `dfr+gradmix`, ...): it names the run's report folder, so it is one of ours.
RUN_LABEL = rf"^({'|'.join(METHODS)})(\+({'|'.join(a for a in AUGMENTS if a != 'none')}))?$"


class RunScores(StrictModel):
    """`scores.json`: one method and seed scored on the test split."""

    method: str = Field(pattern=RUN_LABEL, description="the run's label: the method, with +AUGMENT when mixed")
    seed: int = Field(ge=0)
    test: SplitScores
    val_best: SplitScores | None = Field(description="the selected epoch's scores on the held-out split")
    info: dict[str, Any] = Field(description="what the method did (its best epoch, JTT's error set, DFR's C)")


def check_inputs(settings: TrainSettings, options: MethodOptions) -> None:
    """The refusals that need only the data, made before the run folder is claimed or created."""
    manifest = train_manifest(settings)
    check_selection_split(manifest, settings, settings.val_split, "--val-split")
    check_selection_split(manifest, settings, settings.test_split, "--test-split")
    if method(options.method).needs_groups:
        require_groups(settings, f"--method {options.method}")
    elif settings.select == "worst-group":
        require_groups(settings, "--select worst-group")


def run_label(settings: TrainSettings, options: MethodOptions) -> str:
    """The method's name in folders and summaries: `erm`, or `erm+gradmix` / `erm+random-box` with --augment."""
    mixing = settings.mixing
    return f"{options.method}+{mixing.augment}" if mixing.active else options.method


def run_seed(
    settings: TrainSettings, options: MethodOptions, out: Path | RunFolder, control: RunControl = RunControl()
) -> dict | None:
    """Train `options.method` with `settings.seed` into `out`, score the test split; rank 0 returns scores."""
    check_inputs(settings, options)
    return _run_seed(settings, options, out, control)


def _run_seed(
    settings: TrainSettings, options: MethodOptions, out: Path | RunFolder, control: RunControl
) -> dict | None:
    with run_folder(out) as folder:
        folder.check_writable(PREDICTIONS_NAME, SCORES_NAME)
        result, info = method(options.method).load()(settings, folder, options, control)
        if not is_main_process():
            return None
        run = evaluate_split(result.model, result.preprocessing, settings, settings.test_split)
        label = run_label(settings, options)
        # The model's name in reports and cards says which training run it is.
        run.metadata["model"]["spec"] = f"{label} seed {settings.seed} (timm:{settings.model.removeprefix('timm:')})"
        training = {"method": label, "seed": settings.seed, "settings": settings.to_json(), "method_info": info}
        best = folder.existing(BEST)  # the weights kept, for the card (DFR refits a head it does not save)
        if best is not None:
            training |= {
                "checkpoint": f"{folder.root.name}/{folder.relative(BEST)}",
                "checkpoint_sha256": sha256_file(best),
            }
        run.metadata["training"] = training
        with folder.writing(PREDICTIONS_NAME) as tmp:
            write_predictions(tmp, run.rows, run.errors, run.metadata)
        scores = RunScores(
            method=label,
            seed=settings.seed,
            test=split_scores(run.rows, need_groups=options.method != "erm" or settings.select == "worst-group"),  # type: ignore[arg-type]
            val_best=result.best["val"] if result.best else None,
            info=info,
        ).model_dump()
        folder.write_json(SCORES_NAME, scores)
    test = scores["test"]
    mean, worst = 100 * test["mean"], percent_or_na(test["worst_group"])
    control.announce(f"hsi train: {label} seed {settings.seed}: test mean {mean:.1f} worst {worst}")
    return scores


def run_seeds(
    settings: TrainSettings, options: MethodOptions, out: Path, seeds: Sequence[int], control: RunControl = RunControl()
) -> list[dict]:
    results: list[dict] = []
    check_inputs(settings, options)

    def stopped() -> str:
        return (
            f"interrupted: {len(results)} of the {len(seeds)} seeds finished; each seed's last.pt keeps its last "
            "finished epoch: run the same command with --resume to continue"
        )

    with run_folder(out) as root, ctrl_c_stops(stopped):  # one claim of --out for every seed: its lock, no links
        for seed in seeds:
            folder = root.child(f"{run_label(settings, options)}/seed-{seed}")
            scores = _run_seed(replace(settings, seed=seed, out=str(folder.path)), options, folder, control)
            if scores is not None:
                results.append(scores)
    return results
