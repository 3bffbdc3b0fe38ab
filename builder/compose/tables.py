"""Plain-text tables that compose prints (first column left-aligned, the others right-aligned)."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], rule: bool = True) -> list[str]:
    """The lines of a table: the header, a rule of dashes (if asked), then the rows."""
    table = [list(header), *[list(row) for row in rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row))

    return [line(table[0]), *(["  ".join("-" * w for w in widths)] if rule else []), *[line(r) for r in table[1:]]]
