"""`open_png` decodes what Pillow decodes, pixel for pixel, and leaves to Pillow what it cannot vouch for."""

from __future__ import annotations

import numpy as np
import pytest
from png_factory import IMAGES, RNG, assemble, chunks_of, pil_pixels, png_bytes

from builder.formats.parts import decode_png, encode_png
from builder.formats.png import open_png, stored_copy


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


def test_images_past_the_size_limit_take_pillows_streaming_decode(monkeypatch):
    data = png_bytes(IMAGES["rgb over one stored block"])
    monkeypatch.setattr("builder.formats.png.FAST_PATH_MAX_ROW_BYTES", 200 * (1 + 250 * 3) - 1)
    assert stored_copy(data) is None
    assert np.array_equal(np.asarray(open_png(data)), pil_pixels(data))
    monkeypatch.setattr("builder.formats.png.FAST_PATH_MAX_ROW_BYTES", 200 * (1 + 250 * 3))
    assert stored_copy(data) is not None
