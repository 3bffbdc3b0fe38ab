"""`hsi validate --parts` reads the object as `--paper-exact` compose cut it (issue 10, point 19).

A paper-exact set pastes the paper's exclusive crop of its float32-moved box, and in AR mode sizes it
with the paper's int(); validation must compare the pasted pixels with that same cut (one shared
function, `builder.compose.object_crop.read_spec_object`) and that same size, or correct data fails.
The boxes below are planted on 150 x 110 images where the float32 round trip moves coordinates
(x: 49, 63, 89, 98, 117, 126 of 150; y: 1, 2, 4, 8, 16, 29, 32, 58, 64 of 110)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from fake_imagenet import voc_xml
from manifest_io import read_manifest
from PIL import Image

from builder.core.manifest import ManifestError, write_json_atomic
from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from hsi.cli import main
from validation.integrity import check_dataset

WNID = "n01443537"  # goldfish
WIDTH, HEIGHT = 150, 110
BOXES = {
    "ILSVRC2012_val_00000011": (49, 29, 120, 95),  # the top-left corner moves up and left
    "ILSVRC2012_val_00000012": (10, 12, 89, 58),  # the bottom-right corner moves
    "ILSVRC2012_val_00000013": (63, 10, 140, 100),  # only x0 moves
    "ILSVRC2012_val_00000014": (5, 5, 140, 100),  # nothing moves: only the exclusive ends differ
    "ILSVRC2012_val_00000015": (0, 64, 149, 109),  # y0 moves; the box touches three image edges
    "ILSVRC2012_val_00000016": (98, 2, 126, 100),  # portrait, x0, y0 and x1 move
}
# the moved top-left corner lies outside the inclusive box: without a margin the parts lack it
CORNER_OUTSIDE = {f"ILSVRC2012_val_000000{n}" for n in (11, 13, 15, 16)}
POSITIONS = "center,top-right,random-corner"


def test_the_planted_coordinates_move_as_the_docstring_says():
    def moved(size: int) -> list[int]:
        return [v for v in range(1, size) if int(np.float32(v / size) * np.float32(size)) != v]

    assert moved(WIDTH) == [49, 63, 89, 98, 117, 126] and moved(HEIGHT) == [1, 2, 4, 8, 16, 29, 32, 58, 64]
    outside = {key for key, (x0, y0, _, _) in BOXES.items() if x0 in moved(WIDTH) or y0 in moved(HEIGHT)}
    assert outside == CORNER_OUTSIDE


def textured_photo(seed: int) -> np.ndarray:
    """Smooth grey stripes of a 9 px period: JPEG and the resize keep them well, and a box a pixel
    off shifts them by a ninth of a period, so a wrong cut shows far above JPEG's loss."""
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
    stripes = 128 + 100 * np.sin(2 * np.pi * (xx + (seed + 1) * yy / 4) / 9)
    return np.clip(np.stack([stripes, stripes * 0.8 + 20, stripes * 0.6 + 40], axis=-1), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    """Parts of the planted boxes, extracted with and without `--crop-margin 1` (m1, m0)."""
    root = tmp_path_factory.mktemp("planted")
    (root / "imagenet" / "val").mkdir(parents=True)
    (root / "imagenet" / "bbox" / "val").mkdir(parents=True)
    for n, (image_id, box) in enumerate(sorted(BOXES.items())):
        photo = Image.fromarray(textured_photo(n))
        photo.save(root / "imagenet" / "val" / f"{image_id}.JPEG", format="JPEG", quality=92)
        xml = voc_xml(image_id, (WIDTH, HEIGHT), [(WNID, *box)])
        (root / "imagenet" / "bbox" / "val" / f"{image_id}.xml").write_text(xml)
    for margin in (0, 1):
        args = ["extract", "--source", root / "imagenet", "--split", "val", "--out", root / f"m{margin}"]
        assert main([*map(str, args), "--crop-margin", str(margin), "--no-progress"]) == 0
    return root


def compose(parts: Path, out: Path, *flags: str) -> Path:
    args = ["compose", "--parts", str(parts), "--out", str(out), "--name", "c", "--no-progress", "--paper-exact"]
    assert main([*args, "--sizes", "56,84", "--positions", POSITIONS, "--backgrounds", "original,gray", *flags]) == 0
    return out / "c"


@pytest.fixture(scope="module", params=["square", "ar"])
def paper_set(request, planted, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp(f"paper-{request.param}")
    return compose(planted / "m1", out, "--mode", request.param)


def validate(dataset: Path, parts: Path) -> tuple[int, dict]:
    status = main(["validate", str(dataset), "--parts", str(parts), "--no-previews"])
    return status, json.loads((dataset / "validation.json").read_text())["integrity"]


def samples_of(dataset: Path) -> list[dict]:
    return [json.loads(m["json"]) for path in sorted(dataset.glob("*.tar")) for _, m in iter_shard(path)]


def test_a_paper_exact_set_from_parts_with_a_margin_validates(paper_set, planted):
    metas = samples_of(paper_set)
    assert {m["source_id"] for m in metas} == set(BOXES)  # every planted box, moved corners included
    assert json.loads((paper_set / "_info.json").read_text())["errors"]["total"] == 0
    status, report = validate(paper_set, planted / "m1")
    assert report["failures"] == [] and status == 0
    assert report["placements_compared"] == len(metas) == 2 * 2 * 3 * len(BOXES)
    assert report["backgrounds_compared"] == len(metas)


def test_ar_sizes_are_the_papers_truncated_sizes_of_its_own_crop(planted, tmp_path):
    # image 12's box (10, 12, 89, 58) moves to (10, 12, 88, 57): the paper's crop is 78 x 45, and
    # 84 * 78 / 45 = 145.6 is 145 by int() (146 half up; our inclusive 80 x 47 would give 143);
    # image 16's (98, 2, 126, 100) moves to (97, 1, 125, 100): 28 x 99, at 84 the long side
    # 297 passes the canvas, so it is 224 and the short side int(224 * 28 / 99) = int(63.35) = 63
    metas = samples_of(compose(planted / "m1", tmp_path, "--mode", "ar"))
    boxes = {(m["source_id"][-2:], m["size"]): (m["box_w"], m["box_h"]) for m in metas}
    assert boxes[("12", 56)] == (97, 56) and boxes[("12", 84)] == (145, 84)
    assert boxes[("16", 56)] == (56, 198) and boxes[("16", 84)] == (63, 224)


def tamper_inside_the_box(dataset: Path) -> str:
    """Paint a block inside one composite's pasted box, then fix the manifest's hashes as someone
    who knows the format would; returns the changed key."""
    manifest = read_manifest(dataset)
    shard = manifest["splits"]["val"]["shards"][0]
    samples = list(iter_shard(dataset / shard["filename"]))
    key, members = samples[0]
    meta = json.loads(members["json"])
    pixels = np.asarray(Image.open(io.BytesIO(members["jpg"])).convert("RGB")).copy()
    x, y, w, h = meta["box_x"], meta["box_y"], meta["box_w"], meta["box_h"]
    block = (slice(y + h // 4, y + 3 * h // 4), slice(x + w // 4, x + 3 * w // 4))
    pixels[block] = 255 - pixels[block]  # a quarter of the box inverted: far past the JPEG tolerance
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=95)
    samples[0] = (key, {**members, "jpg": buffer.getvalue()})
    stats = write_shard(dataset / shard["filename"], samples)
    shard.update(bytes=stats.bytes, sha256=stats.sha256)
    write_json_atomic(dataset / "_info.json", manifest)
    return key


def test_pixels_changed_inside_the_box_still_fail_the_placement_check(planted, tmp_path):
    for mode in ("square", "ar"):
        dataset = compose(planted / "m1", tmp_path / mode, "--mode", mode)
        key = tamper_inside_the_box(dataset)
        status, report = validate(dataset, planted / "m1")
        assert status == 1
        assert [(f["reason"], f["key"]) for f in report["failures"]] == [("placement", key)], mode
        assert "differ from the object's crop" in report["failures"][0]["detail"]


def test_a_paper_crop_clipped_source_is_reported_not_crashed(paper_set, planted):
    # parts without a margin lack the pixel left of or above the moved corners (the CLI refuses
    # them by fingerprint first; the check itself must still name the problem)
    found = check_dataset(paper_set, planted / "m0" / "parts").failures
    clipped = {m["source_id"] for m in samples_of(paper_set) if m["source_id"] in CORNER_OUTSIDE}
    assert {f.reason for f in found} == {"placement-parts"}
    assert {f.detail.split()[1] for f in found} == clipped
    assert all("paper-crop-clipped" in f.detail and "--crop-margin 1" in f.detail for f in found)
    per_source = 2 * 2 * 3
    assert len(found) == per_source * len(clipped)


def test_a_spec_with_a_cut_compose_does_not_know_is_refused(paper_set, planted, tmp_path):
    dataset = tmp_path / "c"
    shutil.copytree(paper_set, dataset)
    manifest = read_manifest(dataset)
    manifest["spec"]["box_rounding"] = "float16"
    write_json_atomic(dataset / "_info.json", manifest)
    refusal = r"box_rounding` \(--box-rounding\): 'float16'; use one of none, float32-normalised"
    with pytest.raises(ManifestError, match=refusal):
        check_dataset(dataset, planted / "m1" / "parts")
