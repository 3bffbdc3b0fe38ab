"""Read the `hsi eval` output folders a site is built from: each model's eval.json, its
predictions.parquet and the plots it wrote, all as someone else's files.

An EVAL_DIR is an `hsi eval --out` folder (one subfolder per model) or one model folder (an
eval.json of its own, as `hsi eval --from ... --out` writes). eval.json goes through the
leaderboard's `checked_report` and `sections.checked_metrics`, the predictions through
`read_predictions`; the two must describe one run (same model, same data revision, as many
samples), so a swapped file is refused rather than shown under the wrong name. No link is followed:
not the folder, not a model folder, not a file, not a plot.
"""

from __future__ import annotations

import io
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import HsiError, InputError, printable
from builder.core.names import check_path_component, check_relative_path
from builder.core.owned import check_relative
from builder.core.untrusted import Fields
from evaluation.analysis.report import EVAL_JSON
from evaluation.predicting.predictions import PREDICTIONS_NAME, read_predictions
from evaluation.ranking.entries import ENTRY_JSON, read_entry
from evaluation.ranking.leaderboard import checked_report, leaderboard_row, model_failures, model_reports

from .sections import checked_metrics, checked_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
REVISION_KEYS = ("config", "split", "fingerprint")  # what makes two evaluations comparable


class ReportInputError(InputError):
    """An eval folder the site cannot be built from; the message names the file and what to do."""


def site_name(name: object, what: str) -> str:
    """A name from the inputs that becomes one file or folder name of the site: the project's name
    rule (builder.core.names), and the output folder's own, stricter one (no ':')."""
    try:
        check_path_component(name, what)
        check_relative(str(name))
    except HsiError as exc:  # the name rule (UnsafeNameError) or the folder's (UsageError)
        raise ReportInputError(f"{what} {printable(repr(name))} cannot name a file of the site ({exc})") from None
    return str(name)


@dataclass
class ModelEval:
    """One evaluated model: its checked report, metrics, leaderboard row, predictions and plots."""

    number: int  # the position of its EVAL_DIR on the command line, from 1
    folder: Path
    report: dict
    run: dict  # sections.checked_run: what the page says about the run
    metrics: dict  # sections.checked_metrics
    row: dict  # evaluation.ranking.leaderboard.leaderboard_row
    predictions: object  # pandas DataFrame, every row (error rows too)
    plots: list[tuple[str, bytes]]  # (file name, PNG bytes), in eval.json's order
    entry: dict | None = None  # its leaderboard entry (evaluation.ranking.entries), when the folder has one

    @property
    def name(self) -> str:
        """The model's name on the leaderboard: its entry's, else its spec."""
        return self.entry["name"] if self.entry else self.spec

    @property
    def slug(self) -> str:
        """Its page's folder: unique even when two EVAL_DIRs hold a model folder of the same name."""
        return f"{self.number}-{self.folder.name}"

    @property
    def spec(self) -> str:
        return self.run["spec"]

    @property
    def revision(self) -> tuple:
        """(config, split, fingerprint): the data revision the model was measured on."""
        return tuple(self.report["data"].get(k) for k in REVISION_KEYS)


def _model_folders(eval_dir: Path) -> list[tuple[Path, dict]]:
    shown = printable(str(eval_dir))
    if eval_dir.is_symlink():
        raise ReportInputError(f"EVAL_DIR {shown} is a link; links are never followed: pass the folder it leads to")
    if not eval_dir.is_dir():
        raise ReportInputError(f"EVAL_DIR {shown} is not a folder: pass an `hsi eval --out` folder")
    own = eval_dir / EVAL_JSON
    if own.exists() or own.is_symlink():
        return [(eval_dir, checked_report(own))]
    found = [(eval_dir / name, report) for name, report in model_reports(eval_dir)]
    if not found:
        raise ReportInputError(
            f"EVAL_DIR {shown} holds no model folder with an {EVAL_JSON}: pass an `hsi eval --out` folder"
        )
    return found


def read_plain_file(folder: Path, relative: str, what: str) -> bytes:
    """The bytes of `folder/relative`, every step opened without following a link (so nothing swapped
    in meanwhile is followed either), refused unless it is a regular file."""
    parts = check_relative_path(relative, what)
    no_link = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    where = printable(str(folder / relative))
    opened: list[int] = []
    try:
        opened.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | no_link))
        for n, part in enumerate(parts):
            last = n == len(parts) - 1
            flags = os.O_RDONLY | (0 if last else os.O_DIRECTORY) | no_link
            opened.append(os.open(part, flags, dir_fd=opened[-1]))
        if not stat.S_ISREG(os.fstat(opened[-1]).st_mode):
            raise ReportInputError(f"{where}: {what} is not a regular file")
        with os.fdopen(opened.pop(), "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise ReportInputError(f"{where}: {what} not found; its {EVAL_JSON} lists it") from None
    except OSError as exc:
        raise ReportInputError(
            f"{where}: a link or not a plain file or folder on the way to the {what} ({exc.strerror}); links are "
            "never followed: replace it with the real file"
        ) from None
    finally:
        for fd in opened:
            os.close(fd)


def _plots(folder: Path, report: dict) -> list[tuple[str, bytes]]:
    """The PNG plots eval.json lists, each checked to decode as a PNG."""
    from PIL import Image

    listed = Fields(report, folder / EVAL_JSON).list("plots", [])
    plots = []
    for n, relative in enumerate(listed):
        if not isinstance(relative, str):
            raise ReportInputError(f"{printable(str(folder / EVAL_JSON))}: plots[{n}] is not a file name")
        name = site_name(relative.rsplit("/", 1)[-1], "plot file")
        data = read_plain_file(folder, relative, "plot")
        try:
            if not data.startswith(PNG_SIGNATURE):
                raise ValueError("no PNG signature")
            with Image.open(io.BytesIO(data)) as image:
                image.verify()
        except Exception:  # any decoder failure: the file is not a plot we copy
            raise ReportInputError(
                f"{printable(str(folder / relative))} is not a PNG image; the site copies only the plots hsi eval drew"
            ) from None
        plots.append((name, data))
    return plots


def _predictions(folder: Path, report: dict, metrics: dict):
    """The predictions table of the run the report describes (one line when it is another run's)."""
    name = Fields(report, folder / EVAL_JSON).object("files", None).string("predictions", PREDICTIONS_NAME)
    path = folder / site_name(name, "predictions file")
    frame, metadata = read_predictions(path)
    shown = printable(str(path))
    if metadata["model"]["spec"] != report["model"]["spec"]:
        raise ReportInputError(
            f"{shown} holds the predictions of {printable(metadata['model']['spec'])}, not of the "
            f"{printable(report['model']['spec'])} its {EVAL_JSON} reports: pass the folder hsi eval wrote, unedited"
        )
    for key in REVISION_KEYS:
        if metadata["data"].get(key) != report["data"].get(key):
            raise ReportInputError(
                f"{shown} was made on data {key} {printable(str(metadata['data'].get(key)))}, its {EVAL_JSON} "
                f"reports {printable(str(report['data'].get(key)))}: pass the folder hsi eval wrote, unedited"
            )
    ok = int((frame["status"] == "ok").sum())
    if ok != metrics["samples"]:
        raise ReportInputError(
            f"{shown} holds {ok} evaluated samples, its {EVAL_JSON} counts {metrics['samples']}: they are not one "
            "run's; pass the folder hsi eval wrote, unedited"
        )
    return frame


def _entry(folder: Path, report: dict) -> dict | None:
    """The folder's entry.json, checked, and checked to describe the run its eval.json reports."""
    path = folder / ENTRY_JSON
    if not path.exists() and not path.is_symlink():
        return None  # evaluated before entries existed: the spec names the model
    entry = read_entry(path)  # refuses a link, a folder and every malformed field in one line
    same = entry["model"]["spec"] == report["model"]["spec"] and all(
        entry["data"].get(key) == report["data"].get(key) for key in REVISION_KEYS
    )
    if not same:
        raise ReportInputError(
            f"{printable(str(path))} describes {printable(entry['model']['spec'])} on another run than its "
            f"{EVAL_JSON} reports: pass the folder hsi eval wrote, unedited"
        )
    return entry


def collect_evals(eval_dirs: list[Path], progress: bool = False) -> list[ModelEval]:
    """Every model of every EVAL_DIR, checked, in command-line order then folder-name order."""
    from tqdm import tqdm

    seen: set[Path] = set()
    listed = []
    for number, eval_dir in enumerate(map(Path, eval_dirs), start=1):
        resolved = eval_dir.resolve()
        if resolved in seen:
            raise ReportInputError(f"EVAL_DIR {printable(str(eval_dir))} is given twice; give each folder once")
        seen.add(resolved)
        listed += [(number, folder, report) for folder, report in _model_folders(eval_dir)]
    models = []
    for number, folder, report in tqdm(
        listed, desc="report: models", unit="model", disable=not progress, file=sys.stderr
    ):
        site_name(f"{number}-{folder.name}", "model folder name")
        where = folder / EVAL_JSON
        metrics = checked_metrics(report, where)
        models.append(
            ModelEval(
                number=number,
                folder=folder,
                report=report,
                run=checked_run(report, where),
                metrics=metrics,
                row=leaderboard_row(report, folder.name),
                predictions=_predictions(folder, report, metrics),
                plots=_plots(folder, report),
                entry=_entry(folder, report),
            )
        )
    return models


def collect_failures(eval_dirs: list[Path]) -> list[tuple[tuple, dict]]:
    """(data revision, checked failed.json) of every model of a sweep that failed (`hsi eval
    --models` records one per failed model folder), in command-line then folder-name order."""
    failures = []
    for eval_dir in map(Path, eval_dirs):
        if (eval_dir / EVAL_JSON).exists() or eval_dir.is_symlink():
            continue  # a single model folder, or a link collect_evals refuses
        for _, record in model_failures(eval_dir):
            failures.append((tuple(record["data"].get(key) for key in REVISION_KEYS), record))
    return failures
