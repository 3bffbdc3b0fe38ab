"""benchmarks/gpu_suite.py in CPU mode (its tiny models), so the GPU suite keeps running as the
backends change: every stage prints a positive figure, or a skip that names a package this
environment really lacks, then the summary table, and the run exits 0."""

import hashlib
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_models import write_tiny_lama

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_suite.py"
EVAL_ROWS = ["eval:test_resnet", "eval:test_resnet+amp", "eval:test_vit", "eval:test_vit+amp"]
EXPECTED_ROWS = ["extract", "sd", "detect", *EVAL_ROWS, "clip:hsi-tiny-clip"]
FIGURE_ROW = re.compile(r"^(?P<stage>\S+)\s+(?P<figure>\S+)\s{2}(?P<target>.{20}) +(?P<ratio>\S+) +(?P<wall>[0-9.]*)  ")
SKIP_ROW = re.compile(r"^(?P<stage>\S+)\s+skipped: (?P<why>.+) (is|are) not installed$")
# module -> the name a skip prints for it
MODULES = {"segment_anything": "segment-anything", "diffusers": "diffusers", "transformers": "transformers"}
MODULES |= {"open_clip": "open-clip-torch", "timm": "timm", "torch": "torch", "pytest": "pytest"}


def load_suite():
    spec = importlib.util.spec_from_file_location("gpu_suite", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def summary_rows(stdout: str) -> list[str]:
    """The summary table's rows: between its header line and the total wall time."""
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("stage ") and "ratio to target" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("total wall time "))
    assert lines[header - 1].startswith("summary"), lines[header - 1]
    return lines[header + 1 : end]


@pytest.mark.slow
def test_cpu_mode_times_every_stage_and_prints_the_summary(tmp_path):
    lama = write_tiny_lama(tmp_path)  # so LaMa's path is timed too, as with the real file
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("LAMA_MODEL", None)
    trust = ["--trust-file", hashlib.sha256(lama.read_bytes()).hexdigest()]  # TorchScript is code: trusted by sha256
    command = [sys.executable, str(SCRIPT), "--device", "cpu", "--lama-checkpoint", str(lama), *trust]
    command += ["--json", str(tmp_path / "figures.json")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    rows = summary_rows(result.stdout)
    assert [row.split()[0] for row in rows] == EXPECTED_ROWS, rows
    for row in rows:
        skipped = SKIP_ROW.match(row)
        if skipped:  # only for a package this environment lacks
            missing = [m for m, name in MODULES.items() if name in skipped["why"] and not importlib.util.find_spec(m)]
            assert missing, f"a skip for a package that is installed: {row}"
            continue
        match = FIGURE_ROW.match(row)
        assert match, f"not a figure row: {row!r}"
        figure = float(match["figure"])
        assert figure > 0 and math.isfinite(figure), row
        assert float(match["wall"] or "1") > 0, row
    extract = next(row for row in rows if row.startswith("extract"))
    assert "28 images/s" in extract and "+ LaMa," in extract, extract  # the target, and LaMa was timed
    for row in rows:
        if row.startswith(("eval:", "clip:")) and not SKIP_ROW.match(row):
            # the figure is the steady part's rate, the loader's start-up and the whole run beside it
            ratio = float(FIGURE_ROW.match(row)["ratio"])
            assert ratio > 0 and "steady eval / forward-only " in row and " s loader start-up" in row, row
            assert ("--amp bf16 (no autocast on the CPU) --channels-last" in row) == row.split()[0].endswith("+amp")
        if row.startswith("clip:") and not SKIP_ROW.match(row):  # the tiny CLIP's forward is too fast for a ratio
            assert "3 prompt sets from one image pass" in row, row
    # where the time goes, per stage
    parts = ("sam_enc ", "lama ", "unet ", "ms per UNet step", "processor + post-processing", "data path alone")
    for part in (*parts, "text classifiers of openai, simple, no-scale: 160 texts"):
        assert part in result.stdout, part
    assert "WARNING" not in result.stdout  # the time limit is the GPU's; a CPU run never warns

    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["tiny"] is True and [r["stage"] for r in figures["rows"]] == EXPECTED_ROWS
    assert all(r["images_per_s"] > 0 for r in figures["rows"] if not r["skipped"])
    for row in figures["rows"]:
        if row["stage"].startswith(("eval:", "clip:")) and not row["skipped"]:
            seconds = row["seconds"]
            assert 0 < seconds["eval start-up"] and 0 < seconds["eval steady"] < seconds["eval path"], row


def test_a_stage_without_its_package_is_skipped_and_the_suite_goes_on(monkeypatch, capsys):
    suite = load_suite()
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        suite.importlib.util, "find_spec", lambda name, *a: None if name == "diffusers" else real_find_spec(name, *a)
    )
    assert suite.main(["--device", "cpu", "--only", "sd"]) == 0
    printed = capsys.readouterr().out
    assert "  skipped: diffusers is not installed" in printed
    assert [row.split(None, 1) for row in summary_rows(printed)] == [["sd", "skipped: diffusers is not installed"]]


def test_batch_sizes_and_stages_parse_as_documented():
    suite = load_suite()
    assert suite.parse_batch_sizes("4") == dict.fromkeys(suite.STAGES, 4)
    assert suite.parse_batch_sizes("extract=2, sd=8") == {"extract": 2, "sd": 8}
    assert suite.parse_stages("eval,extract") == ("extract", "eval")  # the suite's order
    for bad in ("gpu=4", "extract=0", "extract=x"):
        with pytest.raises(Exception, match="batch size|--batch-size|unknown stage"):
            suite.parse_batch_sizes(bad)
    with pytest.raises(Exception, match="--only"):
        suite.parse_stages("extract,train")
    # the defaults are the commands' own: hsi extract 8, hsi scgs --sd-batch-size 4, validate 8, eval 64 (clip too)
    assert suite.default_batch_sizes() == {"extract": 8, "sd": 4, "detect": 8, "eval": 64, "clip": 64}
    assert suite.scgs_defaults().steps == 30


def test_json_is_written_after_every_stage_and_a_skip_fails_a_strict_run(tmp_path, monkeypatch):
    """A run stopped at its time limit keeps what it measured: the file holds each stage's row as
    soon as the stage ends, with the package versions and math flags; --strict (implied on CUDA)
    turns a skipped stage into exit 1."""
    suite = load_suite()
    figures = tmp_path / "figures.json"
    seen_by_second = []

    def first(ctx):
        ctx.notes["extract"] = {"sam_precision": "fp32"}
        return [suite.Row("extract", 2.0, "-", None, "first")]

    def second(ctx):
        seen_by_second.append(json.loads(figures.read_text()))
        return [suite.Row("sd", 1.0, "-", None, "second")]

    monkeypatch.setattr(suite, "BENCHES", {"extract": first, "sd": second})
    monkeypatch.setattr(suite, "REQUIREMENTS", {"extract": ("torch",), "sd": ("torch",)})
    assert suite.main(["--device", "cpu", "--only", "extract,sd", "--json", str(figures)]) == 0
    (partial,) = seen_by_second
    assert [row["stage"] for row in partial["rows"]] == ["extract"] and partial["finished"] is False
    assert partial["stages"]["extract"]["sam_precision"] == "fp32"
    assert partial["packages"]["torch"] and set(partial["math"]) >= {"matmul_allow_tf32", "cudnn_allow_tf32"}
    final = json.loads(figures.read_text())
    assert [row["stage"] for row in final["rows"]] == ["extract", "sd"] and final["finished"] is True
    monkeypatch.setattr(suite, "REQUIREMENTS", {"extract": ("torch",), "sd": ("no_such_package_hsi",)})
    assert suite.main(["--device", "cpu", "--only", "extract,sd"]) == 0  # a skip on the CPU: the suite goes on
    assert suite.main(["--device", "cpu", "--only", "extract,sd", "--strict"]) == 1


PREFLIGHT_WITHOUT_SAM = """
import runpy, sys
sys.modules["segment_anything"] = None  # as where the wheel was not carried
sys.argv = [sys.argv[1], "--preflight", "--device", "cpu"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_preflight_names_a_missing_package_and_exits_1():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PREFLIGHT_WITHOUT_SAM, str(SCRIPT)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    extract = next(line for line in lines if line.startswith("extract "))
    assert extract == "extract  MISSING segment-anything (not installed)"
    assert [line.split()[1] for line in lines if line.split()[0] in ("sd", "detect", "eval", "clip")] == ["ready"] * 4
    versions = next(line for line in lines if line.startswith("versions: "))
    assert "torch " in versions and "segment-anything" in versions
