"""`open_png` decodes what Pillow decodes, pixel for pixel, and leaves to Pillow what it cannot vouch for."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from builder.formats.parts import decode_png, encode_png
from builder.formats.png import PNG_SIGNATURE, open_png, stored_copy


def pil_pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return np.asarray(image)


def png_bytes(image: Image.Image, **save) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", **save)
    return buffer.getvalue()


def chunks_of(data: bytes) -> list[tuple[bytes, bytes]]:
    chunks, offset = [], len(PNG_SIGNATURE)
    while offset < len(data):
        (length,) = struct.unpack_from(">I", data, offset)
        chunks.append((data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]))
        offset += 12 + length
    return chunks


def assemble(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return PNG_SIGNATURE + b"".join(
        struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body)) for kind, body in chunks
    )


RNG = np.random.default_rng(7)
IMAGES = {
    "rgb odd width": Image.fromarray(RNG.integers(0, 256, (37, 61, 3), dtype=np.uint8)),
    "rgb over one stored block": Image.fromarray(RNG.integers(0, 256, (200, 250, 3), dtype=np.uint8)),
    "grey": Image.fromarray(RNG.integers(0, 256, (33, 45), dtype=np.uint8)),
    "rgba": Image.fromarray(RNG.integers(0, 256, (20, 30, 4), dtype=np.uint8)),
    "1-bit": Image.fromarray(RNG.integers(0, 2, (19, 21), dtype=np.uint8) * 255).convert("1"),
    "16-bit grey": Image.fromarray(RNG.integers(0, 65536, (17, 23), dtype=np.uint16)),
    "palette": Image.fromarray(RNG.integers(0, 256, (40, 50, 3), dtype=np.uint8)).convert("P"),
}


@pytest.mark.parametrize("name", sorted(IMAGES))
@pytest.mark.parametrize("level", [0, 3, 9])
def test_pixels_equal_pillows_own_decode(name, level):
    data = png_bytes(IMAGES[name], compress_level=level)
    assert stored_copy(data) is not None  # the fast path was taken, not Pillow's
    decoded = open_png(data)
    assert decoded.mode == IMAGES[name].mode
    assert np.array_equal(np.asarray(decoded), pil_pixels(data))


def test_parts_members_decode_through_the_fast_path_unchanged():
    crop = RNG.integers(0, 256, (200, 250, 3), dtype=np.uint8)
    data = encode_png(crop)
    restored = stored_copy(data)
    assert restored is not None
    assert np.array_equal(decode_png(data), crop)


def test_many_idat_chunks_are_joined():
    data = png_bytes(IMAGES["rgb over one stored block"], compress_level=0)
    chunks = chunks_of(data)
    idat = [i for i, (kind, _) in enumerate(chunks) if kind == b"IDAT"]
    stream = b"".join(chunks[i][1] for i in idat)
    pieces = [(b"IDAT", stream[i : i + 1000]) for i in range(0, len(stream), 1000)]
    split = assemble(chunks[: idat[0]] + pieces + chunks[idat[-1] + 1 :])
    assert len([kind for kind, _ in chunks_of(split)]) > 10
    assert stored_copy(split) is not None
    assert np.array_equal(np.asarray(open_png(split)), pil_pixels(data))


def test_interlaced_images_are_left_to_pillow():
    image = IMAGES["rgb odd width"]
    data = png_bytes(image)
    chunks = chunks_of(data)
    # Re-encode as Adam7 by hand is not needed: the interlace byte alone sends it down Pillow's path.
    ihdr = bytearray(chunks[0][1])
    ihdr[12] = 1
    interlaced = assemble([(b"IHDR", bytes(ihdr)), *chunks[1:]])
    assert stored_copy(interlaced) is None


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
