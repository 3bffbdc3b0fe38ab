"""`hsi extract --inpainter patchmatch` on photos whose object fills the frame (#46): every photo
with at least 2% of its frame left outside the erase mask gets a PatchMatch texture fill from that
band (no `inpaint-fallback` row, no fallback in its provenance); under 1% it is still Telea's,
reported; with nothing known, the part says it has no background of its own."""

import json

import pytest
from fake_imagenet import WNIDS, error_rows, synthetic_photo, voc_xml, write_tree
from PIL import Image

from builder.formats.parts import iter_parts
from hsi.cli import main

WIDTH, HEIGHT = 300, 240
# image id -> the band (left, top, right, bottom) in pixels the box leaves outside it
BANDS = {
    "ILSVRC2012_val_00000201": (6, 0, 0, 0),  # 2.0% known, along one side
    "ILSVRC2012_val_00000202": (15, 0, 0, 0),  # 5%
    "ILSVRC2012_val_00000203": (30, 0, 0, 0),  # 10%
    "ILSVRC2012_val_00000204": (60, 0, 0, 0),  # 20%
    "ILSVRC2012_val_00000205": (8, 7, 0, 0),  # 5.5%, two sides
    "ILSVRC2012_val_00000206": (4, 4, 4, 0),  # 4.4%, three sides
    "ILSVRC2012_val_00000207": (2, 2, 2, 2),  # 3.0%, all four sides
    "ILSVRC2012_val_00000208": (12, 10, 12, 10),  # 15%, all four sides
}
SLIVER = "ILSVRC2012_val_00000209"  # one column known: 0.3%
COVERED = "ILSVRC2012_val_00000210"  # nothing known


def known_share(band) -> float:
    left, top, right, bottom = band
    return 1 - (WIDTH - left - right) * (HEIGHT - top - bottom) / (WIDTH * HEIGHT)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    tree = write_tree(tmp_path_factory.mktemp("imagenet"), split="val", count=0)
    (tree.root / "val").mkdir(exist_ok=True)
    (tree.root / "bbox" / "val").mkdir(parents=True, exist_ok=True)
    photos = [*BANDS.items(), (SLIVER, (1, 0, 0, 0)), (COVERED, (0, 0, 0, 0))]
    for n, (image_id, (left, top, right, bottom)) in enumerate(photos):
        Image.fromarray(synthetic_photo(200 + n, WIDTH, HEIGHT)).save(tree.root / "val" / f"{image_id}.JPEG")
        box = (WNIDS[0], left, top, WIDTH - 1 - right, HEIGHT - 1 - bottom)
        (tree.root / "bbox" / "val" / f"{image_id}.xml").write_text(voc_xml(image_id, (WIDTH, HEIGHT), [box]))
    out = tmp_path_factory.mktemp("out")
    args = ["extract", "--no-progress", "--inpainter", "patchmatch", "--dilation", "0"]
    assert main([*args, "--source", str(tree.root), "--out", str(out)]) == 0
    return out / "parts"


def test_every_photo_with_2_percent_of_its_frame_known_is_filled_by_patchmatch(parts):
    assert min(known_share(band) for band in BANDS.values()) >= 0.02
    rows = [row for row in error_rows(parts) if row["reason"] == "inpaint-fallback"]
    assert [row["image_id"] for row in rows] == [SLIVER]
    assert "under the 1% the band fill needs" in rows[0]["detail"]
    found = {part.key: part for part in iter_parts(parts)}
    assert set(found) == {*BANDS, SLIVER, COVERED}
    for image_id in BANDS:
        part = found[image_id]
        assert "inpaint_fallback" not in part.meta["provenance"]
        assert part.fill[part.erase].all()
        left = BANDS[image_id][0]
        assert not part.fill[:, : max(left - 5, 0)].any()  # the band stays the photo's own, but the grown rim
    manifest = json.loads((parts / "_info.json").read_text())
    assert manifest["errors"]["by_reason"] == {"inpaint-fallback": 1, "no-background": 1}
    assert manifest["backends"]["inpainter"]["params"]["band_fill"]["min_source"] == 0.01


def test_only_the_photo_with_nothing_known_has_no_background_of_its_own(parts):
    statuses = {part.key: part.meta.get("background_status") for part in iter_parts(parts)}
    assert {key for key, status in statuses.items() if status is not None} == {COVERED}
    assert statuses[COVERED] == "none"
    (row,) = [row for row in error_rows(parts) if row["reason"] == "no-background"]
    assert (row["image_id"], row["action"]) == (COVERED, "reported")
