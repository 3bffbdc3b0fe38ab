"""One model, end to end: predictions -> metrics -> eval.json, eval.md, plots; and the same analysis
from a predictions file alone (`hsi eval --from`). Several models share one output folder and a
leaderboard."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .bootstrap import BootstrapSettings
from .extra_sets import (
    BACKGROUND_ACCURACY_CSV,
    CLEAN_ACCURACY_CSV,
    background_predictions,
    clean_predictions,
    write_class_accuracy,
)
from .leaderboard import already_evaluated, run_identity
from .metrics import clean_drop, compute_metrics
from .models import LoadedModel, model_slug
from .plots import write_plots
from .predict import PredictionRun, RunPlan, plan_run, run_predictions
from .predictions import PREDICTIONS_NAME, read_predictions, write_predictions
from .report import EVAL_JSON, build_report, write_report

PLOTS_DIR = "plots"


@dataclass
class RunSettings:
    config: str | None = None
    split: str = "test"
    batch_size: int = 64
    workers: int = 2
    device: str = "auto"
    amp: bool = False
    channels_last: bool = False
    limit: int | None = None
    label_space: str = "imagenet"
    progress: bool = True
    bootstrap: BootstrapSettings = field(default_factory=BootstrapSettings)
    clean_root: Path | None = None
    clean_split: str = "val"
    parts_dir: Path | None = None
    overwrite: bool = False


@dataclass
class EvalResult:
    folder: Path
    report: dict
    skipped: bool = False


def analyse(predictions_path: Path, folder: Path, bootstrap: BootstrapSettings, extras: dict | None = None) -> dict:
    """Metrics, report and plots from a predictions file only."""
    frame, metadata = read_predictions(predictions_path)
    metrics = compute_metrics(frame, label_space_size=metadata["label_space"]["classes"], settings=bootstrap)
    extras = dict(extras or {})
    title = f"{metadata['model']['spec']} on {metadata['data']['config']}/{metadata['data']['split']}"
    extras["plots"] = [f"{PLOTS_DIR}/{name}" for name in write_plots(metrics, folder / PLOTS_DIR, title)]
    extras["files"] = {"predictions": predictions_path.name}
    report = build_report(metadata, metrics, extras)
    write_report(folder, report)
    return report


def _extra_sets(run, loaded: LoadedModel, settings: RunSettings, folder: Path, announce) -> dict:
    extras: dict = {}
    if settings.clean_root is None and settings.parts_dir is None:
        return extras
    ok = [r for r in run.rows if r["status"] == "ok" and r["meta"].get("source_id")]
    labels = {r["meta"]["source_id"]: r["label_class"] for r in ok}
    if settings.clean_root is not None:
        import pandas as pd

        clean, missing, errors = clean_predictions(
            run.classifier, loaded.preprocessing, settings.clean_root, settings.clean_split, labels, settings.batch_size
        )
        composites = pd.DataFrame(
            [
                {
                    "status": "ok",
                    "key": r["key"],
                    "correct": r["correct"],
                    "correct_top5": r["correct_top5"],
                    "source_id": r["meta"].get("source_id"),
                    "group": r["meta"].get("group"),
                    "size": r["meta"].get("size"),
                }
                for r in ok
            ]
        )
        write_class_accuracy(clean, folder / CLEAN_ACCURACY_CSV)
        extras["clean"] = {
            **clean_drop(clean, composites, settings.bootstrap),
            "missing": missing,
            "errors": errors,
            "file": CLEAN_ACCURACY_CSV,
            "preprocessing": "the whole photo through the same preprocessing as the composites",
        }
        announce(f"clean photos: {len(clean)} classified, {missing} not found under the clean root")
    if settings.parts_dir is not None:
        frame, errors = background_predictions(
            run.classifier, loaded.preprocessing, settings.parts_dir, settings.batch_size
        )
        rows = write_class_accuracy(frame, folder / BACKGROUND_ACCURACY_CSV)
        extras["background_only"] = {
            "images": int(len(frame)),
            "top1": float(frame["correct"].mean()) if len(frame) else 0.0,
            "classes": len(rows),
            "file": BACKGROUND_ACCURACY_CSV,
            "errors": errors,
        }
    return extras


def evaluate_model(
    loaded: LoadedModel,
    source,
    out_dir: Path,
    settings: RunSettings,
    announce: Callable[[str], None] = print,
    folder_name: str | None = None,
) -> EvalResult:
    """Evaluate one model into OUT/<model>/, unless the same evaluation is already there."""
    folder = Path(out_dir) / (folder_name or model_slug(loaded.spec))
    plan = plan_run(
        loaded,
        source,
        settings.config,
        settings.split,
        batch_size=settings.batch_size,
        limit=settings.limit,
        label_space=settings.label_space,
    )
    identity = planned_identity(loaded, source, settings, plan.manifest, plan.space.name)
    if not settings.overwrite and already_evaluated(folder, identity):
        announce(
            f"{loaded.spec}: already evaluated on this data revision in {folder.name}/ (pass --overwrite to redo it)"
        )
        return EvalResult(folder, load_existing(folder), skipped=True)
    run = predictions_for(loaded, source, settings, plan=plan, announce=announce)
    folder.mkdir(parents=True, exist_ok=True)
    predictions = write_predictions(folder / PREDICTIONS_NAME, run.rows, run.errors, run.metadata)
    extras = _extra_sets(run, loaded, settings, folder, announce)
    return EvalResult(folder, analyse(predictions, folder, settings.bootstrap, extras))


def predictions_for(
    loaded: LoadedModel,
    source,
    settings: RunSettings,
    *,
    plan: RunPlan | None = None,
    announce: Callable[[str], None] = print,
) -> PredictionRun:
    """`run_predictions` with the data and forward-pass fields of `settings`."""
    return run_predictions(
        loaded,
        source,
        settings.config,
        settings.split,
        plan=plan,
        batch_size=settings.batch_size,
        workers=settings.workers,
        device=settings.device,
        amp=settings.amp,
        channels_last=settings.channels_last,
        limit=settings.limit,
        label_space=settings.label_space,
        progress=settings.progress,
        announce=announce,
    )


def planned_identity(loaded: LoadedModel, source, settings: RunSettings, manifest: dict, label_space_name: str) -> dict:
    """The identity an evaluation would have, to skip one already done (before running anything)."""
    from .predict import source_display_name

    report = {
        "data": {
            "source": source_display_name(source),
            "config": manifest.get("config"),
            "split": settings.split,
            "fingerprint": manifest.get("fingerprint"),
            "limit": settings.limit,
        },
        "model": loaded.describe(),
        "preprocessing": loaded.preprocessing.to_json(),
        "label_space": {"name": label_space_name},
    }
    return run_identity(report)


def load_existing(folder: Path) -> dict:
    return json.loads((folder / EVAL_JSON).read_text("utf-8"))


__all__ = [
    "RunSettings",
    "EvalResult",
    "analyse",
    "evaluate_model",
    "planned_identity",
    "already_evaluated",
    "load_existing",
]
