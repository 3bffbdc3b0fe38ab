"""The Sphinx site builds with warnings as errors, as `make docs` builds it, and what it generates is
complete: the CLI page lists every subcommand of `hsi.cli.SUBCOMMANDS` with every flag and
positional of its parser, and the API page documents every public name of `hsi.__all__` (which
`hsi` resolves lazily)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest

import hsi
from hsi.cli import SUBCOMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as `make docs` builds it (one build for the module; autodoc imports torch)."""
    out = tmp_path_factory.mktemp("docs-html")
    build = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "docs", str(out)]
    result = subprocess.run(build, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stderr[-4000:]}"
    return out


class Sections(HTMLParser):
    """The text of every <kbd> (how sphinx-argparse prints a flag or positional), by each <section>
    id it sits in, nested sections included."""

    def __init__(self):
        super().__init__()
        self.open: list[str] = []
        self.kbd: dict[str, set[str]] = defaultdict(set)
        self.ids: set[str] = set()
        self._text: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if attributes.get("id"):
            self.ids.add(attributes["id"])
        if tag == "section":
            self.open.append(attributes.get("id", ""))
        elif tag == "kbd":
            self._text = []

    def handle_endtag(self, tag):
        if tag == "section":
            self.open.pop()
        elif tag == "kbd" and self._text is not None:
            for section in self.open:
                self.kbd[section].add("".join(self._text).strip())
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def parsed(page: Path) -> Sections:
    sections = Sections()
    sections.feed(page.read_text("utf-8"))
    return sections


def documented_arguments(parser: argparse.ArgumentParser) -> set[str]:
    """What the page must show of a parser: every option string and every positional's name
    (-h/--help and suppressed flags aside: sphinx-argparse leaves those out on purpose)."""
    names = set()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        names.update(action.option_strings or [action.metavar or action.dest])
    return names


@pytest.mark.slow
def test_the_cli_page_lists_every_subcommand_and_every_flag(site):
    page = parsed(site / "cli.html")
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(commands.choices) == list(SUBCOMMANDS)
    missing = {}
    for name, subparser in commands.choices.items():
        shown = page.kbd.get(f"hsi-{name}", set())
        if lost := documented_arguments(subparser) - shown:
            missing[name] = sorted(lost)
    assert not missing, f"flags the CLI page does not list: {missing}"
    assert documented_arguments(parser) <= page.kbd["command-line-reference"]  # COMMAND, --version


@pytest.mark.slow
def test_the_api_page_documents_every_public_name(site):
    ids = parsed(site / "api.html").ids
    public = [name for name in hsi.__all__ if not name.startswith("_")]
    assert {"evaluate", "score", "Evaluation"} <= set(public)
    assert [name for name in public if f"hsi.{name}" not in ids] == []
    assert "hsi.Evaluation.save" in ids and "hsi.Evaluation.worst_group" in ids


def test_lazy_public_names_are_listed_by_dir():
    """autodoc (and tab completion) find module members through dir(): the lazy ones must be there."""
    assert set(hsi.__all__) <= set(dir(hsi))
