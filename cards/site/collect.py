"""Read the `hsi eval` output folders a site is built from, through the one reader of evaluation
folders (evaluation.ranking.eval_reader): each model's eval.json and entry.json, its
predictions.parquet (checked to be the run its eval.json reports) and the plots it wrote, all as
someone else's files, no link followed.

An EVAL_DIR is an `hsi eval --out` folder (one subfolder per model) or one model folder (an
eval.json of its own, as `hsi eval --from ... --out` writes). The site adds its own two rules: each
EVAL_DIR is given once, and every name that becomes a file of the site (a model folder, a plot) is
one it can write.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import HsiError, InputError, printable
from builder.core.names import check_path_component
from builder.core.owned import check_relative
from evaluation.analysis.report import EVAL_JSON
from evaluation.ranking.eval_reader import REVISION_KEYS, EvaluatedModel, evaluated_models
from evaluation.ranking.leaderboard import leaderboard_row, model_failures
from evaluation.ranking.verification_record import Verified


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
    run: dict  # report_fields.checked_run: what the page says about the run
    metrics: dict  # report_fields.checked_metrics
    row: dict  # evaluation.ranking.leaderboard.leaderboard_row
    predictions: object  # pandas DataFrame, every row (error rows too)
    plots: list[tuple[str, bytes]]  # (file name, PNG bytes), in eval.json's order
    entry: dict | None = None  # its leaderboard entry (evaluation.ranking.entries), when the folder has one
    verification: Verified | None = None  # what hsi leaderboard verify --record proved of the entry
    prompt_sets: dict | None = None  # a zero-shot model's (evaluation.ranking.prompt_fields)
    answers: dict | None = None  # a vision-language model's answers in words

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


def _model_eval(number: int, model: EvaluatedModel) -> ModelEval:
    """One model of the site: its folder name and plot names checked as names of the site's files
    before its predictions and plots are read."""
    site_name(f"{number}-{model.folder.name}", "model folder name")
    names = [site_name(relative.rsplit("/", 1)[-1], "plot file") for relative in model.plot_files]
    predictions = model.read_predictions()  # read in this order, so a folder's first fault is the one named
    plots = [(name, data) for name, (_, data) in zip(names, model.plots())]
    entry = model.read_entry()
    return ModelEval(
        number=number,
        folder=model.folder,
        report=model.report,
        run=model.run,
        metrics=model.metrics,
        row=leaderboard_row(model.report, model.folder.name, entry["name"] if entry else None),
        predictions=predictions,
        plots=plots,
        entry=entry,
        verification=model.read_verification(entry),
        prompt_sets=model.prompt_sets,
        answers=model.answers,
    )


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
        listed += [(number, model) for model in evaluated_models(eval_dir, "EVAL_DIR")]
    listing = tqdm(listed, desc="report: models", unit="model", disable=not progress, file=sys.stderr)
    return [_model_eval(number, model) for number, model in listing]


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
