"""The cells of eval.md's tables: an estimate with its interval, a value from the data as one line."""

from __future__ import annotations

from builder.core import markdown


def fmt(estimate: dict | None, digits: int = 3) -> str:
    """'0.812 [0.790, 0.833]' (or 'n/a')."""
    if not estimate or estimate.get("value") is None:
        return "n/a"
    text = f"{estimate['value']:.{digits}f}"
    if estimate.get("low") is not None:
        text += f" [{estimate['low']:.{digits}f}, {estimate['high']:.{digits}f}]"
    return text


def text(value: object) -> str:
    """A value from the data (a model spec, a group name, a note) as text that stays on its line:
    `|` escaped, newlines folded, so no name can start a heading or a table row in eval.md."""
    return markdown.inline(value, none="None")
