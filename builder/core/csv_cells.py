"""The one CSV writer for tables made from data (leaderboards, per-class and probe tables): a text
cell that a spreadsheet would run as a formula is defused.

OWASP's "CSV Injection" page (owasp.org/www-community/attacks/CSV_Injection) lists the cells a
spreadsheet treats as formulas, those starting with `=`, `+`, `-`, `@`, tab or carriage return,
and recommends prefixing such a cell with a single quote and enclosing it in double quotes (double
quotes inside doubled). So a group or model name `=cmd|' /C calc'!A0` is written as
`"'=cmd|' /C calc'!A0"`: the spreadsheet shows the text and runs nothing.

Only text is guarded: an int or float is written as the number it is (`-0.5` stays `-0.5`), and so
is a text cell that is exactly a decimal number (a score already formatted as `-0.5000`), which no
spreadsheet runs as a formula. Every other cell is quoted as the `csv` module's default dialect
quotes it (only when it holds a comma, a double quote or a line break), so existing tables keep
their bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# A plain decimal number as text: `-0.5`, `+3`, `1.25e-05`; nothing else a formula could hide in.
_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_NEEDS_QUOTES = (",", '"', "\r", "\n")


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def cell(value: object) -> str:
    """One CSV field: None as empty, a number as itself, a formula-like text cell defused (see above)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if isinstance(value, str) and text.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(text):
        return _quoted("'" + text)
    return _quoted(text) if any(c in text for c in _NEEDS_QUOTES) else text


def line(values: Iterable[object], terminator: str = "\r\n") -> str:
    """One CSV record (the `csv` module's default terminator unless told)."""
    return ",".join(cell(v) for v in values) + terminator


def table_text(header: Sequence[object], rows: Iterable[Sequence[object]], terminator: str = "\r\n") -> str:
    return line(header, terminator) + "".join(line(row, terminator) for row in rows)


def dict_table_text(columns: Sequence[str], rows: Iterable[Mapping[str, object]], terminator: str = "\r\n") -> str:
    """Rows given as mappings, in `columns`' order (a missing key is an empty cell, as csv.DictWriter)."""
    return table_text(columns, ([row.get(c) for c in columns] for row in rows), terminator)


def write_table(
    path: Path, header: Sequence[object], rows: Iterable[Sequence[object]], terminator: str = "\r\n"
) -> None:
    Path(path).write_text(table_text(header, rows, terminator), encoding="utf-8", newline="")


def write_dict_table(
    path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, object]], terminator: str = "\r\n"
) -> None:
    Path(path).write_text(dict_table_text(columns, rows, terminator), encoding="utf-8", newline="")
