"""A CPU smoke run of benchmarks/inpaint_quality.py (one demo photo, a small fill scale), so the
benchmark keeps running as the backends change."""

import importlib.util
import math
import sys
from pathlib import Path

from PIL import Image

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "inpaint_quality.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("inpaint_quality", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_prints_both_inpainters_and_writes_the_sheet(tmp_path, capsys):
    figures = load_benchmark().main(
        ["--limit", "1", "--rounds", "1", "--scale", "64", "--sheet-height", "40", "--out", str(tmp_path)]
    )
    printed = capsys.readouterr().out
    assert "telea" in printed and "patchmatch" in printed and "50k val" in printed
    assert "ratio patchmatch / telea: texture@224" in printed and "(target > 1: " in printed
    assert set(figures["results"]) == {"telea", "patchmatch"}
    for result in figures["results"].values():
        assert result["images_per_s"] > 0 and math.isfinite(result["canvas"]) and math.isfinite(result["native"])
        assert 0 <= result["canvas"] < figures["photo"][0]  # neither fill holds the object's texture
    sheet = Image.open(figures["sheet"])
    assert sheet.height == 16 + 40 + 4 and sheet.width > 3 * 40  # one row: original | telea | patchmatch
