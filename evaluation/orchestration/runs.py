"""What `hsi eval` does, as functions the command line calls: claim the output folder (checking every
report already in it first), evaluate a list of models into it (here, in worker processes or on Ray:
evaluation.orchestration.sweep) with the leaderboard rebuilt after each, or recompute one model's reports from its
predictions alone (`--from`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from builder.core.interrupts import ctrl_c_stops
from builder.core.owned import RECORD_NAME, OwnedFolder, OwnedFolderError
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.analysis.report import EVAL_JSON
from evaluation.model_formats.models import ModelOptions
from evaluation.predicting.data import SourceSplit, read_dataset_manifest
from evaluation.predicting.predict import source_display_name
from evaluation.predicting.predictions import PREDICTIONS_NAME
from evaluation.ranking.entries import EntryInfo
from evaluation.ranking.leaderboard import (
    DATA_KEYS,
    LEADERBOARD_CSV,
    LEADERBOARD_MD,
    leaderboard_models,
    model_failures,
    write_leaderboard,
)

from .eval_folder import EVAL_KIND, ModelFolder, claimed, scored_folder_name
from .pipeline import EvalResult, RunSettings, analyse, model_only_sections
from .result import Evaluation
from .sweep import ModelFailure, run_sweep, sweep_tasks
from .sweep_data import prove_sweep_data


@contextmanager
def eval_folder(out: Path) -> Iterator[OwnedFolder]:
    """`--out`, held for the run: every eval.json, entry.json and failed.json already in it is checked (a
    broken one of another model is refused before any model runs), and so are the leaderboard files (a
    link, a user's file)."""
    with claimed(out) as owned:
        leaderboard_models(owned.root)
        model_failures(owned.root)
        for name in (LEADERBOARD_CSV, LEADERBOARD_MD):
            owned.path(name)
        yield owned


def data_revision(source, config: str | None, split: str, limit: int | None) -> dict:
    """The data revision a run measures (leaderboard.DATA_KEYS and limit), from the source's manifest,
    read once before any model: the leaderboard's, and the one a failed model is recorded against."""
    manifest = read_dataset_manifest(SourceSplit(source, config, split))
    return {
        "source": source_display_name(source),
        "config": manifest.get("config"),
        "split": split,
        "fingerprint": manifest.get("fingerprint"),
        "limit": limit,
    }


@dataclass
class SweepSummary:
    results: list[EvalResult]  # the models evaluated or skipped, in the order given
    failures: list[ModelFailure]
    md_path: Path
    rows: list[dict]  # the leaderboard's rows, failed models included


def evaluate_all(
    specs: Sequence[tuple[str, ModelOptions]],
    source,
    owned: OwnedFolder,
    settings: RunSettings,
    announce: Callable[[str], None],
    on_result: Callable[[str, EvalResult], None] = lambda spec, result: None,
    entries: Sequence[EntryInfo | None] | None = None,
    *,
    runner: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    slurm=None,  # builder.core.slurm_runner.SlurmOptions of --runner slurm
) -> SweepSummary:
    """Evaluate each model (spec, options) into its folder of `owned` (its leaderboard entry described
    by the same item of `entries`) with the runner given; each model's reports are written as it
    finishes and the leaderboard is rebuilt from every model folder (eval.json, failed.json) after
    each one. Several models: a failed one is a leaderboard row and the rest still run."""
    data = data_revision(source, settings.config, settings.split, settings.limit)
    identity = {key: data[key] for key in DATA_KEYS}
    parallel = runner in ("ray", "slurm") or ((workers or 1) > 1 and len(specs) > 1)
    # every model reads the same shards: proved once here, a changed one refuses the whole run in one line
    proved = prove_sweep_data(source, settings, announce) if len(specs) > 1 else ()
    tasks = sweep_tasks(specs, source, settings, parallel, proved)
    board: list = []

    def rebuild() -> None:
        board[:] = [write_leaderboard(owned, identity)]

    done: list[str] = []

    def finished(spec: str, result: EvalResult) -> None:
        done.append(spec)
        on_result(spec, result)

    def stopped() -> str:
        return (
            f"interrupted: {len(done)} of the {len(specs)} models are evaluated, their reports and the leaderboard "
            "written; run the same command again to resume (evaluated models are skipped)"
        )

    with ctrl_c_stops(stopped):
        sweep = run_sweep(
            tasks,
            owned,
            data,
            runner=runner,
            workers=workers,
            ray_address=ray_address,
            slurm=slurm,
            entries=entries,
            announce=announce,
            on_result=finished,
            after_each=rebuild,
            worker_logs=settings.progress,
        )
    if not board:
        rebuild()
    _, md_path, rows = board[0]
    return SweepSummary([r for r in sweep.results if r is not None], sweep.failures, md_path, rows)


def save_scored(
    evaluation: Evaluation, out: Path, file: Path, entry: EntryInfo, overwrite: bool = False
) -> tuple[Path, Path]:
    """`hsi eval --predictions FILE`: the scored `evaluation` saved into its model folder of `out`
    (named after the entry's name, else FILE's stem) and the leaderboard rebuilt, as a model run
    leaves them; (the model folder, leaderboard.md). Every report already in `out` is checked, and
    another model's evaluation in that folder refused unless `overwrite`, before anything is written."""
    with eval_folder(out) as owned:
        folder = evaluation.save_into(owned, scored_folder_name(file, entry.name), entry, overwrite=overwrite)
        data = evaluation.report["data"]
        _, md_path, _ = write_leaderboard(owned, {key: data.get(key) for key in DATA_KEYS})
    return folder, md_path


def report_folder(path: Path, out: Path | None) -> tuple[OwnedFolder, str]:
    """(OwnedFolder, model folder name) where `--from PATH` writes: `--out` itself when given, else the
    model folder PATH lies in, inside the `hsi eval` output folder that recorded it (otherwise PATH's
    own folder, which OwnedFolder refuses unless it holds nothing foreign)."""
    if out is not None:
        return OwnedFolder(out, EVAL_KIND), ""
    model_dir = path.parent
    if not (model_dir.parent / RECORD_NAME).is_file():
        return OwnedFolder(model_dir, EVAL_KIND), ""
    try:
        with OwnedFolder(model_dir.parent, EVAL_KIND) as root:
            recorded = root.owns(f"{model_dir.name}/{path.name}") and path.name == PREDICTIONS_NAME
    except OwnedFolderError:
        recorded = False
    if recorded and not model_dir.is_symlink():
        return OwnedFolder(model_dir.parent, EVAL_KIND), model_dir.name
    return OwnedFolder(model_dir, EVAL_KIND), ""


def recompute_from(
    path: Path, out: Path | None, bootstrap: BootstrapSettings, entry: EntryInfo | None = None
) -> tuple[ModelFolder, dict]:
    """Every report of one model from its predictions file alone (and the model-only sections, clean
    photos and backgrounds, of the eval.json beside it); its leaderboard entry is described by
    `entry`, field by field over what the entry.json beside the predictions said."""
    owned, name = report_folder(path, out)
    with owned:
        folder = ModelFolder(owned, name)
        extras = model_only_sections(path.parent / EVAL_JSON)
        return folder, analyse(path, folder, bootstrap, extras, entry)
