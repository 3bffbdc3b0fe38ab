"""The one Markdown table writer: every report, card and summary renders its tables here, so a cell
that holds `|` or a newline (a group name or a file name from someone else's data) stays one cell
on one line instead of breaking the table or starting a heading."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def inline(value: object, none: str = "") -> str:
    """`value` as text that stays inside one table cell or one heading line."""
    text = none if value is None else str(value)
    return " ".join(text.replace("|", "\\|").splitlines()) if text else text


def table_lines(header: Sequence[object], rows: Iterable[Sequence[object]], none: str = "") -> list[str]:
    """A Markdown table as lines: the header, its rule, a line per row (None cells written as `none`)."""
    lines = ["| " + " | ".join(inline(h, none) for h in header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(inline(cell, none) for cell in row) + " |" for row in rows]


def table(header: Sequence[object], rows: Iterable[Sequence[object]], none: str = "") -> str:
    return "\n".join(table_lines(header, rows, none))
