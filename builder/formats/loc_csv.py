"""ImageNet's box files from the Kaggle release: `LOC_train_solution.csv`, `LOC_val_solution.csv`.

Columns `ImageId,PredictionString`; the string repeats `wnid x0 y0 x1 y1`, one group per box, in
0-based inclusive corners (as the VOC XMLs). Extract reads it for the boxes it cuts out, validation for
the paper's centre and size scores: both read it here, so they cannot disagree.

Coordinates: ImageNet's files hold integers only (e.g. `n01751748 1 31 498 354`), and integers are
read exactly. A non-integer is therefore not ImageNet data (a user's own or rescaled boxes); it is
rounded to the nearest integer (halves to even, Python's `round`), the rule extract has always used
and the VOC reader shares. Truncating, as the scores reader once did, would move every such box up
and to the left by up to a pixel; rounding does not lean one way. `inf`, `nan` and `1e400` are refused.

Encodings: UTF-8 with or without a byte-order mark, UTF-16 (with a BOM, or recognised by its zero
bytes), and anything else read as Latin-1 (every byte decodes), the encoding recorded so the caller
can report it. Header names are stripped of spaces. A row that the csv module cannot read (a field
longer than `MAX_FIELD_CHARS`) is recorded with its line and skipped; the other rows are kept.
"""

from __future__ import annotations

import codecs
import csv
import io
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.errors import InputError
from builder.core.records import Box

LOC_COLUMNS = ("ImageId", "PredictionString")
# ImageNet's longest row holds a few hundred boxes (~10 KB); 16 MiB admits any real file and still
# bounds what one malformed line can cost (the csv module's own default is 131,072 characters).
MAX_FIELD_CHARS = 1 << 24


class LocCsvError(InputError, ValueError):
    """The file is not a LOC solution file, or one of its rows does not parse."""


def parse_coordinate(text: str | None, field_name: str) -> int:
    """One box coordinate as an int (see the module's note on non-integers)."""
    if text is None or not text.strip():
        raise ValueError(f"<{field_name}> is missing")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"<{field_name}> is {text.strip()[:40]!r}, not a number") from None
    if not math.isfinite(value):  # inf, nan, and 1e400 (which float() reads as inf)
        raise ValueError(f"<{field_name}> is {text.strip()[:40]!r}, not a finite number")
    return int(round(value))


def parse_prediction_string(text: str) -> list[Box]:
    """`wnid x0 y0 x1 y1 [wnid x0 y0 x1 y1 ...]` -> boxes."""
    fields = text.split()
    if not fields or len(fields) % 5:
        raise ValueError(
            f"PredictionString has {len(fields)} fields, not a multiple of 5: it holds groups of 'wnid x0 y0 x1 y1'"
        )
    boxes = []
    for i in range(0, len(fields), 5):
        x0, y0, x1, y1 = (parse_coordinate(v, "coordinate") for v in fields[i + 1 : i + 5])
        boxes.append(Box(x0, y0, x1, y1, fields[i]))
    return boxes


@dataclass
class LocSolution:
    """The rows of one solution file, parsed into boxes only when asked, so that one bad row is a
    problem of one image rather than of the file."""

    path: Path
    rows: dict[str, tuple[int, str]] = field(default_factory=dict)  # image id -> (line, PredictionString)
    duplicates: list[tuple[str, int]] = field(default_factory=list)  # (image id, line) of ignored repeats
    bad_lines: list[tuple[int, str]] = field(default_factory=list)  # (line, why) of rows that could not be read
    encoding: str = "utf-8"

    def ids(self) -> set[str]:
        return set(self.rows)

    def boxes(self, image_id: str) -> list[Box] | None:
        """The boxes of `image_id`, None when the file has no row for it; ValueError when its row
        does not parse."""
        row = self.rows.get(image_id)
        return None if row is None else parse_prediction_string(row[1])


def decode_annotation_text(data: bytes) -> tuple[str, str]:
    """(text, encoding) of an annotation file's bytes; see the module's note on encodings."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace"), "utf-16"
    head = data[:4096]
    if head.count(0) * 4 > len(head):  # text of ASCII characters in UTF-16 is half zero bytes
        encoding = "utf-16-le" if head[1::2].count(0) > head[0::2].count(0) else "utf-16-be"
        return data.decode(encoding, errors="replace"), encoding
    try:
        return data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        return data.decode("latin-1"), "latin-1"


@contextmanager
def _field_limit(limit: int):
    previous = csv.field_size_limit()
    csv.field_size_limit(max(previous, limit))
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def read_loc_solution(path: Path) -> LocSolution:
    """The rows of a solution file; a repeated image id keeps its first row (the repeats are listed)."""
    path = Path(path)
    text, encoding = decode_annotation_text(path.read_bytes())
    solution = LocSolution(path, encoding=encoding)
    reader = csv.reader(io.StringIO(text, newline=""))
    with _field_limit(MAX_FIELD_CHARS):
        try:
            header = [name.strip() for name in next(reader)]
        except (StopIteration, csv.Error):
            header = []
        if not set(LOC_COLUMNS) <= set(header):
            found = ",".join(header)[:200] or "nothing"
            raise LocCsvError(
                f"{path} is not a LOC_*_solution.csv: expected the columns {','.join(LOC_COLUMNS)}, "
                f"found {found!r}; pass the solution file of Kaggle's ImageNet release"
            )
        id_column, boxes_column = header.index("ImageId"), header.index("PredictionString")
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:  # the reader resumes at the next line
                solution.bad_lines.append((reader.line_num, f"row cannot be read ({exc})"))
                continue
            if not any(field.strip() for field in row):
                continue
            image_id = row[id_column].strip() if id_column < len(row) else ""
            if image_id in solution.rows:
                solution.duplicates.append((image_id, reader.line_num))
                continue
            solution.rows[image_id] = (reader.line_num, row[boxes_column] if boxes_column < len(row) else "")
    return solution


def read_loc_boxes(path: Path) -> dict[str, list[Box]]:
    """Every image's boxes; the first row that does not parse fails the file, naming its line."""
    solution = read_loc_solution(path)
    for line, why in solution.bad_lines[:1]:
        raise LocCsvError(f"{solution.path}:{line}: {why}")
    boxes = {}
    for image_id, (line, text) in solution.rows.items():
        try:
            boxes[image_id] = parse_prediction_string(text)
        except ValueError as exc:
            raise LocCsvError(f"{solution.path}:{line}: {exc}") from None
    return boxes
