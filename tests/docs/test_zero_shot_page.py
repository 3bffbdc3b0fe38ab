"""docs/zero-shot.md lists the templates `no-scale` leaves out and those it keeps, each with why: the
same data as evaluation/zero_shot/templates.py, in the same order, so the page cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

from evaluation.zero_shot.answers import VLM_PROMPT
from evaluation.zero_shot.templates import KEPT_BORDERLINE, REMOVED_FOR_SCALE

PAGE = Path(__file__).resolve().parents[2] / "docs" / "zero-shot.md"
ROW = re.compile(r"^\| `(?P<template>[^`]+)` \| (?P<why>.+) \|$")


def table_after(text: str, header: str) -> list[tuple[str, str]]:
    """The (template, why) rows of the table whose header line is `header`."""
    lines = text.splitlines()
    start = lines.index(header) + 2  # the header, then its rule
    rows = []
    for line in lines[start:]:
        match = ROW.match(line)
        if not match:
            break
        rows.append((match["template"], match["why"]))
    return rows


def test_the_page_lists_the_removed_and_kept_templates_as_the_code_has_them():
    text = PAGE.read_text("utf-8")
    assert table_after(text, "| template | why it is removed |") == list(REMOVED_FOR_SCALE)
    assert table_after(text, "| template | why it is kept |") == list(KEPT_BORDERLINE)
    assert f"> {VLM_PROMPT}" in text  # the prompt the docs give is the one the runs record
    assert "No real CLIP weights were run" in text
