"""`hsi verify` on a release's parts config (issue 41): each part's bytes and json were hashed and
its members counted, but what the json says was never compared with what the part is. A part whose
box lies outside its image, whose class is not its wnid's, or whose mask is not its crop's size now
fails verify, as composites' meaning does, even with every hash rewritten to the changed shard."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image
from release_factory import release_with_parts, rewrite_release_shard

from hsi.cli import main

SHARD = "val-00000.tar"


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return release_with_parts(tmp_path_factory.mktemp("parts-meaning"))["release"]


def edit_first_part(members: list[tuple[str, bytes]], edit) -> list[tuple[str, bytes]]:
    """The shard's members with the first sample's changed by `edit(name, data) -> data`."""
    first = members[0][0].split(".", 1)[0]
    return [
        (name, edit(name.split(".", 1)[1], data) if name.startswith(first + ".") else data) for name, data in members
    ]


def edit_json(change):
    def edit(member: str, data: bytes) -> bytes:
        if member != "json":
            return data
        meta = json.loads(data)
        change(meta)
        return json.dumps(meta, sort_keys=True).encode()

    return edit


def box_outside(meta: dict) -> None:
    meta["boxes"][0]["x1"] = meta["width"] + 40
    if meta["object_box_index"] == 0:
        meta["object_box"][2] = meta["width"] + 40


def other_class(meta: dict) -> None:
    meta["class_index"], meta["class_name"] = 999, "toilet tissue"


def small_mask(member: str, data: bytes) -> bytes:
    if member != "mask.png":
        return data
    buffer = io.BytesIO()
    Image.new("L", (3, 3)).save(buffer, format="PNG")
    return buffer.getvalue()


CASES = {
    "box": (edit_json(box_outside), "boxes[0] ["),
    "class": (edit_json(other_class), "class_index 999 and class_name 'toilet tissue' are not n"),
    "mask": (small_mask, "mask.png is (3, 3), crop.png is ("),
}


def test_intact_parts_verify(release, capsys):
    assert main(["verify", str(release)]) == 0
    assert "parts/val: 2 shards hashed, 4 samples streamed" in capsys.readouterr().out


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_part_that_is_not_what_its_json_says_fails_verify(release, tmp_path, capsys, case):
    """Failed before: each verified intact once its shard's sha256 was rewritten in the record."""
    edit, says = CASES[case]
    folder = Path(shutil.copytree(release, tmp_path / release.name))
    rewrite_release_shard(folder, SHARD, lambda members: edit_first_part(members, edit), config="parts", split="val")
    assert main(["verify", str(folder)]) == 1
    out = capsys.readouterr().out.splitlines()
    problems = [line.removeprefix("FAILED: ") for line in out if line.startswith("FAILED: ")]
    assert len(problems) == 1 and problems[0].startswith("parts/val: 1 parts are not what their json says (first: ")
    assert says in problems[0], problems
