"""The one Markdown table writer: every report, card and summary renders its tables here, so a cell
that holds `|` or a newline (a group name or a file name from someone else's data) stays one cell
on one line instead of breaking the table or starting a heading."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence


def inline(value: object, none: str = "") -> str:
    """`value` as text that stays inside one table cell or one heading line."""
    text = none if value is None else str(value)
    return " ".join(text.replace("|", "\\|").splitlines()) if text else text


def code(value: object) -> str:
    """`value` as an inline code span that stays one span on one line: fenced with one backtick more
    than the longest run of backticks inside it (CommonMark's rule for code spans). In a table cell
    `table_lines` escapes its `|` as any cell's (GitHub's tables need that inside code spans too)."""
    text = " ".join(str(value).splitlines())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table_lines(header: Sequence[object], rows: Iterable[Sequence[object]], none: str = "") -> list[str]:
    """A Markdown table as lines: the header, its rule, a line per row (None cells written as `none`)."""
    lines = ["| " + " | ".join(inline(h, none) for h in header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(inline(cell, none) for cell in row) + " |" for row in rows]


def table(header: Sequence[object], rows: Iterable[Sequence[object]], none: str = "") -> str:
    return "\n".join(table_lines(header, rows, none))
