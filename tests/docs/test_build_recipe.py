"""The build recipe is one text wherever it appears (README.md, docs/build.md), its `hsi build` line
starts the same on every page that shows one, and its two halves agree: `hsi build` alone and the four
stage lines after it, run in fresh folders, write the same release."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

from fake_imagenet import write_tree
from release_factory import shard_bytes

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# the pages that hold the whole recipe: the command, then the stages it runs
RECIPE_PAGES = [ROOT / "README.md", ROOT / "docs" / "build.md"]
BUILD_LINE = "hsi build --source $IMAGENET --out build/ --version v1.0.0"
STAGES = ["extract", "compose", "validate", "release"]


def bash_blocks(path: Path) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", path.read_text("utf-8"), re.M | re.S)


def commands(block: str) -> list[list[str]]:
    joined = block.replace("\\\n", " ")  # a line continued with a backslash is one command
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


def recipe_of(path: Path) -> str:
    (recipe,) = [b for b in bash_blocks(path) if any(w[:2] == ["hsi", "build"] for w in commands(b))]
    return recipe


def test_the_recipe_is_the_same_text_on_every_page():
    recipes = {path.relative_to(ROOT).as_posix(): recipe_of(path) for path in RECIPE_PAGES}
    assert len(set(recipes.values())) == 1, recipes
    words = [w for w in commands(next(iter(recipes.values()))) if w[0] == "hsi"]
    assert [w[1] for w in words] == ["build", *STAGES]  # the command first, the stages after
    build_lines = {
        path.relative_to(ROOT).as_posix(): [
            words
            for block in bash_blocks(path)
            for words in commands(block)
            if words[:3] == ["hsi", "build", "--source"]
        ]
        for path in PAGES
    }
    shown = [words for lines in build_lines.values() for words in lines]
    canonical = shlex.split(BUILD_LINE)  # a page may add flags (backends: --masker sam ...), never change these
    assert len(shown) >= 5 and all(words[: len(canonical)] == canonical for words in shown), build_lines


def hsi_on_path(folder: Path) -> Path:
    folder.mkdir()
    script = folder / "hsi"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m hsi.cli "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def run_lines(lines: list[str], cwd: Path, env: dict) -> None:
    cwd.mkdir()
    for line in lines:
        done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"`{line}` exited {done.returncode}:\n{done.stderr[-3000:]}"


def test_hsi_build_is_the_stages_it_lists(tmp_path):
    lines = [line for line in recipe_of(ROOT / "README.md").splitlines() if line.startswith("hsi ")]
    imagenet = write_tree(tmp_path / "imagenet", count=4).root
    env = dict(os.environ, IMAGENET=str(imagenet), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    env["PATH"] = f"{hsi_on_path(tmp_path / 'bin')}{os.pathsep}{env['PATH']}"
    run_lines(lines[:1], tmp_path / "one-command", env)
    run_lines(lines[1:], tmp_path / "stage-by-stage", env)
    releases = [tmp_path / name / "build" / "hard-spurious-imagenet" for name in ("one-command", "stage-by-stage")]
    records = [json.loads((r / "_release.json").read_text()) for r in releases]
    assert records[0]["version"] == records[1]["version"] == "v1.0.0"
    assert records[0]["configs"] == records[1]["configs"] and "parts" in records[0]["configs"]
    assert shard_bytes(releases[0] / "data") == shard_bytes(releases[1] / "data") != {}
