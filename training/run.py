"""One method for one or several seeds: train, score the test split into `predictions.parquet`
(the evaluation package's format, so every analysis reads it), and record the run's scores.

Layout: OUT/<method>/seed-<s>/{predictions.parquet, scores.json, the method's checkpoints}.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from builder.core.interrupts import ctrl_c_stops
from evaluation.predicting.predictions import write_predictions
from training.folder import RunFolder, run_folder
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
from training.methods import method
from training.methods.options import MethodOptions, RunControl
from training.state import RunScores

__all__ = ["MethodOptions", "RunControl", "run_label", "run_seed", "run_seeds", "train_method"]

SCORES_NAME, PREDICTIONS_NAME = "scores.json", "predictions.parquet"


def check_inputs(settings: TrainSettings, options: MethodOptions) -> None:
    """The refusals that need only the data, made before the run folder is claimed or created."""
    chosen = method(options.method)
    manifest = train_manifest(settings)
    check_selection_split(manifest, settings, settings.val_split, "--val-split")
    check_selection_split(manifest, settings, settings.test_split, "--test-split")
    if chosen.needs_groups:
        require_groups(settings, f"--method {options.method}")
    elif settings.select == "worst-group":
        require_groups(settings, "--select worst-group")


def train_method(
    settings: TrainSettings, options: MethodOptions, out: Path | RunFolder, control: RunControl = RunControl()
):
    check_inputs(settings, options)
    return method(options.method).load()(settings, out, options, control)


def run_label(settings: TrainSettings, options: MethodOptions) -> str:
    """The method's name in folders and summaries: `erm`, or `erm+gradmix` / `erm+random-box` with --augment."""
    mixing = settings.mixing
    return f"{options.method}+{mixing.augment}" if mixing.active else options.method


def kept_weights(out: RunFolder) -> dict:
    """The weights file the run kept (`best.pt`, as a path inside the train `--out`, e.g.
    `erm/seed-0/best.pt`) and its sha256, for the card; nothing when the method keeps none (DFR
    refits a head it does not save)."""
    from builder.core.hashing import sha256_file

    best = out.existing(BEST)
    if best is None:
        return {}
    return {"checkpoint": f"{out.root.name}/{out.relative(BEST)}", "checkpoint_sha256": sha256_file(best)}


def run_seed(
    settings: TrainSettings, options: MethodOptions, out: Path | RunFolder, control: RunControl = RunControl()
) -> dict | None:
    """Train `options.method` with `settings.seed` into `out`, score the test split; rank 0 returns scores."""
    check_inputs(settings, options)
    with run_folder(out) as folder:
        return _run_seed(settings, options, folder, control)


def _run_seed(settings: TrainSettings, options: MethodOptions, out: RunFolder, control: RunControl) -> dict | None:
    out.check_writable(PREDICTIONS_NAME, SCORES_NAME)
    result, info = train_method(settings, options, out, control)
    if not is_main_process():
        return None
    run = evaluate_split(result.model, result.preprocessing, settings, settings.test_split)
    label = run_label(settings, options)
    # The model's name in reports and cards says which training run it is.
    run.metadata["model"]["spec"] = f"{label} seed {settings.seed} (timm:{settings.model.removeprefix('timm:')})"
    run.metadata["training"] = {
        "method": label,
        "seed": settings.seed,
        "settings": settings.to_json(),
        "method_info": info,
        **kept_weights(out),
    }
    with out.writing(PREDICTIONS_NAME) as tmp:
        write_predictions(tmp, run.rows, run.errors, run.metadata)
    scores = RunScores(
        method=label,
        seed=settings.seed,
        test=split_scores(run.rows, need_groups=options.method != "erm" or settings.select == "worst-group"),
        val_best=result.best["val"] if result.best else None,
        info=info,
    ).model_dump()
    out.write_json(SCORES_NAME, scores)
    control.announce(
        f"hsi train: {label} seed {settings.seed}: test mean {100 * scores['test']['mean']:.1f} "
        f"worst {percent_or_na(scores['test']['worst_group'])}"
    )
    return scores


def run_seeds(
    settings: TrainSettings,
    options: MethodOptions,
    out: Path,
    seeds: Sequence[int],
    control: RunControl = RunControl(),
) -> list[dict]:
    results = []
    check_inputs(settings, options)

    def stopped() -> str:
        return (
            f"interrupted: {len(results)} of the {len(seeds)} seeds finished; each seed's last.pt keeps its last "
            "finished epoch: run the same command with --resume to continue"
        )

    with run_folder(out) as root, ctrl_c_stops(stopped):  # one claim of --out for every seed: its lock, no links
        for seed in seeds:
            folder = root.child(f"{run_label(settings, options)}/seed-{seed}")
            scores = run_seed(replace(settings, seed=seed, out=str(folder.path)), options, folder, control)
            if scores is not None:
                results.append(scores)
    return results
