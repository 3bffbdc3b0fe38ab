"""What `hsi eval` does, as functions the command line calls: claim the output folder (checking every
report already in it first), evaluate a list of loaded models into it with the leaderboard last, or
recompute one model's reports from its predictions alone (`--from`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from builder.core.owned import RECORD_NAME, OwnedFolder, OwnedFolderError

from .bootstrap import BootstrapSettings
from .entries import EntryInfo
from .eval_folder import EVAL_KIND, ModelFolder, claimed
from .leaderboard import LEADERBOARD_CSV, LEADERBOARD_MD, data_identity, model_reports, write_leaderboard
from .models import LoadedModel
from .pipeline import EvalResult, RunSettings, analyse, evaluate_model, model_only_sections
from .predictions import PREDICTIONS_NAME
from .report import EVAL_JSON


@contextmanager
def eval_folder(out: Path) -> Iterator[OwnedFolder]:
    """`--out`, held for the run: every eval.json already in it is checked (a broken one of another
    model is refused before any model runs), and so are the leaderboard files (a link, a user's file)."""
    with claimed(out) as owned:
        model_reports(owned.root)
        for name in (LEADERBOARD_CSV, LEADERBOARD_MD):
            owned.path(name)
        yield owned


def evaluate_all(
    models: Sequence[LoadedModel],
    source,
    owned: OwnedFolder,
    settings: RunSettings,
    announce: Callable[[str], None],
    on_result: Callable[[LoadedModel, EvalResult], None] = lambda loaded, result: None,
    entries: Sequence[EntryInfo | None] | None = None,
) -> tuple[list[EvalResult], Path, list[dict]]:
    """Evaluate each model into its folder of `owned` (its leaderboard entry described by the same
    item of `entries`), then rebuild the leaderboard from every model folder's eval.json; returns the
    results, the leaderboard's Markdown path and its rows."""
    results = []
    for n, loaded in enumerate(models):
        entry = entries[n] if entries is not None else None
        result = evaluate_model(loaded, source, owned, settings, announce=announce, entry=entry)
        results.append(result)
        on_result(loaded, result)
    _, md_path, rows = write_leaderboard(owned, data_identity(results[0].report))
    return results, md_path, rows


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
