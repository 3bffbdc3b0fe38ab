"""ImageNet's box files from the Kaggle release: `LOC_train_solution.csv`, `LOC_val_solution.csv`.

Columns `ImageId,PredictionString`; the string repeats `wnid x0 y0 x1 y1`, one group per box, in
0-based inclusive corners (as the VOC XMLs). Extract reads it for the boxes it cuts out, validation for
the paper's centre and size scores: both read it here, so they cannot disagree.

Coordinates: ImageNet's files hold integers only (e.g. `n01751748 1 31 498 354`), and integers are
read exactly. A non-integer is therefore not ImageNet data (a user's own or rescaled boxes); it is
rounded to the nearest integer (halves to even, Python's `round`), the rule extract has always used
and the VOC reader shares. Truncating, as the scores reader once did, would move every such box up
and to the left by up to a pixel; rounding does not lean one way.
"""

from __future__ import annotations

from builder.core.errors import InputError

import csv
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.records import Box

LOC_COLUMNS = ("ImageId", "PredictionString")


class LocCsvError(InputError, ValueError):
    """The file is not a LOC solution file, or one of its rows does not parse."""


def parse_coordinate(text: str | None, field_name: str) -> int:
    """One box coordinate as an int (see the module's note on non-integers)."""
    if text is None or not text.strip():
        raise ValueError(f"<{field_name}> is missing")
    try:
        return int(round(float(text)))
    except OverflowError:  # inf; nan already fails as a ValueError
        raise ValueError(f"<{field_name}> is {text.strip()!r}, not a finite number") from None


def parse_prediction_string(text: str) -> list[Box]:
    """`wnid x0 y0 x1 y1 [wnid x0 y0 x1 y1 ...]` -> boxes."""
    fields = text.split()
    if not fields or len(fields) % 5:
        raise ValueError(f"PredictionString has {len(fields)} fields, not a multiple of 5: "
                         "it holds groups of 'wnid x0 y0 x1 y1'")
    return [
        Box(*(parse_coordinate(v, "coordinate") for v in fields[i + 1 : i + 5]), wnid=fields[i])
        for i in range(0, len(fields), 5)
    ]


@dataclass
class LocSolution:
    """The rows of one solution file, parsed into boxes only when asked, so that one bad row is a
    problem of one image rather than of the file."""

    path: Path
    rows: dict[str, tuple[int, str]] = field(default_factory=dict)  # image id -> (line, PredictionString)
    duplicates: list[tuple[str, int]] = field(default_factory=list)  # (image id, line) of ignored repeats

    def ids(self) -> set[str]:
        return set(self.rows)

    def boxes(self, image_id: str) -> list[Box] | None:
        """The boxes of `image_id`, None when the file has no row for it; ValueError when its row
        does not parse."""
        row = self.rows.get(image_id)
        return None if row is None else parse_prediction_string(row[1])


def read_loc_solution(path: Path) -> LocSolution:
    """The rows of a solution file; a repeated image id keeps its first row (the repeats are listed)."""
    path = Path(path)
    solution = LocSolution(path)
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames is None or not set(LOC_COLUMNS) <= set(reader.fieldnames):
            raise LocCsvError(f"{path} is not a LOC_*_solution.csv: expected the columns {','.join(LOC_COLUMNS)}")
        for line, row in enumerate(reader, start=2):
            image_id = (row.get("ImageId") or "").strip()
            if image_id in solution.rows:
                solution.duplicates.append((image_id, line))
                continue
            solution.rows[image_id] = (line, row.get("PredictionString") or "")
    return solution


def read_loc_boxes(path: Path) -> dict[str, list[Box]]:
    """Every image's boxes; the first row that does not parse fails the file, naming its line."""
    solution = read_loc_solution(path)
    boxes = {}
    for image_id, (line, text) in solution.rows.items():
        try:
            boxes[image_id] = parse_prediction_string(text)
        except ValueError as exc:
            raise LocCsvError(f"{solution.path}:{line}: {exc}") from None
    return boxes
