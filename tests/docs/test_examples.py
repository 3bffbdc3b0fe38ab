"""Every code example is a test: each ```python block of README.md and docs/*.md runs as written
(sybil's Markdown parser), the blocks of one file in order in one namespace, in a working directory
holding what they name (conftest.py); a block that raises fails its file's test. The README's shell
quickstart runs line by line, `hsi` on PATH, against fake ImageNet trees in both real layouts."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from fake_imagenet import write_tree
from sybil import Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
QUICKSTART = "## Running on your ImageNet"

PYTHON = Sybil(parsers=[PythonCodeBlockParser()])


def has_python(path: Path) -> bool:
    return any(True for _ in PYTHON.parse(path).examples())


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", [p for p in DOCUMENTS if has_python(p)], ids=relative)
def test_the_python_examples_run(path, examples_cwd, doc_examples, capsys):
    document = PYTHON.parse(path)
    document.namespace["data"] = doc_examples.release  # "data: a release folder, a composed folder or hf://"
    for example in document.examples():
        example.evaluate()
    if path == README:
        saved = re.findall(r"\.save\(\s*[\"']([^\"']+)[\"']", document.text)
        check_readme_evaluations(examples_cwd, doc_examples, capsys.readouterr().out, saved)


def check_readme_evaluations(cwd: Path, examples, printed: str, saved: list[str]) -> None:
    """What the README's examples say they do: each `evaluation.save(FOLDER)` wrote FOLDER, each
    saved evaluation holds every sample, its worst group is what the example printed, and it has the
    numbers `hsi eval` gives the same model (the one predictions.csv came from, or model.pt itself)."""
    reports = {p.parent.name: json.loads(p.read_text()) for p in cwd.glob("*/eval.json")}
    assert saved and sorted(reports) == sorted(saved), "the README's examples did not save what they say"
    expected = examples.metrics
    for name, report in reports.items():
        metrics = report["metrics"]
        assert metrics["samples"] == examples.samples, name
        assert metrics["groups_summary"]["worst_group"]["group"] in printed, name
        assert (cwd / name / "eval.md").is_file() and (cwd / name / "predictions.parquet").is_file()
        if report["model"]["spec"].endswith("predictions.csv"):  # hsi.score: top-1 and top-5 carried over
            cells = [(c["group"], c["size"], c["top1"]["value"], c["top5"]["value"]) for c in metrics["by_group_size"]]
            assert cells == [
                (c["group"], c["size"], c["top1"]["value"], c["top5"]["value"]) for c in expected["by_group_size"]
            ]
        else:  # hsi.evaluate on the model in memory: every number of hsi eval
            assert metrics == expected, name


def test_python_examples_are_fenced_as_python():
    """A block fenced as ```py or ```pycon would never run: the examples stay under one tag."""
    for path in DOCUMENTS:
        tags = re.findall(r"^\s*```+\s*([\w+-]+)", path.read_text("utf-8"), re.M)
        assert not {t.lower() for t in tags} & {"py", "python3", "pycon", "ipython", "pytb"}, relative(path)


# --- the README's shell quickstart -------------------------------------------------------------


def run_shell_lines(example) -> None:
    """Run each line of a bash block in bash, in the namespace's cwd and env; `pip install` lines
    are skipped (the test runs the checkout it is in). Each must exit 0."""
    ran = example.namespace.setdefault("ran", [])
    for line in example.parsed.splitlines():
        words = shlex.split(line, comments=True)
        if not words or words[:2] == ["pip", "install"]:
            continue
        result = subprocess.run(
            ["bash", "-c", line],
            cwd=example.namespace["cwd"],
            env=example.namespace["env"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"`{line}` exited {result.returncode}:\n{result.stderr[-3000:]}"
        ran.append(words)


SHELL = Sybil(parsers=[CodeBlockParser("bash", run_shell_lines)])


def quickstart_example():
    """The bash block under the README's "Running on your ImageNet"."""
    document = SHELL.parse(README)
    start = document.text.index(f"\n{QUICKSTART}\n")
    end = document.text.find("\n## ", start + 1)
    blocks = [e for e in document.examples() if start < e.start < (end if end > 0 else len(document.text))]
    assert len(blocks) == 1, f"expected one bash block under {QUICKSTART!r}, found {len(blocks)}"
    return blocks[0]


def hsi_on_path(folder: Path) -> Path:
    """A folder whose `hsi` runs this checkout's command line with this interpreter."""
    folder.mkdir()
    script = folder / "hsi"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m hsi.cli "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


@pytest.mark.parametrize("layout", ["ilsvrc", "kaggle"])
def test_the_readme_quickstart_builds_a_release_from_imagenet(layout, tmp_path):
    example = quickstart_example()
    imagenet = write_tree(tmp_path / "imagenet", layout=layout, count=4).root
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, IMAGENET=str(imagenet), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    env["PATH"] = f"{hsi_on_path(tmp_path / 'bin')}{os.pathsep}{env['PATH']}"
    example.namespace.update(cwd=work, env=env)
    example.evaluate()
    ran = example.namespace["ran"]
    assert ["hsi", "extract"] in [words[:2] for words in ran] and "$IMAGENET" in example.parsed
    (release,) = [words for words in ran if words[:2] == ["hsi", "release"]]
    folder = work / release[release.index("--out") + 1]
    assert (folder / "README.md").is_file() and (folder / "_release.json").is_file()
    assert list((folder / "data").glob("*/*.tar"))
