"""One model, end to end: predictions -> metrics -> eval.json, eval.md, plots; and the same analysis
from a predictions file alone (`hsi eval --from`). Several models share one output folder and a
leaderboard.

Every file goes through the output folder's `OwnedFolder` (evaluation.orchestration.eval_folder), into a model
folder whose name carries what changes the numbers. A folder already holding this evaluation is
skipped, or given just the passes it lacks (`--clean`, `--parts`, classified from the saved
predictions' samples without predicting the composites again); one holding an evaluation with
other settings is refused unless `--overwrite`, which replaces its files and removes the earlier
run's files the new one does not produce.

An evaluation is two halves: `model_work` (everything that needs the model, writing nothing, so it
can run in a worker process or a Ray actor) and `write_work` (the files, by the process holding the
output folder); `evaluate_model` runs both here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from builder.core.errors import HsiError
from builder.core.owned import OwnedFolder, OwnedFolderError
from builder.core.untrusted import read_json
from evaluation.analysis.answer_shares import answer_section
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.analysis.metrics import clean_drop, compute_metrics
from evaluation.analysis.plots import write_plots
from evaluation.analysis.prompt_sets import prompt_identity, prompt_set_sections
from evaluation.analysis.report import EVAL_JSON, EVAL_MD, build_report, render_markdown, write_json
from evaluation.model_formats.models import LoadedModel, ModelError
from evaluation.predicting.extra_sets import (
    BACKGROUND_ACCURACY_CSV,
    CLEAN_ACCURACY_CSV,
    background_predictions,
    clean_predictions,
    write_class_accuracy,
)
from evaluation.predicting.predict import (
    Classifier,
    PredictionRun,
    RunPlan,
    plan_run,
    resolve_device,
    run_predictions,
    verify_plan,
)
from evaluation.predicting.predictions import PREDICTIONS_NAME, read_predictions, write_predictions
from evaluation.ranking.entries import ENTRY_JSON, EntryInfo, carried_info, checked_entry, write_entry
from evaluation.ranking.eval_reader import checked_report
from evaluation.ranking.hub_results import report_results_file
from evaluation.ranking.leaderboard import FAILED_JSON, already_evaluated, run_identity
from evaluation.ranking.provenance import recorded_preprocessing
from evaluation.ranking.report_fields import checked_model_only
from evaluation.zero_shot.record import run_prompt_identity

from . import eval_folder
from .eval_folder import EVAL_KIND, FolderRecord, ModelFolder, PlainFolder

PLOTS_DIR = "plots"
MODEL_ONLY = ("clean", "background_only")  # sections only the model can compute, each with its file


@dataclass
class RunSettings:
    config: str | None = None
    split: str = "test"
    batch_size: int = 64
    workers: int = 2
    device: str = "auto"
    amp: bool | str = False  # True: fp16 autocast on CUDA; "bf16": bf16
    channels_last: bool = False
    limit: int | None = None
    label_space: str = "imagenet"
    progress: bool = True
    bootstrap: BootstrapSettings = field(default_factory=BootstrapSettings)
    clean_root: Path | None = None
    clean_split: str = "val"
    parts_dir: Path | None = None
    overwrite: bool = False
    part: tuple[int, int] | None = None  # (index, count): this process predicts one of count parts of the data


@dataclass
class EvalResult:
    folder: Path
    report: dict
    skipped: bool = False


def report_files(report: dict) -> set[str]:
    """The files of a model folder its report stands for: the rest are an earlier run's leftovers."""
    files = {EVAL_JSON, EVAL_MD, ENTRY_JSON, *(report.get("plots") or [])}
    files.add((report.get("files") or {}).get("predictions") or PREDICTIONS_NAME)
    results = report_results_file(report)  # the Hub's .eval_results file, when the data came from the Hub
    if results is not None:
        files.add(results)
    for section in MODEL_ONLY:
        if isinstance(report.get(section), dict) and report[section].get("file"):
            files.add(report[section]["file"])
    return files


def save_report(folder, report: dict) -> None:
    """eval.json and eval.md (the bytes `report.write_report` writes), through the folder's writes."""
    with folder.writing(EVAL_JSON) as path:
        write_json(path, report)
    folder.write_text(EVAL_MD, render_markdown(report) + "\n")


def analyse(
    predictions_path: Path,
    folder: ModelFolder | Path,
    bootstrap: BootstrapSettings,
    extras: dict | None = None,
    entry: EntryInfo | None = None,
) -> dict:
    """Metrics, report, plots and the leaderboard entry from a predictions file only, written into
    `folder` (a ModelFolder, or a plain folder its caller owns). `entry` describes the model for its
    entry, field by field over what the entry.json beside the predictions said of the same model."""
    frame, metadata = read_predictions(predictions_path)  # a table refused here leaves nothing behind
    # an older table's section gets its status by the one rule (predictions made elsewhere: unknown)
    metadata["preprocessing"] = recorded_preprocessing(metadata["preprocessing"], metadata["model"]["spec"])
    kept = carried_info(Path(predictions_path).parent / ENTRY_JSON, metadata["model"])  # a broken one: refused
    entry = (entry or EntryInfo()).over(kept)
    if isinstance(folder, ModelFolder):
        folder.check_writable(EVAL_JSON, EVAL_MD, ENTRY_JSON)  # refused before a plot is replaced
    else:
        folder = PlainFolder(Path(folder))
    metrics = compute_metrics(frame, label_space_size=metadata["label_space"]["classes"], settings=bootstrap)
    # a zero-shot model's prompt sets and a VLM's answers: recomputed from the table like the rest
    extras = {**prompt_set_sections(frame, metadata, bootstrap), **answer_section(frame, metadata), **(extras or {})}
    files = {"predictions": Path(predictions_path).name}
    # The entry is checked before anything is written: a refused run leaves no eval.json (nothing that
    # `release --results` would publish) and no plots of a report that was never written.
    checked_entry(build_report(metadata, metrics, {**extras, "plots": [], "files": files}), predictions_path, entry)
    title = f"{metadata['model']['spec']} on {metadata['data']['config']}/{metadata['data']['split']}"
    extras["plots"] = [f"{PLOTS_DIR}/{name}" for name in write_plots(metrics, folder, title, PLOTS_DIR)]
    extras["files"] = files
    report = build_report(metadata, metrics, extras)
    save_report(folder, report)
    write_entry(folder, report, Path(predictions_path), entry)
    folder.keep_only(report_files(report))
    return report


def composites_of_rows(rows: list[dict]):
    """The composites' ok rows with a source id (what the clean-photo drop compares against), from a
    run's prediction rows."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "status": "ok",
                "key": r["key"],
                "correct": r["correct"],
                "correct_top5": r["correct_top5"],
                "source_id": r["meta"].get("source_id"),
                "group": r["meta"].get("group"),
                "size": r["meta"].get("size"),
                "label_class": r["label_class"],
            }
            for r in rows
            if r["status"] == "ok" and r["meta"].get("source_id")
        ],
        columns=["status", "key", "correct", "correct_top5", "source_id", "group", "size", "label_class"],
    )


def composites_of_predictions(path: Path):
    """The same rows from a saved predictions.parquet (to add a pass without predicting again)."""
    frame, _ = read_predictions(path)
    ok = frame[(frame["status"] == "ok") & frame["source_id"].notna() & (frame["source_id"] != "")]
    columns = ["status", "key", "correct", "correct_top5", "source_id", "group", "size", "label_class"]
    return ok[columns].reset_index(drop=True)


def classify_passes(composites, classifier, loaded: LoadedModel, settings: RunSettings, passes) -> dict:
    """The model's side of the clean-photo and bare-background passes named in `passes` ("clean",
    "background_only"): each pass's predictions, decoded in `--workers` DataLoader workers as the
    composites are, nothing written (`write_passes` writes them)."""
    classified: dict = {}
    labels = {str(s): int(c) for s, c in zip(composites["source_id"], composites["label_class"])}
    if "clean" in passes:
        classified["clean"] = clean_predictions(
            classifier,
            loaded.preprocessing,
            settings.clean_root,
            settings.clean_split,
            labels,
            settings.batch_size,
            settings.progress,
            settings.workers,
        )
    if "background_only" in passes:
        classified["background_only"] = background_predictions(
            classifier,
            loaded.preprocessing,
            settings.parts_dir,
            settings.batch_size,
            settings.progress,
            settings.workers,
        )
    return classified


def write_passes(
    classified: dict, composites, settings: RunSettings, folder: ModelFolder | PlainFolder, announce
) -> dict:
    """The files and report sections of the passes `classify_passes` ran; `composites` are the
    composites' rows the clean photos' drop is measured against."""
    extras: dict = {}
    if "clean" in classified:
        clean, missing, errors = classified["clean"]
        with folder.writing(CLEAN_ACCURACY_CSV) as path:
            write_class_accuracy(clean, path)
        extras["clean"] = {
            **clean_drop(clean, composites.drop(columns=["label_class"]), settings.bootstrap),
            "missing": missing,
            "errors": errors,
            "file": CLEAN_ACCURACY_CSV,
            "preprocessing": "the whole photo through the same preprocessing as the composites",
        }
        announce(f"clean photos: {len(clean)} classified, {missing} not found under the clean root")
    if "background_only" in classified:
        frame, errors = classified["background_only"]
        with folder.writing(BACKGROUND_ACCURACY_CSV) as path:
            rows = write_class_accuracy(frame, path)
        extras["background_only"] = {
            "images": int(len(frame)),
            "top1": float(frame["correct"].mean()) if len(frame) else 0.0,
            "classes": len(rows),
            "file": BACKGROUND_ACCURACY_CSV,
            "errors": errors,
        }
    return extras


def model_only_passes(
    composites,
    classifier,
    loaded: LoadedModel,
    settings: RunSettings,
    folder: ModelFolder | PlainFolder,
    announce,
    passes,
) -> dict:
    """The clean-photo and bare-background passes named in `passes`, classified and written."""
    classified = classify_passes(composites, classifier, loaded, settings, passes)
    return write_passes(classified, composites, settings, folder, announce)


def requested_passes(settings: RunSettings) -> list[str]:
    return [
        name
        for name, given in (("clean", settings.clean_root), ("background_only", settings.parts_dir))
        if given is not None
    ]


def evaluation_identity(report: dict) -> dict:
    """What makes two evaluations the same (`leaderboard.run_identity`), and for a zero-shot model its
    prompt sets: other templates, class names or label space make another evaluation."""
    identity = run_identity(report)
    prompts = prompt_identity(report)
    if prompts is not None:
        identity["prompt_sets"] = prompts
    return identity


def _differences(previous: dict, identity: dict) -> str:
    earlier = evaluation_identity(previous)
    return ", ".join(key.replace("_", " ") for key in identity if earlier.get(key) != identity[key])


def _other_evaluation(folder: Path, spec: str, previous: dict, identity: dict) -> OwnedFolderError:
    return OwnedFolderError(
        f"{folder} holds an evaluation of {spec} with another {_differences(previous, identity)}; "
        "pass --overwrite to replace it, or choose another --out"
    )


EVALUATED, SKIPPED, PASSES_ADDED = "evaluated", "skipped", "passes added"  # what a ModelWork did


@dataclass
class ModelWork:
    """The model's part of one evaluation, done where the model runs (this process, a worker
    process, a Ray actor) with nothing written: all the process holding the output folder needs to
    write the model's files. Plain data, so it can be pickled back from a worker."""

    spec: str
    name: str  # the model folder's name
    model: dict  # LoadedModel.describe()
    identity: dict  # planned_identity: what makes two evaluations the same
    action: str  # EVALUATED, SKIPPED or PASSES_ADDED
    previous: dict | None = None  # the folder's eval.json when the work was planned
    predictions: bytes | None = None  # the predictions.parquet of an EVALUATED run, as written
    part_run: object = None  # a part's PredictionRun (rows, errors, metadata), merged by the sweep
    passes: dict = field(default_factory=dict)  # classify_passes' output
    composites: object = None  # the composites' rows the clean photos' drop needs (a DataFrame)


def model_work(
    loaded: LoadedModel,
    source,
    settings: RunSettings,
    out: OwnedFolder | FolderRecord,
    announce: Callable[[str], None] = print,
    folder_name: str | None = None,
) -> ModelWork:
    """Everything of one evaluation that needs the model: plan (its label space), the decision to skip
    a folder already holding this evaluation or to add only the missing passes, the predictions and
    the passes. `out` is the output folder held by this process (its model folder is checked for
    writing now, before any work) or, in a worker, a read-only record of it."""
    name = folder_name or eval_folder.folder_name(loaded, settings.label_space, settings.limit)
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
    path = out.root / name
    if isinstance(out, OwnedFolder):
        ModelFolder(out, name).check_writable(PREDICTIONS_NAME, EVAL_JSON, EVAL_MD, ENTRY_JSON)
        carried_info(path / ENTRY_JSON, loaded.describe())  # a broken entry.json is refused before any work
    previous = checked_report(path / EVAL_JSON) if (path / EVAL_JSON).exists() else None
    work = ModelWork(loaded.spec, name, loaded.describe(), identity, EVALUATED, previous)
    if previous is not None and not settings.overwrite:
        if evaluation_identity(previous) != identity:
            raise _other_evaluation(path, loaded.spec, previous, identity)
        missing = [section for section in requested_passes(settings) if not previous.get(section)]
        if not missing:
            announce(f"{loaded.spec}: already evaluated on this data revision in {name}/ (pass --overwrite to redo it)")
            work.action = SKIPPED
            return work
        if out.owns(f"{name}/{PREDICTIONS_NAME}"):  # otherwise the whole evaluation runs again
            adding = " and ".join(missing)
            announce(f"{loaded.spec}: already evaluated in {name}/; adding {adding} from its saved predictions")
            classifier = Classifier(
                loaded, plan.space, resolve_device(settings.device), settings.amp, settings.channels_last, announce
            )
            work.composites = composites_of_predictions(path / PREDICTIONS_NAME)
            work.passes = classify_passes(work.composites, classifier, loaded, settings, missing)
            work.action = PASSES_ADDED
            return work
    if settings.part is not None:  # one part of the data: its reader, proved below like the whole one
        from evaluation.predicting.data import EvalBatches, SourceSplit

        index, count = settings.part
        where = SourceSplit(source, settings.config, settings.split)
        dataset = EvalBatches(where, loaded.preprocessing, settings.batch_size, settings.limit, index, count)
        plan = replace(plan, dataset=dataset)
    verify_plan(plan, settings.split, settings.limit, announce)  # points the reader at the proved files
    if settings.part is not None:  # the sweep merges the parts' rows and writes them
        run = predictions_for(loaded, source, settings, plan=plan, announce=announce)
        run.classifier = None  # stays in the worker: a module is not sent back
        work.part_run = run
        return work
    run = predictions_for(loaded, source, settings, plan=plan, announce=announce)
    with tempfile.TemporaryDirectory(prefix="hsi-eval-") as tmp:  # the bytes write_predictions writes
        written = write_predictions(Path(tmp) / PREDICTIONS_NAME, run.rows, run.errors, run.metadata)
        work.predictions = written.read_bytes()
    passes = requested_passes(settings)
    if passes:
        work.composites = composites_of_rows(run.rows)
        work.passes = classify_passes(work.composites, run.classifier, loaded, settings, passes)
    return work


def write_work(
    work: ModelWork,
    owned: OwnedFolder,
    settings: RunSettings,
    announce: Callable[[str], None] = print,
    entry: EntryInfo | None = None,
) -> EvalResult:
    """Write what `model_work` did into its model folder of `owned` and analyse it: the reports, the
    plots and the leaderboard entry (described by `entry`, field by field over the folder's
    entry.json). Checked again here, before the first write: a folder written since the work was
    planned (two models of one run sharing a folder) is treated as a run in that order would."""
    folder = ModelFolder(owned, work.name)
    folder.check_writable(PREDICTIONS_NAME, EVAL_JSON, EVAL_MD, ENTRY_JSON)
    current = checked_report(folder.path / EVAL_JSON) if (folder.path / EVAL_JSON).exists() else None
    kept = carried_info(folder.path / ENTRY_JSON, work.model)  # read (and checked) before any write
    description = (entry or EntryInfo()).over(kept)
    if current != work.previous and current is not None and not settings.overwrite:
        if evaluation_identity(current) != work.identity:
            raise _other_evaluation(folder.path, work.spec, current, work.identity)
        announce(f"{work.spec}: already evaluated on this data revision in {work.name}/ by this run")
        work = replace(work, action=SKIPPED, previous=current)
    if folder.owns(FAILED_JSON):  # an earlier run's failure of this model, now evaluated
        owned.remove(folder.relative(FAILED_JSON))
    if work.action == SKIPPED:
        _describe_again(folder, work.previous, description, kept, announce)
        return EvalResult(folder.path, work.previous, skipped=True)
    predictions = folder.path / PREDICTIONS_NAME
    if work.action == PASSES_ADDED:
        extras = {key: work.previous[key] for key in MODEL_ONLY if work.previous.get(key)}
    else:
        checked_predictions(work.predictions, work.spec)  # refused here, the folder is left as it was
        folder.write_bytes(PREDICTIONS_NAME, work.predictions)
        extras = {}
    extras.update(write_passes(work.passes, work.composites, settings, folder, announce))
    return EvalResult(folder.path, analyse(predictions, folder, settings.bootstrap, extras, description))


def checked_predictions(data: bytes, spec: str) -> None:
    """Read a run's predictions.parquet bytes as `analyse` will, before they are written: a table it
    would refuse (a NaN probability) never leaves a model folder holding only its predictions."""
    with tempfile.TemporaryDirectory(prefix="hsi-eval-") as tmp:
        path = Path(tmp) / PREDICTIONS_NAME
        path.write_bytes(data)
        try:
            read_predictions(path)
        except HsiError as exc:  # named by the model, not by the temporary copy
            reason = str(exc).replace(str(path), PREDICTIONS_NAME)
            raise ModelError(f"{spec}: its predictions cannot be reported, so nothing was written: {reason}") from None


def evaluate_model(
    loaded: LoadedModel,
    source,
    out_dir: Path | OwnedFolder,
    settings: RunSettings,
    announce: Callable[[str], None] = print,
    folder_name: str | None = None,
    entry: EntryInfo | None = None,
) -> EvalResult:
    """Evaluate one model into OUT/<model folder>/, unless the same evaluation is already there.

    `out_dir` is the output folder, held by the caller (`hsi eval` holds it for all its models and
    the leaderboard) or, given as a path, held here for this one model. `entry` describes the model
    in its leaderboard entry, field by field over what the folder's entry.json said of it."""
    if not isinstance(out_dir, OwnedFolder):
        with OwnedFolder(Path(out_dir), EVAL_KIND) as owned:
            return evaluate_model(loaded, source, owned, settings, announce, folder_name, entry)
    work = model_work(loaded, source, settings, out_dir, announce, folder_name)
    return write_work(work, out_dir, settings, announce, entry)


def _describe_again(
    folder: ModelFolder, previous: dict, description: EntryInfo, kept: EntryInfo, announce: Callable[[str], None]
) -> None:
    """A skipped model's entry.json with a new description (or written for a folder evaluated before
    entries existed), from its own unedited report and predictions; otherwise say how to redo it."""
    entry = folder.path / ENTRY_JSON
    if entry.exists() and description == kept:
        return
    if folder.owns(EVAL_JSON) and folder.owns(PREDICTIONS_NAME):
        write_entry(folder, previous, folder.path / PREDICTIONS_NAME, description)
        announce(f"  {folder.name}/{ENTRY_JSON} written with the description given")
    else:
        announce(
            f"  {folder.name}/{ENTRY_JSON} is not rewritten (its eval.json or predictions were edited): run hsi eval "
            f"--from {folder.name}/{PREDICTIONS_NAME} with the entry flags to write it"
        )


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
    from evaluation.predicting.predict import source_display_name

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
    identity = run_identity(report)
    prompts = run_prompt_identity(loaded.zero_shot)
    if prompts is not None:
        identity["prompt_sets"] = prompts
    return identity


def load_existing(folder: Path) -> dict:
    """A model folder's eval.json, checked (one line naming the file and field otherwise)."""
    return checked_report(Path(folder) / EVAL_JSON)


def model_only_sections(previous: Path) -> dict:
    """The sections only the model could compute (clean photos, bare backgrounds), kept from the
    run's own eval.json beside the predictions, so recomputing (`--from`) never drops them; each is
    checked (one line naming the file and field) before it goes into a report."""
    if not previous.exists() and not previous.is_symlink():
        return {}
    report = read_json(previous, "eval.json")
    checked_model_only(report, previous)  # one line naming the file and the field when one is broken
    kept = {key: dict(report[key]) for key in MODEL_ONLY if report.get(key) is not None}
    if kept:
        kept["carried_over"] = (
            f"{', '.join(sorted(kept))}: from the model run's eval.json (their intervals keep its bootstrap settings)"
        )
    return kept


__all__ = [
    "RunSettings",
    "EvalResult",
    "analyse",
    "evaluate_model",
    "model_work",
    "write_work",
    "ModelWork",
    "planned_identity",
    "already_evaluated",
    "load_existing",
    "model_only_sections",
]
