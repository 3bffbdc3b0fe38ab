"""Hostile parts for compose (issue 11, points 6 and 15): each test builds the hostile input itself
and failed before its fix (a traceback, a silent drop, or composites from corrupted bytes)."""

from __future__ import annotations

import io
import json
import struct
import tarfile
import zlib
from pathlib import Path

import pytest
from parts_factory import compose_args, fake_images, rehash_parts, write_parts
from PIL import Image

from builder.compose.parts_input import check_parts_shard_name
from builder.core.errors import InputError
from hsi.cli import main

WNIDS = ["n01443537", "n02437312"]


def make_parts(tmp_path: Path) -> Path:
    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(WNIDS, per_class=2)}, shard_size=3)  # shards [A, A, B], [B]
    return parts


def compose(parts: Path, out: Path) -> int:
    return main(compose_args(parts, out, "--no-progress"))


def edit_manifest(parts: Path, change) -> None:
    path = parts / "_info.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def rewrite_shard(path: Path, edit) -> None:
    """Rewrite a tar: `edit(name, data)` returns a list of (TarInfo, data or None) to write instead."""
    with tarfile.open(path) as tar:
        members = [(info, tar.extractfile(info).read()) for info in tar]
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            for new_info, new_data in edit(info, data):
                tar.addfile(new_info, io.BytesIO(new_data) if new_data is not None else None)


def error_rows(out: Path) -> list[dict]:
    text = (out / "hard-spurious-imagenet" / "errors.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


def compose_rehashed(parts: Path, out: Path) -> list[dict]:
    """Compose hand-edited parts whose manifest digests were renewed (so only the bytes can tell),
    assert the run succeeds, and return its error rows."""
    rehash_parts(parts)
    assert compose(parts, out) == 0
    return error_rows(out)


def test_a_corrupted_parts_shard_is_refused_before_anything_is_written(tmp_path, capsys):
    parts = make_parts(tmp_path)
    shard = parts / "val-00000.tar"
    with tarfile.open(shard) as tar:
        info = next(i for i in tar if i.name.endswith(".canvas.npy"))
    data = bytearray(shard.read_bytes())
    for offset in range(info.offset_data + 200, info.offset_data + 232):
        data[offset] ^= 0x55  # bit flips in the pixels: the tar still reads, the array still loads
    shard.write_bytes(bytes(data))
    assert compose(parts, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "val-00000.tar" in err and "does not match the parts manifest" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "hard-spurious-imagenet").exists()


@pytest.mark.parametrize(
    "name, listed_twice",
    [
        ("/etc/passwd", False),
        ("../elsewhere/val-00000.tar", False),
        ("val-00000.tar.bak", False),
        ("train-00000.tar", False),
        ("val-00000.tar", True),
    ],
)
def test_shard_names_in_the_parts_manifest_are_checked(tmp_path, capsys, name, listed_twice):
    parts = make_parts(tmp_path)

    def change(data):
        shards = data["splits"]["val"]["shards"]
        if listed_twice:
            shards.append(dict(shards[0]))
        else:
            shards[0]["filename"] = name
        data["splits"]["val"]["filenames"] = [s["filename"] for s in shards]
        data["splits"]["val"]["shard_lengths"] = [s["num_samples"] for s in shards]
        data["splits"]["val"]["num_samples"] = sum(s["num_samples"] for s in shards)

    edit_manifest(parts, change)
    assert compose(parts, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert name in err and ("twice" in err if listed_twice else "must be named val-NNNNN.tar" in err)
    assert not (tmp_path / "out").exists()


def test_check_parts_shard_name_accepts_only_split_shards():
    check_parts_shard_name("val-00012.tar", "val")
    for bad in ("val-0001.tar", "val-00001.tar/x", "sub/val-00001.tar", "val-00001.TAR", "", "..", 7):
        with pytest.raises(InputError):
            check_parts_shard_name(bad, "val")


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda d: d.__setitem__("splits", [d["splits"]["val"]]), "splits"),
        (lambda d: d["splits"]["val"].__setitem__("shards", "val-00000.tar"), "splits.val.shards"),
        (lambda d: d["splits"]["val"]["shards"][0].__setitem__("num_samples", "2"), "num_samples"),
        (lambda d: d.__setitem__("errors", 0), "errors"),
    ],
)
def test_parts_manifests_of_the_wrong_types_are_clear_errors(tmp_path, capsys, change, field):
    parts = make_parts(tmp_path)
    edit_manifest(parts, change)
    assert compose(parts, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def test_a_truncated_parts_shard_becomes_a_row(tmp_path):
    parts = make_parts(tmp_path)
    shard = parts / "val-00001.tar"
    shard.write_bytes(shard.read_bytes()[:3000])
    out = tmp_path / "out"
    rows = compose_rehashed(parts, out)
    assert [(r["reason"], r["shard"]) for r in rows] == [("unreadable-parts", "val-00001.tar")]
    manifest = json.loads((out / "hard-spurious-imagenet" / "_info.json").read_text())
    assert manifest["splits"]["val"]["num_samples"] == 3 * 12  # the three images of the intact shard


def hostile_member(kind: str):
    def edit(info: tarfile.TarInfo, data: bytes):
        if not info.name.endswith(".crop.png") or not info.name.startswith("ILSVRC2012_val_00000001"):
            return [(info, data)]
        if kind == "symlink":
            link = tarfile.TarInfo(info.name)
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            return [(link, None)]
        renamed = tarfile.TarInfo({"absolute": "/tmp/" + info.name, "dotdot": "../" + info.name}[kind])
        renamed.size = len(data)
        return [(renamed, data)]

    return edit


@pytest.mark.parametrize("kind", ["symlink", "absolute", "dotdot"])
def test_unsafe_parts_members_become_rows(tmp_path, kind):
    parts = make_parts(tmp_path)
    rewrite_shard(parts / "val-00000.tar", hostile_member(kind))
    rows = compose_rehashed(parts, tmp_path / "out")
    assert [(r["image_id"], r["reason"]) for r in rows] == [("ILSVRC2012_val_00000001", "unreadable-parts")]
    assert "crop.png" in rows[0]["detail"]
    assert not (tmp_path / "etc").exists() and not Path("/tmp/ILSVRC2012_val_00000001.crop.png").exists()


def test_a_member_named_dotdot_json_is_reported_not_dropped(tmp_path):
    parts = make_parts(tmp_path)

    def edit(info, data):
        if not info.name.startswith("ILSVRC2012_val_00000002"):
            return [(info, data)]
        renamed = tarfile.TarInfo("../" + info.name)
        renamed.size = len(data)
        return [(renamed, data)]

    rewrite_shard(parts / "val-00000.tar", edit)
    assert [r["image_id"] for r in compose_rehashed(parts, tmp_path / "out")] == ["ILSVRC2012_val_00000002"]


def png_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims width x height pixels (a decompression bomb for Pillow)."""
    buffer = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buffer, format="PNG")
    data = bytearray(buffer.getvalue())
    ihdr = 8 + 8  # signature, then the IHDR chunk's length and type
    data[ihdr : ihdr + 8] = struct.pack(">II", width, height)
    data[ihdr + 13 : ihdr + 17] = struct.pack(">I", zlib.crc32(bytes(data[12 : ihdr + 13])))
    return bytes(data)


def test_a_decompression_bomb_crop_becomes_a_row(tmp_path):
    parts = make_parts(tmp_path)

    def edit(info, data):
        if info.name == "ILSVRC2012_val_00000003.crop.png":
            bomb = png_claiming(40000, 40000)
            info.size = len(bomb)
            return [(info, bomb)]
        return [(info, data)]

    rewrite_shard(parts / "val-00000.tar", edit)
    rows = compose_rehashed(parts, tmp_path / "out")
    assert [(r["image_id"], r["reason"]) for r in rows] == [("ILSVRC2012_val_00000003", "unreadable-parts")]
    assert "decompression bomb" in rows[0]["detail"]
