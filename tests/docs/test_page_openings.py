"""Every page of the site opens with what does its job: right under its title, a runnable block
(bash or python) of at most ten lines, then the explanation; no page repeats its title as its first
heading (issue 44: the evaluate page opened with a 30-line block of every option, the publish page
repeated its title and opened with a paragraph)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
MAX_LINES = 10


def opening(path: Path) -> tuple[str, str, list[str]]:
    """(title, the opening block's language, its non-empty lines)."""
    lines = path.read_text("utf-8").splitlines()
    assert lines[0].startswith("# "), f"{path.name} does not start with its title"
    rest = [line for line in lines[1:]]
    first = next(n for n, line in enumerate(rest) if line.strip())
    fence = re.fullmatch(r"```(\w+)", rest[first])
    assert fence, f"{path.name}: the first thing under the title is {rest[first]!r}, not a code block"
    end = rest.index("```", first + 1)
    return lines[0][2:], fence.group(1), [line for line in rest[first + 1 : end] if line.strip()]


def test_every_page_is_checked():
    assert {p.name for p in PAGES} >= {"index.md", "build.md", "publish.md", "evaluate.md", "cli.md", "api.md"}


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_the_page_opens_with_a_short_runnable_block(path):
    title, language, lines = opening(path)
    assert language in ("bash", "python"), f"{path.name} opens with a {language} block"
    assert 1 <= len(lines) <= MAX_LINES, f"{path.name} opens with {len(lines)} lines"
    headings = re.findall(r"^## (.+)$", path.read_text("utf-8"), re.M)
    assert not headings or headings[0] != title, f"{path.name} repeats its title"


def test_the_front_page_is_a_journey():
    """Install, the demo, the build command, then where to go."""
    _, _, lines = opening(DOCS / "index.md")
    words = [line.split("#")[0].split() for line in lines]
    assert words[0][:2] == ["pip", "install"] and words[1] == ["make", "demo"]
    assert words[2][:2] == ["hsi", "build"]
    text = (DOCS / "index.md").read_text("utf-8")
    for page in ("build.md", "publish.md", "evaluate.md"):
        assert f"]({page})" in text
