"""The carried kit (`make gpu-kit`), tested without a GPU: a Python 3.12 holding torch 2.11 and the
lent image's packages (not the project's) takes the kit's wheels with `--no-index` and runs every
stage of `gpu_suite.py --device cpu --tiny --json`; without one wheel, `--preflight` names it and the
suite exits 1.

Heavy (the image-like Python is a few GB): marked slow and skipped, with its reason, where that
Python (HSI_IMAGE_PYTHON) or the kit (.gpu-kit/, from `make gpu-kit`) is absent. docs/backends.md
says how to make the Python."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_suite.py"
KIT = ROOT / ".gpu-kit"
DROPPED = "segment_anything"  # the wheel left out to prove the preflight notices


def image_python() -> str:
    python = os.environ.get("HSI_IMAGE_PYTHON")
    if not python or not Path(python).is_file():
        pytest.skip("HSI_IMAGE_PYTHON is not set to a Python 3.12 with torch 2.11 and the lent image's packages")
    probe = subprocess.run(
        [python, "-c", "import sys, torch; print(sys.version_info[:2] == (3, 12), torch.__version__)"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0 or not probe.stdout.startswith("True 2.11"):
        pytest.skip(
            f"HSI_IMAGE_PYTHON is not Python 3.12 with torch 2.11 ({probe.stdout.strip() or probe.stderr[-200:]})"
        )
    if not (KIT / "kit.json").is_file():
        pytest.skip("no .gpu-kit/ in this checkout: run make gpu-kit")
    return python


def install(python: str, wheels: list[Path], target: Path) -> dict:
    """The wheels installed as the lent machine would, from the kit alone, into `target`; the
    environment that puts them on the path."""
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--target",
            str(target),
            *map(str, wheels),
        ],
        check=True,
        timeout=600,
    )
    return {**os.environ, "PYTHONPATH": str(target), "HF_HUB_OFFLINE": "1", "PYTHONNOUSERSITE": "1"}


def suite(python: str, env: dict, *args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.slow
def test_the_kit_alone_runs_every_stage_and_a_missing_wheel_is_named(tmp_path):
    python = image_python()
    wheels = sorted(KIT.glob("*.whl"))
    listed = json.loads((KIT / "kit.json").read_text())
    assert sorted(row["wheel"] for row in listed["wheels"]) == [w.name for w in wheels]
    assert listed["bytes"] == sum(w.stat().st_size for w in wheels) <= 64 << 20

    env = install(python, wheels, tmp_path / "kit")
    preflight = suite(python, env, "--preflight", "--device", "cpu")
    assert preflight.returncode == 0, preflight.stdout + preflight.stderr
    assert "MISSING" not in preflight.stdout and "torch 2.11" in preflight.stdout
    figures = tmp_path / "figures.json"
    run = suite(python, env, "--device", "cpu", "--tiny", "--strict", "--json", str(figures))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = json.loads(figures.read_text())["rows"]
    assert {row["stage"].split(":")[0] for row in rows} == {"extract", "sd", "detect", "eval", "clip"}
    assert not [row for row in rows if row["skipped"] or row["failed"]]

    fewer = [w for w in wheels if not w.name.startswith(DROPPED)]
    assert len(fewer) == len(wheels) - 1
    env = install(python, fewer, tmp_path / "kit-but-one")
    preflight = suite(python, env, "--preflight", "--device", "cpu")
    assert preflight.returncode == 1 and "extract  MISSING segment-anything" in preflight.stdout, preflight.stdout
    run = suite(python, env, "--device", "cpu", "--tiny", "--strict", "--only", "extract")
    assert run.returncode == 1 and "extract" in run.stdout and "skipped: segment-anything" in run.stdout
