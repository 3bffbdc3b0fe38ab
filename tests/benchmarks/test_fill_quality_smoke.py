"""benchmarks/fill_quality.py on one scikit-image photo (four boxes): the default patchmatch fill is
the library's own fill at canvas scale (the same figures), the pipeline before #31 measurably adds
seams and colour steps on these photos, and the before/after sheet is written; on the photo's
frame-filling holes (#46) the default fill beats Telea's smear on the median score."""

import importlib.util
import sys
from pathlib import Path

from PIL import Image

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fill_quality.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("fill_quality", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_default_fill_is_the_libraries_and_the_old_pipeline_adds_seams(tmp_path, capsys):
    both = load_benchmark().main(
        ["--limit", "1", "--rounds", "1", "--no-knobs", "--no-demo", "--sheet-rows", "3", "--out", str(tmp_path)]
    )
    figures, frame = both["holes"], both["frame-filling holes"]
    default, library, before = figures["default"], figures["library"], figures["before #31"]
    quality = ("texture", "seam", "step", "score", "texture_low", "seam_high", "poor")
    assert {k: default[k] for k in quality} == {k: library[k] for k in quality}
    assert before["seam"] > default["seam"] and before["step"] > default["step"]
    assert figures["telea"]["texture"] < default["texture"]
    printed = capsys.readouterr().out
    assert "default vs library:" in printed and "no worse" in printed
    with Image.open(tmp_path / "fill_before_after.png") as sheet:
        assert sheet.width == 3 * (224 + 6) + 6 and sheet.height > 3 * 224
    assert frame["all"]["default"]["regions"] == 16  # one photo, bands along 1-4 sides, 4 known shares
    assert frame["all"]["default"]["score"] > frame["all"]["telea"]["score"]
    assert frame["all"]["default"]["texture"] > 2 * frame["all"]["telea"]["texture"]
    assert "default vs telea on frame-filling holes" in printed and "NOT BETTER" not in printed
    with Image.open(tmp_path / "fill_frame_before_after.png") as sheet:
        assert sheet.width == 3 * (224 + 6) + 6 and sheet.height > 3 * 224
