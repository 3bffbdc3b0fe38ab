"""Published figures, not re-run: what the paper's authors released for the models they evaluated,
shipped as data (`published_paper.tsv`, one row per run, group and size, each with its source), so
that reports can show them beside re-run figures and never mixed with them.

The rows are the authors' released evaluation logs (github.com/Mishalfatima/Corner_Cases,
`pytorch-image-models/slurm/Evaluate_*/<name>_<array id>.out`, the `--result` JSON of timm's
validate.py). Each log records the model, its input size, crop_pct and interpolation, and top-1/top-5
in percent over 50,000 images; it does not name the folder it read. The group and size of each array
id are inferred, not recorded: ids 0-11 are sizes 56, 84, 112 (in that order) by Group_1..4 of the
authors' layout `SIZE/Group_N` (create_dataset.py: 1 centre own background, 2 corner own, 3 centre
other class's, 4 corner other), and id 12 is clean ImageNet val (its top-1 is the model's published
ImageNet figure). Run names are the log folders' without `Evaluate_`; what the suffixes `_old`,
`_HS_IN1`, `_HS_1k` and `_Rand` mean is not recorded in the repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from builder.core.errors import HsiError

GROUPS = ("CeO", "CoO", "CeR", "CoR")
SIZES = (56, 84, 112)
CLEAN = "clean"
COLUMNS = ("run", "model", "input_size", "crop_pct", "interpolation", "group", "size", "top1", "top5", "source")
REFERENCES = {"paper": "published_paper.tsv"}  # --reference NAME -> the shipped table
LABEL = "published, not re-run"
SOURCE_REPOSITORY = "https://github.com/Mishalfatima/Corner_Cases"


class UnknownReference(HsiError):
    """--reference names no shipped table."""


@dataclass(frozen=True)
class PublishedCell:
    """One published top-1/top-5 (percent) of one run on one group and size (or clean ImageNet)."""

    run: str
    model: str
    input_size: int
    crop_pct: float
    interpolation: str
    group: str
    size: int | None  # None for clean ImageNet val
    top1: float
    top5: float
    source: str


@dataclass(frozen=True)
class PublishedRun:
    """All cells of one run (one log folder), with the preprocessing its logs record."""

    run: str
    model: str
    input_size: int
    crop_pct: float
    interpolation: str
    cells: dict[tuple[str, int], PublishedCell]
    clean: PublishedCell | None

    def top1(self, group: str, size: int) -> float | None:
        cell = self.cells.get((group, size))
        return None if cell is None else cell.top1

    @property
    def worst(self) -> PublishedCell | None:
        """The cell of lowest top-1 (ties: the first in group x size order)."""
        ordered = [self.cells[(g, s)] for s in SIZES for g in GROUPS if (g, s) in self.cells]
        return min(ordered, key=lambda cell: cell.top1) if ordered else None

    @property
    def source_folder(self) -> str:
        any_cell = next(iter(self.cells.values()), None) or self.clean
        return any_cell.source.rsplit("/", 1)[0].replace("/blob/", "/tree/", 1) if any_cell else SOURCE_REPOSITORY


def read_cells(reference: str = "paper") -> list[PublishedCell]:
    """The shipped table `reference` names, every row checked (a broken row is a bug of the package)."""
    if reference not in REFERENCES:
        raise UnknownReference(f"--reference {reference!r}: the published tables are {', '.join(REFERENCES)}")
    text = resources.files("evaluation.ranking").joinpath(REFERENCES[reference]).read_text("utf-8")
    lines = text.splitlines()
    if tuple(lines[0].split("\t")) != COLUMNS:
        raise ValueError(f"{REFERENCES[reference]}: columns {lines[0].split(chr(9))}, expected {list(COLUMNS)}")
    cells = []
    for number, line in enumerate(lines[1:], start=2):
        row = dict(zip(COLUMNS, line.split("\t"), strict=True))
        group, size = row["group"], (int(row["size"]) if row["size"] else None)
        if (group, size) not in {(CLEAN, None), *((g, s) for g in GROUPS for s in SIZES)}:
            raise ValueError(f"{REFERENCES[reference]} line {number}: group {group!r} size {size!r}")
        cells.append(
            PublishedCell(
                row["run"],
                row["model"],
                int(row["input_size"]),
                float(row["crop_pct"]),
                row["interpolation"],
                group,
                size,
                float(row["top1"]),
                float(row["top5"]),
                row["source"],
            )
        )
    return cells


def published_runs(reference: str = "paper") -> list[PublishedRun]:
    """The runs of `reference`, in the table's order, each with its cells by (group, size)."""
    runs: dict[str, list[PublishedCell]] = {}
    for cell in read_cells(reference):
        runs.setdefault(cell.run, []).append(cell)
    result = []
    for name, cells in runs.items():
        first = cells[0]
        result.append(
            PublishedRun(
                name,
                first.model,
                first.input_size,
                first.crop_pct,
                first.interpolation,
                {(c.group, c.size): c for c in cells if c.size is not None},
                next((c for c in cells if c.group == CLEAN), None),
            )
        )
    return result


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def published_markdown(reference: str = "paper", runs: tuple[str, ...] | None = None) -> str:
    """The table of `reference` (or of the named runs) in Markdown: top-1 in percent by group x size,
    clean ImageNet, the preprocessing each log records and its source folder."""
    header = ["run", "model", "input", "crop_pct", *(f"{g} {s}" for s in SIZES for g in GROUPS), "clean"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in published_runs(reference):
        if runs is not None and run.run not in runs:
            continue
        cells = [percent(run.top1(g, s)) for s in SIZES for g in GROUPS]
        clean = percent(run.clean.top1 if run.clean else None)
        name = f"[{run.run}]({run.source_folder})"
        lines.append(
            "| " + " | ".join([name, f"`{run.model}`", str(run.input_size), f"{run.crop_pct:g}", *cells, clean]) + " |"
        )
    return "\n".join(lines)
