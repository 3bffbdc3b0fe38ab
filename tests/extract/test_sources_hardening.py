"""Issue 10 on the extract side: suspicious inputs stop the run, the choice of annotations is said
and the official box tarballs' layouts are found, a one-pixel-wide box is a box. Each test failed
before its fix."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from fake_imagenet import WNIDS, extract_args, voc_xml, write_tree

from builder.core.records import Box
from builder.core.shard_read import iter_shard
from builder.extract.sources import load_sources
from builder.formats.parts import decode_parts
from hsi.cli import main


def extract(source: Path, out: Path, *extra) -> int:
    return main(extract_args(source, out, *map(str, extra)))


def boxes_of_another_resolution(root: Path) -> None:
    """The wrong annotation file: every box lies right of its (small) image."""
    for xml in (root / "bbox" / "val").glob("*.xml"):
        xml.write_text(voc_xml(xml.stem, (400, 300), [(WNIDS[0], 200, 150, 380, 290)]))


def test_too_many_skipped_images_stop_the_run_naming_the_top_reasons(tmp_path, capsys):
    write_tree(tmp_path / "imagenet", count=6)
    boxes_of_another_resolution(tmp_path / "imagenet")
    out = tmp_path / "out"
    assert extract(tmp_path / "imagenet", out) == 1  # before the fix: 0, with 0 parts
    message = capsys.readouterr().err
    assert "6 of the 6 images" in message and "--max-skip-fraction 0.5" in message
    assert re.search(r"top reasons: no-valid-box 6", message)
    parts = out / "parts"
    assert not (parts / "_info.json").exists()  # nothing downstream takes the split as finished
    reasons = {json.loads(line)["reason"] for line in (parts / "errors.jsonl").read_text().splitlines()}
    assert {"box-empty", "no-valid-box"} <= reasons  # kept for inspection
    assert extract(tmp_path / "imagenet", out, "--max-skip-fraction", 1) == 0  # accepting it finishes the split
    assert json.loads((parts / "_info.json").read_text())["splits"]["val"]["num_samples"] == 0


def test_a_skip_share_under_the_limit_passes(tmp_path):
    write_tree(tmp_path / "imagenet", count=6)
    for xml in sorted((tmp_path / "imagenet" / "bbox" / "val").glob("*.xml"))[:3]:
        xml.unlink()  # 3 of 6 skipped: exactly the limit, not more
    assert extract(tmp_path / "imagenet", tmp_path / "out") == 0
    assert extract(tmp_path / "imagenet", tmp_path / "strict", "--max-skip-fraction", 0.4) == 1


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan"])
def test_max_skip_fraction_must_be_a_share(tmp_path, capsys, value):
    write_tree(tmp_path / "imagenet", count=2)
    assert extract(tmp_path / "imagenet", tmp_path / "out", "--max-skip-fraction", value) == 2
    assert "--max-skip-fraction must be a number from 0 to 1" in capsys.readouterr().err


def test_xmls_are_preferred_to_the_loc_csv_and_the_choice_is_said(tmp_path):
    write_tree(tmp_path, layout="kaggle", count=3)
    said = []
    listing = load_sources(tmp_path, "val", announce=said.append)
    assert listing.annotations == tmp_path / "ILSVRC" / "Annotations" / "CLS-LOC" / "val"
    assert len(said) == 1 and "LOC_val_solution.csv" in said[0] and "clipped" in said[0] and "--boxes" in said[0]


@pytest.mark.parametrize("place", ["bbox", "val"])
def test_xmls_in_a_flat_bbox_folder_or_inside_val_are_found(tmp_path, place):
    tree = write_tree(tmp_path, count=4)
    for xml in sorted((tmp_path / "bbox" / "val").glob("*.xml")):
        xml.rename(tmp_path / place / xml.name)  # as ILSVRC2012_bbox_val_v3.tgz unpacks
    (tmp_path / "bbox" / "val").rmdir()
    if place == "val":
        shutil.rmtree(tmp_path / "bbox")
    listing = load_sources(tmp_path, "val", announce=lambda _: None)
    assert listing.annotations == tmp_path / place
    assert {r.image_id for r in listing.records} == {image.image_id for image in tree.good}
    assert listing.issues == []


def test_a_one_pixel_wide_box_is_kept(tmp_path):
    write_tree(tmp_path / "imagenet", count=3)
    xml = sorted((tmp_path / "imagenet" / "bbox" / "val").glob("*.xml"))[0]
    xml.write_text(voc_xml(xml.stem, (48, 40), [(WNIDS[0], 10, 5, 10, 30)]))  # x0 == x1: one pixel wide
    assert not Box(10, 5, 10, 30, WNIDS[0]).is_empty and Box(10, 5, 9, 30, WNIDS[0]).is_empty
    out = tmp_path / "out"
    assert extract(tmp_path / "imagenet", out) == 0
    assert (out / "parts" / "errors.jsonl").read_text() == ""
    samples = dict(sample for shard in sorted((out / "parts").glob("*.tar")) for sample in iter_shard(shard))
    parts = decode_parts(xml.stem, samples[xml.stem])
    assert parts.crop.shape[:2] == (26, 1) and np.asarray(parts.mask).shape == (26, 1)


def test_a_box_wholly_outside_the_image_is_still_empty(tmp_path):
    write_tree(tmp_path / "imagenet", count=3)
    xml = sorted((tmp_path / "imagenet" / "bbox" / "val").glob("*.xml"))[0]
    xml.write_text(voc_xml(xml.stem, (48, 40), [(WNIDS[0], 4, 4, 20, 20), (WNIDS[0], 60, 5, 70, 30)]))
    out = tmp_path / "out"
    assert extract(tmp_path / "imagenet", out) == 0
    rows = [json.loads(line) for line in (out / "parts" / "errors.jsonl").read_text().splitlines()]
    assert [(row["image_id"], row["reason"]) for row in rows] == [(xml.stem, "box-empty")]
