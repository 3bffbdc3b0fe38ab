"""`hsi extract --inpainter patchmatch` end to end: the same bytes across runs and worker counts, the
photo's own pixels outside the erase mask, a part with no background of its own where boxes cover the photo,
and parts that compose and validate take unchanged. (The Ray runner: tests/core/test_ray_runner.py.)"""

import json
from pathlib import Path

import numpy as np
import pytest
from fake_imagenet import error_rows, shard_hashes, synthetic_photo, voc_xml, write_tree
from PIL import Image

from builder.extract.images import decode_image
from builder.formats.fill_scores import canvas_mask, score_fill
from builder.formats.parts import decode_canvas, decode_mask, iter_parts, iter_parts_samples
from hsi.cli import main

COVERED = "ILSVRC2012_val_00000099"  # its box covers the whole photo: nothing left to copy from


def extract(*args) -> int:
    return main(["extract", "--no-progress", "--inpainter", "patchmatch", *map(str, args)])


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tree = write_tree(tmp_path_factory.mktemp("imagenet"), split="val", count=5)
    wnid = tree.good[0].wnid
    Image.fromarray(synthetic_photo(99, 60, 50)).save(tree.root / "val" / f"{COVERED}.JPEG", quality=92)
    (tree.root / "bbox" / "val" / f"{COVERED}.xml").write_text(voc_xml(COVERED, (60, 50), [(wnid, 0, 0, 59, 49)]))
    return tree


@pytest.fixture(scope="module")
def runs(tree, tmp_path_factory):
    """The same tree extracted twice, in separate runs: with one worker and with two."""
    out = tmp_path_factory.mktemp("runs")
    for name, workers in (("one", 1), ("two", 2)):
        args = ("--source", tree.root, "--out", out / name, "--shard-size", 2, "--workers", workers, "--dilation", 5)
        assert extract(*args) == 0
    return out


def test_parts_are_byte_identical_across_runs_and_worker_counts(runs):
    one = shard_hashes(runs / "one" / "parts")
    assert len(one) == 3
    assert shard_hashes(runs / "two" / "parts") == one
    for name in ("_info.json", "errors.jsonl"):
        assert (runs / "one/parts" / name).read_bytes() == (runs / "two/parts" / name).read_bytes()


def test_outside_the_fill_mask_the_background_is_the_photo(tree, runs):
    parts = list(iter_parts(runs / "one" / "parts"))
    assert len(parts) == 6
    for part in parts:
        photo = decode_image(Path(next(tree.root.glob(f"val/{part.key}.JPEG")))).rgb
        assert part.fill[part.erase].all()  # fill.png holds the erase mask and the band pasted with it
        assert np.array_equal(part.background[~part.fill], photo[~part.fill])
        if part.key != COVERED:
            assert part.meta["provenance"]["backends"]["inpainter"]["name"] == "patchmatch"
            assert "inpaint_fallback" not in part.meta["provenance"]
            assert not np.array_equal(part.background[part.erase], photo[part.erase])


def test_every_part_has_fill_scores_and_the_manifest_summarises_them(runs):
    parts_dir = runs / "one" / "parts"
    scores = {}
    for key, members in iter_parts_samples(parts_dir):
        meta = json.loads(members["json"])
        assert meta["schema_version"] == 2
        fill = decode_mask(members["fill.png"])
        expected = score_fill(decode_canvas(members["canvas.npy"]), canvas_mask(fill, 224))
        assert meta["fill_scores"] == expected.to_json()  # the scores of the canvas stored beside them
        scores[key] = meta["fill_scores"]
    # its box covers the photo: all of it is fill, nothing of its own is left, it scores 0
    assert scores[COVERED] == {"texture": 0.0, "seam": 1.0, "step": 0.0, "score": 0.0}
    summary = json.loads((parts_dir / "_info.json").read_text())["splits"]["val"]["fill_scores"]
    assert summary["scored"] == 6 and summary["unscored"] == 0
    assert summary["score"]["median"] == round(float(np.median([s["score"] for s in scores.values()])), 4)
    below = sum(s["score"] < summary["poor_score"] for s in scores.values()) / 6
    assert summary["share_below_poor_score"] == round(below, 4)


def test_a_photo_its_boxes_cover_has_no_background_of_its_own_said_in_a_row_and_its_json(runs):
    rows = [row for row in error_rows(runs / "one" / "parts") if row["reason"] in ("inpaint-fallback", "no-background")]
    assert [(row["image_id"], row["reason"], row["action"]) for row in rows] == [(COVERED, "no-background", "reported")]
    assert 'background_status "none"' in rows[0]["detail"]
    parts = {p.key: p for p in iter_parts(runs / "one" / "parts")}
    covered = parts.pop(COVERED)
    assert covered.meta["background_status"] == "none"
    assert all("background_status" not in part.meta for part in parts.values())  # absent: their own
    fallback = covered.meta["provenance"]["inpaint_fallback"]  # its pixels: Telea's, from nothing
    assert fallback["reason"] == "inpaint-fallback" and fallback["inpainter"]["name"] == "telea"
    manifest = json.loads((runs / "one" / "parts" / "_info.json").read_text())
    assert manifest["errors"]["by_reason"] == {"no-background": 1}
    assert manifest["backends"]["inpainter"]["params"]["scale"] == "canvas"


def test_compose_and_validate_take_patchmatch_parts_unchanged(runs, tmp_path):
    parts = runs / "one" / "parts"
    args = ["compose", "--parts", str(parts), "--out", str(tmp_path), "--name", "c", "--no-progress"]
    assert main([*args, "--sizes", "56", "--positions", "center,top-right"]) == 0
    dataset = tmp_path / "c"
    assert json.loads((dataset / "_info.json").read_text())["splits"]["val"]["num_samples"] > 0
    assert main(["validate", str(dataset), "--parts", str(parts), "--no-previews"]) == 0
    assert json.loads((dataset / "validation.json").read_text())["ok"] is True
