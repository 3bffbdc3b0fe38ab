"""Seeded mutation fuzz of `open_png` against Pillow's own decode: for every mutated PNG either both
raise the same exception type or both decode to the same mode, size and pixels; and crafted zlib
streams that zlib refuses but ISA-L inflates."""

from __future__ import annotations

import io
import random
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from PIL import Image
from png_factory import IMAGES, assemble, broken_chunk_type_inside_the_image_data, chunks_of, png_bytes

from builder.formats.parts import decode_png
from builder.formats.png import open_png, stored_copy

SEEDS = [("rgb odd width", 6), ("grey", 9), ("rgba", 1), ("1-bit", 6), ("16-bit grey", 6), ("palette", 6)]


def _outcome(decode, data: bytes) -> tuple:
    try:
        image = decode(data)
    except Exception as exc:  # noqa: BLE001 - the exception type is what is compared
        return ("raised", type(exc))
    return ("decoded", image.mode, image.size, np.asarray(image).tobytes())


def _pillow(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _chunk_offsets(data: bytes) -> list[int]:
    offsets, offset = [], 8
    while offset + 8 <= len(data):
        offsets.append(offset)
        offset += 12 + struct.unpack_from(">I", data, offset)[0]
    return offsets


def _flip(rng: random.Random, body: bytes, start: int = 0, stop: int | None = None) -> bytes:
    damaged = bytearray(body)
    damaged[rng.randrange(start, len(body) if stop is None else stop)] ^= 1 << rng.randrange(8)
    return bytes(damaged)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    chunks = chunks_of(data)
    idat = [i for i, (kind, _) in enumerate(chunks) if kind == b"IDAT"]
    stream = b"".join(chunks[i][1] for i in idat)
    attack = rng.randrange(11)
    if attack == 0:  # a flipped bit inside the image stream
        chunks[idat[0]] = (b"IDAT", _flip(rng, chunks[idat[0]][1]))
    elif attack == 1:  # ... in its two zlib header bytes
        chunks[idat[0]] = (b"IDAT", _flip(rng, chunks[idat[0]][1], 0, 2))
    elif attack == 2:  # ... in the header (CRC recomputed, so Pillow reads the damaged values)
        chunks[0] = (b"IHDR", _flip(rng, chunks[0][1]))
    elif attack == 3:  # a second header, with other values
        chunks.insert(1, (b"IHDR", _flip(rng, chunks[0][1], 0, 8)))
    elif attack == 4:  # a chunk given twice
        index = rng.randrange(len(chunks))
        chunks.insert(index, chunks[index])
    elif attack == 5:  # image data after IEND
        chunks.append(chunks[idat[0]])
    elif attack == 6:  # an empty IDAT among the others
        chunks.insert(rng.choice(idat + [idat[-1] + 1]), (b"IDAT", b""))
    elif attack == 7:  # the stream split over many small chunks
        size = rng.randrange(1, 40)
        pieces = [(b"IDAT", stream[i : i + size]) for i in range(0, len(stream), size)]
        chunks = chunks[: idat[0]] + pieces + chunks[idat[-1] + 1 :]
    else:  # raw damage: a cut file, a flipped length, a flipped CRC, a flipped byte anywhere
        if attack == 8:
            return data[: rng.randrange(len(data))]
        offset = rng.choice(_chunk_offsets(data))
        if attack == 9:
            return _flip(rng, data, offset, offset + 4)
        crc = offset + 8 + struct.unpack_from(">I", data, offset)[0]
        return _flip(rng, data, crc, crc + 4) if rng.random() < 0.5 else _flip(rng, data, 8)
    return assemble(chunks)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_mutated_pngs_fail_or_decode_as_pillow_does(monkeypatch):
    # Enlarged headers become bombs both sides refuse at once, instead of gigabyte allocations.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20_000)
    rng = random.Random(9)
    originals = [png_bytes(IMAGES[name], compress_level=level) for name, level in SEEDS]
    differing, fast = [], 0
    for _ in range(1000):
        data = _mutate(rng, rng.choice(originals))
        fast += stored_copy(data) is not None
        expected, got = _outcome(_pillow, data), _outcome(open_png, data)
        if expected != got:
            differing.append((data.hex()[:80], expected[:2], got[:2]))
    assert not differing, differing[:3]
    assert fast > 50  # the mutations reach the fast path, not only Pillow's


def _with_stream(data: bytes, stream: bytes) -> bytes:
    chunks = chunks_of(data)
    return assemble([chunks[0], (b"IDAT", stream), *[c for c in chunks[1:] if c[0] != b"IDAT"]])


def _rows(data: bytes) -> bytes:
    return zlib.decompress(b"".join(body for kind, body in chunks_of(data) if kind == b"IDAT"))


def test_a_zlib_window_over_32_kib_is_refused_as_pillow_refuses_it():
    data = png_bytes(IMAGES["rgb odd width"])
    stream = b"".join(body for kind, body in chunks_of(data) if kind == b"IDAT")
    cmf = 0x88  # CINFO 8: a 64 KiB window, which RFC 1950 forbids; zlib refuses it, ISA-L inflates it
    damaged = _with_stream(data, bytes([cmf, 31 - (cmf << 8) % 31]) + stream[2:])
    with pytest.raises(OSError, match="broken data stream"):
        _pillow(damaged)
    assert stored_copy(damaged) is None
    with pytest.raises(OSError, match="broken data stream"):
        open_png(damaged)


# A final dynamic deflate block (no output) whose literal/length code set zlib refuses ("invalid
# literal/lengths set"); ISA-L does not check the code set and inflates it. Found by fuzzing.
_LAX_CODE_SET_BLOCK = bytes.fromhex("45960b7225310803f9dcffceb1b29997ad4a323b63639484f0eccc")


def test_zlib_refuses_the_code_set_isal_accepts():
    with pytest.raises(zlib.error, match="invalid literal/lengths set"):
        zlib.decompressobj(-15).decompress(_LAX_CODE_SET_BLOCK)


def test_a_code_set_zlib_refuses_decodes_through_the_fast_path_as_documented():
    """The one documented divergence (builder/formats/png.py): ISA-L inflates deflate blocks whose
    Huffman code sets zlib refuses, and telling them apart would need the second inflate the fast
    path exists to avoid. Pillow refuses this PNG; open_png gives the rows it holds. A change that
    closes the gap must change this test."""
    data = png_bytes(IMAGES["rgb odd width"])
    rows = _rows(data)
    compressor = zlib.compressobj(6)
    # The rows in valid blocks ended on a byte boundary, then the lax final block, then the checksum.
    stream = compressor.compress(rows) + compressor.flush(zlib.Z_SYNC_FLUSH)
    damaged = _with_stream(data, stream + _LAX_CODE_SET_BLOCK + struct.pack(">I", zlib.adler32(rows)))
    with pytest.raises(OSError, match="broken data stream"):
        _pillow(damaged)
    assert stored_copy(damaged) is not None
    assert np.array_equal(np.asarray(open_png(damaged)), np.asarray(_pillow(data)))


def test_a_large_claimed_size_with_a_tiny_stream_allocates_no_rows():
    width, height = 3000, 3000  # 27 MB of rows: under the fast path's limit and Pillow's bomb limit
    huge = assemble(
        [
            (b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)),
            (b"IDAT", zlib.compress(bytes(1 + 3 * width) * 3)),
            (b"IEND", b""),
        ]
    )
    tracemalloc.start()
    try:
        assert stored_copy(huge) is None  # three rows where the header claims 3000
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # the inflate stopped at what the stream holds; no buffer of the claimed rows


def test_a_broken_chunk_type_inside_the_image_data_is_a_value_error():
    damaged = broken_chunk_type_inside_the_image_data(png_bytes(IMAGES["rgb odd width"]))
    with pytest.raises(SyntaxError):  # Pillow's own error for it, which compose does not catch
        _pillow(damaged)
    with pytest.raises(ValueError, match="broken PNG file"):
        decode_png(damaged)
