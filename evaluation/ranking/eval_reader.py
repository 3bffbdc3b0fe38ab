"""The one reader of an evaluation folder: what `hsi report` (the site), the leaderboards,
`hsi release --results` and `hsi leaderboard verify` read of what `hsi eval` wrote.

A model folder holds eval.json, predictions.parquet, the plots eval.json lists and entry.json; an
`hsi eval --out` folder holds one model folder each (or, written by `hsi eval --from`, an eval.json
of its own). Each file is someone else's and is checked once, here: eval.json when the folder is
read (`checked_report`: every field any reader uses, by `report_fields`' rules); entry.json (by
`entries.read_entry`, and against the run eval.json reports), the predictions table (it must be that
run's: same model, same data revision, as many samples) and each plot (a PNG) when a reader asks
for them, so the leaderboard never opens a plot and the card never an entry. No link is followed:
not the folder given, a model folder, a file, nor a folder on the way to a plot. Every refusal is
one line naming the file and what to do.
"""

from __future__ import annotations

import io
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import HsiError, InputError, UsageError, printable
from builder.core.names import check_path_component, check_relative_path
from builder.core.untrusted import Fields, UntrustedInput, read_json, read_parquet, regular_file
from evaluation.analysis.report import EVAL_JSON, REPORT_SCHEMA
from evaluation.predicting.predictions import METADATA_KEY, PREDICTIONS_NAME, read_predictions

from .entries import ENTRY_JSON, entry_path, read_entry
from .prompt_fields import checked_prompt_fields
from .report_fields import SHA256, checked_metrics, checked_run
from .verification_record import Verified, read_verification

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
REVISION_KEYS = ("config", "split", "fingerprint")  # what makes two evaluations comparable
UNEDITED = "pass the folder hsi eval wrote, unedited"


class EvalFolderError(InputError):
    """An evaluation folder (or a file in it) that cannot be read as one; the message says why."""


@dataclass(frozen=True)
class EvaluatedModel:
    """One model's evaluation folder with its eval.json checked; its entry.json, predictions and plots
    are read (and checked) when a reader asks for them, so each reads only what it shows."""

    folder: Path
    report: dict  # eval.json, every field checked
    run: dict  # report_fields.checked_run: the model, preprocessing, label space, data revision
    metrics: dict  # report_fields.checked_metrics
    predictions_file: Path  # the table eval.json names, in the folder (not yet read)
    plot_files: tuple[str, ...]  # the plots eval.json lists, relative to the folder (not yet read)
    prompt_sets: dict | None = None  # a zero-shot model's prompt sets and their differences (prompt_fields)
    answers: dict | None = None  # a vision-language model's answers in words (prompt_fields)

    @property
    def spec(self) -> str:
        return self.run["spec"]

    @property
    def revision(self) -> tuple:
        """(config, split, fingerprint): the data revision the model was measured on."""
        return tuple(self.run[key] for key in REVISION_KEYS)

    def read_predictions(self):
        """The predictions table (a DataFrame, error rows too) of the run eval.json reports; one line
        when it is another run's."""
        frame, metadata = read_predictions(self.predictions_file)
        shown = printable(str(self.predictions_file))
        if metadata["model"]["spec"] != self.spec:
            raise EvalFolderError(
                f"{shown} holds the predictions of {printable(metadata['model']['spec'])}, not of the "
                f"{printable(self.spec)} its {EVAL_JSON} reports: {UNEDITED}"
            )
        for key in REVISION_KEYS:
            if metadata["data"].get(key) != self.run[key]:
                raise EvalFolderError(
                    f"{shown} was made on data {key} {printable(str(metadata['data'].get(key)))}, its {EVAL_JSON} "
                    f"reports {printable(str(self.run[key]))}: {UNEDITED}"
                )
        ok = int((frame["status"] == "ok").sum())
        if ok != self.metrics["samples"]:
            counted = self.metrics["samples"] if self.metrics["samples"] is not None else "no samples"
            raise EvalFolderError(
                f"{shown} holds {ok} evaluated samples, its {EVAL_JSON} counts {counted}: they are not one run's; "
                f"{UNEDITED}"
            )
        return frame

    def read_entry(self) -> dict | None:
        """The folder's entry.json, checked, and checked to describe the run its eval.json reports;
        None when the folder has none (evaluated before entries existed: the spec names the model)."""
        path = self.folder / ENTRY_JSON
        if not path.exists() and not path.is_symlink():
            return None
        entry = read_entry(path)  # refuses a link, a folder and every malformed field in one line
        same = entry["model"]["spec"] == self.spec and all(
            entry["data"].get(key) == self.run[key] for key in REVISION_KEYS
        )
        if not same:
            raise EvalFolderError(
                f"{printable(str(path))} describes {printable(entry['model']['spec'])} on another run than its "
                f"{EVAL_JSON} reports: {UNEDITED}"
            )
        return entry

    def read_verification(self, entry: dict | None) -> Verified | None:
        """What `hsi leaderboard verify --record` proved of the folder's entry (`entry`, as
        `read_entry` gave it): its verification.json, checked; None without an entry or a record."""
        if entry is None:
            return None
        return read_verification(self.folder / ENTRY_JSON, entry)

    def training(self) -> dict | None:
        """{method, seed, checkpoint, checkpoint_sha256} when the predictions were made by an `hsi train`
        run (it records them in the table's metadata), else None; None too when there is no table."""
        path = self.predictions_file
        if not (path.exists() or path.is_symlink()):
            return None
        raw = (read_parquet(path, "predictions table").schema.metadata or {}).get(METADATA_KEY)
        try:
            training = json.loads(raw).get("training") if raw else None
        except (ValueError, AttributeError):
            raise UntrustedInput(f"{printable(str(path))}: its hsi metadata is not a JSON object") from None
        if training is None:
            return None
        fields = Fields(training, path, "metadata.training")
        return {
            "method": fields.string("method"),
            "seed": fields.integer("seed"),
            # the weights the run kept, when the run records them (its checkpoint file and sha256)
            "checkpoint": fields.string("checkpoint", None),
            "checkpoint_sha256": fields.string("checkpoint_sha256", None, pattern=SHA256),
        }

    def plot(self, relative: str) -> bytes:
        """The PNG bytes of one of `plot_files`, read without following a link."""
        data = read_plain_file(self.folder, relative, "plot")
        if not data.startswith(PNG_SIGNATURE) or not _decodes(data):
            raise EvalFolderError(
                f"{printable(str(self.folder / relative))} is not a PNG image; only the plots hsi eval drew are read"
            )
        return data

    def plots(self) -> list[tuple[str, bytes]]:
        """(relative path, PNG bytes) of every plot eval.json lists, in its order; each must be there."""
        return [(relative, self.plot(relative)) for relative in self.plot_files]


def _decodes(data: bytes) -> bool:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
    except Exception:  # any decoder failure: not a plot we pass on
        return False
    return True


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
            raise EvalFolderError(f"{where}: {what} is not a regular file")
        with os.fdopen(opened.pop(), "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise EvalFolderError(f"{where}: {what} not found; its {EVAL_JSON} lists it") from None
    except OSError as exc:
        raise EvalFolderError(
            f"{where}: a link or not a plain file or folder on the way to the {what} ({exc.strerror}); links are "
            "never followed: replace it with the real file"
        ) from None
    finally:
        for fd in opened:
            os.close(fd)


def _name(top: Fields, field: str, check, value: str) -> str:
    """`value`, a name inside the report's folder by `check` (builder.core.names), or one line."""
    try:
        check(value)
    except HsiError as exc:
        raise top.error(str(exc), field) from None
    return value


def checked_files(report: dict, where: Path) -> tuple[str, list[str]]:
    """(the predictions table's file name, the plots' relative paths) an eval.json lists, each a
    name inside its folder, never a path out of it."""
    top = Fields(report, where)
    table = top.object("files", None).string("predictions", PREDICTIONS_NAME)
    predictions = _name(top, "files.predictions", lambda name: check_path_component(name, "predictions file"), table)
    plots = [
        _name(top, f"plots[{n}]", lambda path: check_relative_path(path, "plot path"), relative)
        for n, relative in enumerate(top.list("plots", []))
    ]
    return predictions, plots


def _checked(path: Path) -> tuple[dict, dict, dict, str, list[str], dict | None, dict | None]:
    """(eval.json, its run, its metrics, its predictions file name, its plots, its prompt sets, its
    answers) at `path`, every field any reader of it uses checked."""
    report = read_json(path, "eval report")
    top = Fields(report, path)
    if top.raw("schema", None) != REPORT_SCHEMA:
        raise top.error(f"not an hsi eval report (schema is not {REPORT_SCHEMA!r}; write it with hsi eval)", "schema")
    run, metrics = checked_run(report, path), checked_metrics(report, path)
    return report, run, metrics, *checked_files(report, path), *checked_prompt_fields(report, path)


def checked_report(path: Path) -> dict:
    """An eval.json, every field any reader of it uses checked (UntrustedInput, one line naming the
    file and the field, otherwise)."""
    return _checked(path)[0]


def read_model_folder(folder: Path) -> EvaluatedModel:
    """The model folder `folder` (holding an eval.json), its eval.json checked."""
    folder = Path(folder)
    report, run, metrics, predictions, plots, prompt_sets, answers = _checked(folder / EVAL_JSON)
    return EvaluatedModel(folder, report, run, metrics, folder / predictions, tuple(plots), prompt_sets, answers)


def model_folders(root: Path) -> list[EvaluatedModel]:
    """Every model folder (a subfolder holding an eval.json) of the `hsi eval --out` folder `root`, in
    name order; [] when there is none. A link where a model folder is is refused, never followed."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in sorted(root.iterdir()):
        report = child / EVAL_JSON
        if not (report.exists() or report.is_symlink()):
            continue
        if child.is_symlink():
            raise EvalFolderError(
                f"{printable(str(child))} is a link (to {printable(str(child.readlink()))}); a model folder is never "
                "read through a link: replace it with the folder itself"
            )
        if child.is_dir():
            found.append(read_model_folder(child))
    return found


def evaluated_models(path: Path, what: str) -> list[EvaluatedModel]:
    """The models of `path`, an `hsi eval --out` folder or one model folder, as the argument `what`
    (EVAL_DIR, --results) gives it: refused when it is a link, not a folder, or holds no eval.json."""
    path = Path(path)
    shown = printable(str(path))
    if path.is_symlink():
        raise EvalFolderError(f"{what} {shown} is a link; links are never followed: pass the folder it leads to")
    if not path.is_dir():
        raise EvalFolderError(f"{what} {shown} is not a folder: pass an `hsi eval --out` folder or a model folder")
    own = path / EVAL_JSON
    if own.exists() or own.is_symlink():
        return [read_model_folder(path)]
    found = model_folders(path)
    if not found:
        raise EvalFolderError(
            f"{what} {shown} holds no eval.json, of its own or in a model folder: pass an `hsi eval --out` folder"
        )
    return found


@dataclass(frozen=True)
class Submission:
    """A leaderboard entry as it is submitted: entry.json (checked) and the predictions table it was
    scored from (found, not yet read). Its eval.json, if any, is not needed."""

    entry_file: Path
    entry: dict
    predictions_file: Path


def read_submission(path: Path, predictions: Path | None = None) -> Submission:
    """The entry at `path` (an entry.json, or the folder holding one) and its predictions table: the
    one it names beside it, or `predictions`."""
    entry_file = entry_path(Path(path))
    entry = read_entry(entry_file)
    beside = entry_file.parent / entry["predictions"]["file"]
    if predictions is None and not (beside.exists() or beside.is_symlink()):
        raise UsageError(
            f"{printable(str(entry_file))}: its predictions file {printable(entry['predictions']['file'])} is not "
            "beside it: pass --predictions FILE"
        )
    table = regular_file(Path(predictions) if predictions is not None else beside, "predictions table")
    return Submission(entry_file, entry, table)


__all__ = [
    "EvalFolderError",
    "EvaluatedModel",
    "checked_report",
    "Submission",
    "evaluated_models",
    "model_folders",
    "read_model_folder",
    "read_plain_file",
    "read_submission",
]
