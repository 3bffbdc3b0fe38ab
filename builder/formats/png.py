"""PNG decoding with a faster inflate, pixel for pixel what Pillow decodes.

Most of a PNG decode is zlib's inflate of the IDAT stream: 0.87 ms of the 1.1 ms a 250 x 200 object
crop takes. ISA-L (`isal`) inflates the same stream in 0.4 ms. Pillow cannot be handed another
inflater, so `open_png` inflates the IDAT stream itself and gives Pillow the same filtered rows in
stored (uncompressed) deflate blocks: Pillow still parses every chunk, undoes the row filters and
applies its own checks, and the pixels are the ones it would decode from the original bytes.

Whatever the fast path cannot vouch for (an interlaced image, a stream that does not end where the
header says it must, malformed chunks) is decoded from the original bytes, so damaged or hostile
members fail exactly as they did before; so are images of over 32 MiB of rows, to keep memory low.
One exception: ISA-L does not check a deflate block's Huffman code sets, so a crafted stream whose
code set zlib refuses as invalid (and whose checksum matches) decodes here where Pillow refuses it
(tests/adversarial/test_adv_png_fuzz.py); telling them apart would need the second inflate this
module exists to avoid.
"""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image

try:
    from isal import isal_zlib

    FAST_INFLATE = True
except ImportError:  # no ISA-L (the lent GPU image has none): Pillow inflates with zlib, the same pixels
    FAST_INFLATE = False

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # IHDR colour type -> samples per pixel
_STORED_BLOCK = 0xFFFF  # the most bytes one stored deflate block holds
_ZLIB_HEADER = b"\x78\x01"  # deflate, 32 KiB window, no dictionary; (0x78 * 256 + 0x01) % 31 == 0
# The fast path holds the rows twice more than Pillow's streaming decode; past this (a 10-megapixel
# RGB background) the memory matters more than the milliseconds.
FAST_PATH_MAX_ROW_BYTES = 32 << 20


def open_png(data: bytes) -> Image.Image:
    """The PNG in `data`, opened and loaded by Pillow (its decompression-bomb check included)."""
    image = Image.open(io.BytesIO(data))  # parses the header and refuses bombs before any inflate
    restored = stored_copy(data)
    if restored is not None:
        image = Image.open(io.BytesIO(restored))
    image.load()
    return image


def stored_copy(data: bytes) -> bytes | None:
    """`data` with its IDAT stream inflated by ISA-L and stored uncompressed, or None when the
    fast path does not apply and the original bytes must be decoded."""
    if not FAST_INFLATE:
        return None
    chunks = _chunks(data)
    if chunks is None or not chunks or chunks[0][0] != b"IHDR" or len(chunks[0][1]) != 13:
        return None
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if interlace or colour not in _CHANNELS or depth not in (1, 2, 4, 8, 16):
        return None
    expected = height * (1 + (width * _CHANNELS[colour] * depth + 7) // 8)
    if expected > FAST_PATH_MAX_ROW_BYTES:
        return None
    idat = [i for i, (kind, _) in enumerate(chunks) if kind == b"IDAT"]
    if not idat or idat != list(range(idat[0], idat[-1] + 1)):
        return None  # no image data, or IDAT chunks not consecutive: Pillow's own path decides
    stream = b"".join(chunks[i][1] for i in idat)
    if stream and stream[0] >> 4 > 7:
        return None  # a window over 32 KiB (RFC 1950 forbids it): zlib refuses it, ISA-L would not
    inflater = isal_zlib.decompressobj()
    try:
        # One byte over what the header allows: a stream that holds more is left to Pillow.
        rows = inflater.decompress(stream, expected + 1)
    except isal_zlib.error:  # type: ignore[misc]  # isal's stubs type `error` as a plain name
        return None  # not a stream ISA-L can read: Pillow's own decode reports it
    if len(rows) != expected or not inflater.eof or inflater.unused_data:
        return None
    before = b"".join(_chunk(kind, body) for kind, body in chunks[: idat[0]])
    after = b"".join(_chunk(kind, body) for kind, body in chunks[idat[-1] + 1 :])
    return PNG_SIGNATURE + before + _chunk(b"IDAT", _stored_zlib(rows)) + after


def _chunks(data: bytes) -> list[tuple[bytes, bytes]] | None:
    """(type, body) of every chunk up to IEND, or None if the bytes do not hold whole chunks."""
    if not data.startswith(PNG_SIGNATURE):
        return None
    chunks, offset = [], len(PNG_SIGNATURE)
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, offset)
        kind, end = data[offset + 4 : offset + 8], offset + 12 + length
        if end > len(data):
            return None
        chunks.append((kind, data[offset + 8 : offset + 8 + length]))
        offset = end
        if kind == b"IEND":
            return chunks
    return None


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(body, zlib.crc32(kind)))


def _stored_zlib(payload: bytes) -> bytes:
    """A zlib stream holding `payload` in stored deflate blocks (RFC 1950/1951), checksum included."""
    view = memoryview(payload)
    blocks = [_ZLIB_HEADER]
    starts = range(0, len(payload), _STORED_BLOCK) if payload else [0]
    for start in starts:
        block = view[start : start + _STORED_BLOCK]
        final = start + _STORED_BLOCK >= len(payload)
        blocks.append(struct.pack("<BHH", final, len(block), len(block) ^ 0xFFFF))
        blocks.append(block.tobytes())
    blocks.append(struct.pack(">I", zlib.adler32(payload)))
    return b"".join(blocks)
