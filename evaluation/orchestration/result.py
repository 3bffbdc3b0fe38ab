"""`hsi.Evaluation`: one evaluated model (or one scored set of predictions), as `hsi eval` reports it.

The numbers are eval.json's (`to_dict()`); the tables are DataFrames built from it, one row per
cell, each estimate as three columns (value, `_low`, `_high`: the bootstrap interval over source
images); the plots are the figures `hsi eval` writes; `save` writes the files `hsi eval` writes
into an output folder of its own.
"""

from __future__ import annotations

from pathlib import Path

from builder.core.errors import printable
from builder.core.owned import OwnedFolder, OwnedFolderError
from evaluation.analysis.report import EVAL_JSON
from evaluation.predicting.predictions import PREDICTIONS_NAME, write_predictions
from evaluation.ranking.entries import EntryInfo
from evaluation.ranking.eval_reader import checked_report
from evaluation.ranking.leaderboard import run_identity

from .eval_folder import EVAL_KIND, ModelFolder

# table name -> the metrics section it is built from (each a list of cells)
SECTIONS = {
    "group_size": "by_group_size",
    "group": "by_group",
    "size": "by_size",
    "tier": "by_tier",
    "position_size": "by_position_size",
    "background": "by_background",
    "background_gap": "background_gap",
    "neutral_controls": "neutral_controls",
}
ESTIMATE_KEYS = ("value", "low", "high")


def flat_cell(cell: dict) -> dict:
    """A metrics cell as one flat row: an estimate {value, low, high, n, sources} becomes NAME,
    NAME_low, NAME_high (its n as NAME_n)."""
    row: dict = {}
    for key, value in cell.items():
        if isinstance(value, dict) and "value" in value:
            row[key] = value["value"]
            row[f"{key}_low"], row[f"{key}_high"] = value.get("low"), value.get("high")
            row[f"{key}_n"] = value.get("n")
        else:
            row[key] = value
    return row


class Evaluation:
    """One evaluation: what `hsi eval` reports for a model, as Python objects.

    - `to_dict()`: the eval.json payload; `metrics`: its metrics section.
    - `worst_group`, `mean_over_groups`: the headline figures with their intervals.
    - `table(metric)`: top-1 (or top-5) by group x size, the paper's table.
    - `frame(name)`: any section as a DataFrame; `tiers`, `positions`, `background_gap`,
      `neutral_controls`, `background_class`, `clean_drop` are the common ones.
    - `plots` / `figure(name)`: the plots `hsi eval` draws, as matplotlib figures.
    - `save(directory)`: predictions.parquet, eval.json, eval.md, entry.json and plots/, as `hsi eval`
      writes them.
    """

    def __init__(
        self,
        report: dict,
        rows: list[dict],
        errors: list[dict],
        metadata: dict,
        bootstrap,
        extras: dict | None = None,
        extra_files: dict[str, bytes] | None = None,
    ):
        self.report = report
        self._rows, self._errors, self._metadata, self._bootstrap = rows, errors, metadata, bootstrap
        self._extras = dict(extras or {})  # sections only the model computes (clean photos, backgrounds)
        self._extra_files = dict(extra_files or {})  # their CSV files, written again by `save`

    def __repr__(self) -> str:
        worst = self.worst_group
        headline = f", worst group {worst['group']} top-1 {worst['value']:.3f}" if worst else ""
        return f"<Evaluation {self.report['model']['spec']}: {self.metrics['samples']} samples{headline}>"

    def to_dict(self) -> dict:
        """The eval.json payload."""
        return self.report

    @property
    def metrics(self) -> dict:
        """eval.json's `metrics`: every number with its interval (see the metric definitions)."""
        return self.report["metrics"]

    @property
    def worst_group(self) -> dict | None:
        """The group of lowest top-1 with its interval ({group, value, low, high, ...}), None without groups."""
        return (self.metrics.get("groups_summary") or {}).get("worst_group")

    @property
    def mean_over_groups(self) -> dict | None:
        """Top-1 averaged over the groups, each group weighing the same, with its interval."""
        return (self.metrics.get("groups_summary") or {}).get("mean_over_groups")

    def table(self, metric: str = "top1"):
        """`metric` (top1 or top5) by group x size as a DataFrame: groups as rows, sizes as columns."""
        if metric not in ("top1", "top5"):
            raise ValueError(f"metric is top1 or top5, got {metric!r}")
        frame = self.frame("group_size")
        if frame.empty:
            return frame
        return frame.pivot(index="group", columns="size", values=metric).reindex(
            index=list(dict.fromkeys(frame["group"])), columns=list(dict.fromkeys(frame["size"]))
        )

    def frame(self, name: str):
        """A metrics section as a DataFrame, one row per cell (empty when this data has no such cells):
        group_size, group, size, tier, position_size, background, background_gap, neutral_controls."""
        import pandas as pd

        if name not in SECTIONS:
            raise ValueError(f"no table {name!r}; the tables are {', '.join(SECTIONS)}")
        return pd.DataFrame([flat_cell(cell) for cell in self.metrics.get(SECTIONS[name]) or []])

    @property
    def tiers(self):
        return self.frame("tier")

    @property
    def positions(self):
        return self.frame("position_size")

    @property
    def background_gap(self):
        """Own background minus a foreign one (random or paired), same size and position."""
        return self.frame("background_gap")

    @property
    def neutral_controls(self):
        """A gray or noise background minus a foreign one, same size and position."""
        return self.frame("neutral_controls")

    @property
    def background_class(self):
        """On another class's background: the share of predictions and of errors naming that class,
        per group x size, with the overall row first (group "all"); empty without such samples."""
        import pandas as pd

        section = self.metrics.get("background_class")
        if not section:
            return pd.DataFrame()
        rows = [{"group": "all", "size": None, **section["overall"]}, *section["by_group_size"]]
        return pd.DataFrame([flat_cell(row) for row in rows])

    @property
    def clean_drop(self):
        """Top-1 on the clean photos minus top-1 per group (needs `clean=` / `--clean`), else None."""
        import pandas as pd

        clean = self.report.get("clean")
        if not clean:
            return None
        return pd.DataFrame([flat_cell(row) for row in clean["drop_by_group"]])

    @property
    def plots(self) -> list[str]:
        """The names of the plots this data allows (`figure(name)` draws one)."""
        from evaluation.analysis.plots import available_plots

        return available_plots(self.metrics)

    def figure(self, name: str = "accuracy_vs_size"):
        """One of `plots` as a matplotlib Figure (it shows itself in a notebook)."""
        from evaluation.analysis.plots import figure

        if name not in self.plots:
            raise ValueError(f"no plot {name!r} for this data; it has {', '.join(self.plots) or 'none'}")
        data = self.report["data"]
        return figure(self.metrics, name, f"{self.report['model']['spec']} on {data['config']}/{data['split']}")

    def save(
        self,
        directory,
        name: str = "",
        *,
        entry_name: str | None = None,
        architecture: str | None = None,
        training_data: str | None = None,
        paper: str | None = None,
        entry_url: str | None = None,
        overwrite: bool = False,
    ) -> Path:
        """predictions.parquet, eval.json, eval.md, entry.json and plots/ (and the clean-photo or
        background CSVs when those passes ran) into `directory`, an `hsi eval` output folder claimed
        as one, in its model folder `name` ("" for its root); returns that folder. eval.json is the
        bytes `hsi eval` writes for the same predictions; the leaderboard entry (entry.json) is
        described by `entry_name` (default: the model spec), `architecture`, `training_data` and
        `paper` (an http(s) link), and `entry_url` (where entry.json will be published, the `source` of the
        Hub's results file), each null when not given (saved again over an entry of the same
        model, what that entry said). A folder holding another model's evaluation (another spec or
        other weights) is refused, before anything is written, unless `overwrite`."""
        entry = EntryInfo.checked(
            "Evaluation.save: ",
            by_key=True,
            name=entry_name,
            architecture=architecture,
            training_data=training_data,
            paper=paper,
            url=entry_url,
        )
        with OwnedFolder(Path(directory), EVAL_KIND) as owned:
            return self.save_into(owned, name, entry, overwrite=overwrite)

    def save_into(self, owned: OwnedFolder, name: str, entry: EntryInfo, *, overwrite: bool = False) -> Path:
        """`save` into the model folder `name` of an output folder the caller holds."""
        from .pipeline import analyse

        folder = ModelFolder(owned, name)
        if not overwrite:
            refuse_another_model(folder.path / EVAL_JSON, self.report)
        folder.check_writable(PREDICTIONS_NAME, *self._extra_files)
        with folder.writing(PREDICTIONS_NAME) as path:
            write_predictions(path, self._rows, self._errors, self._metadata)
        for file, data in self._extra_files.items():
            with folder.writing(file) as path:
                path.write_bytes(data)
        self.report = analyse(folder.path / PREDICTIONS_NAME, folder, self._bootstrap, self._extras, entry)
        return folder.path


def refuse_another_model(path: Path, report: dict) -> None:
    """Refuse (one line naming it) to save `report` where `path`, an eval.json, reports another model:
    the same model is its spec and weights (leaderboard.run_identity's `model`), measured again."""
    if not path.exists() and not path.is_symlink():
        return
    other = checked_report(path)
    if run_identity(other)["model"] != run_identity(report)["model"]:
        spec, weights = other["model"]["spec"], other["model"].get("checkpoint_sha256")
        held = printable(spec) + (f" (weights sha256 {weights[:12]})" if weights else "")
        raise OwnedFolderError(
            f"{printable(str(path.parent))} holds the evaluation of another model, {held}, not of "
            f"{printable(report['model']['spec'])}: save into another folder, or replace it with overwrite=True "
            "(hsi eval: --overwrite)"
        )


__all__ = ["Evaluation", "flat_cell", "refuse_another_model"]
