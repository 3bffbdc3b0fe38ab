"""Hostile PNG members for the ISA-L decode path (`builder.formats.png`): nothing it cannot vouch
for takes the fast path, and what Pillow refuses is refused the same way, through compose too."""

from __future__ import annotations

import io
import struct
import tarfile
import zlib

import numpy as np
import pytest
from parts_factory import compose_args, fake_images, rehash_parts, write_parts
from PIL import Image
from png_factory import IMAGES, assemble, broken_chunk_type_inside_the_image_data, chunks_of, pil_pixels, png_bytes

from builder.formats.png import open_png, stored_copy
from hsi.cli import main


@pytest.mark.parametrize(
    "damage",
    ["truncated stream", "extra rows", "bad checksum", "cut file", "no IEND", "not a png"],
)
def test_damaged_pngs_fail_or_decode_as_pillow_does(damage):
    data = png_bytes(IMAGES["rgb odd width"], compress_level=6)
    chunks = chunks_of(data)
    index = [kind for kind, _ in chunks].index(b"IDAT")
    rows = zlib.decompress(chunks[index][1])
    if damage == "truncated stream":
        damaged = assemble(chunks[:index] + [(b"IDAT", chunks[index][1][:-40])] + chunks[index + 1 :])
    elif damage == "extra rows":
        damaged = assemble(chunks[:index] + [(b"IDAT", zlib.compress(rows + rows[:200]))] + chunks[index + 1 :])
    elif damage == "bad checksum":
        stream = chunks[index][1][:-4] + bytes(4)
        damaged = assemble(chunks[:index] + [(b"IDAT", stream)] + chunks[index + 1 :])
    elif damage == "cut file":
        damaged = data[: len(data) // 2]
    elif damage == "no IEND":
        damaged = assemble(chunks[:-1])
    else:
        damaged = b"GIF89a" + data[6:]
    assert stored_copy(damaged) is None  # nothing it cannot vouch for takes the fast path
    try:
        expected = pil_pixels(damaged)
    except Exception as exc:  # noqa: BLE001 - whatever Pillow raises, open_png must raise too
        with pytest.raises(type(exc)):
            open_png(damaged)
    else:
        assert np.array_equal(np.asarray(open_png(damaged)), expected)


def test_a_decompression_bomb_is_refused_before_any_inflate(monkeypatch):
    huge = assemble(
        [
            (b"IHDR", struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)),
            (b"IDAT", zlib.compress(b"\x00" * 1000)),
            (b"IEND", b""),
        ]
    )
    monkeypatch.setattr("builder.formats.png.stored_copy", lambda data: pytest.fail("inflated a bomb"))
    with pytest.raises(Image.DecompressionBombError):
        open_png(huge)


def _cut_image_stream(data: bytes) -> bytes:
    return assemble([(kind, body[:-30] if kind == b"IDAT" else body) for kind, body in chunks_of(data)])


# a broken chunk type: Pillow raises SyntaxError, which compose did not catch (a traceback) before
# decode_png_checked turned it into a ValueError
@pytest.mark.parametrize("damage", [_cut_image_stream, broken_chunk_type_inside_the_image_data])
def test_a_crop_with_a_damaged_image_stream_becomes_a_row_not_composites(tmp_path, damage):
    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(["n01443537", "n02437312"], per_class=1)}, shard_size=2)
    shard = parts / "val-00000.tar"
    with tarfile.open(shard) as tar:
        members = [(info, tar.extractfile(info).read()) for info in tar]
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        for info, data in members:
            if info.name == "ILSVRC2012_val_00000002.crop.png":
                data = damage(data)
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    rehash_parts(parts)
    out = tmp_path / "out"
    assert main(compose_args(parts, out, "--no-progress")) == 0
    rows = (out / "hard-spurious-imagenet" / "errors.jsonl").read_text().splitlines()
    assert len(rows) == 1 and '"ILSVRC2012_val_00000002"' in rows[0] and '"unreadable-parts"' in rows[0]
    names = []
    for path in sorted((out / "hard-spurious-imagenet").glob("*.tar")):
        with tarfile.open(path) as tar:
            names += tar.getnames()
    assert names and all(name.startswith("ILSVRC2012_val_00000001") for name in names)
