"""PNG bytes for the decode tests: images of every colour type, and chunk-level surgery."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

from builder.formats.png import PNG_SIGNATURE


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


def broken_chunk_type_inside_the_image_data(data: bytes) -> bytes:
    """The image stream's second half in a chunk whose type is not four letters: Pillow, needing
    those bytes, raises SyntaxError (past the image data it would ignore the chunk)."""
    chunks = chunks_of(data)
    stream = b"".join(body for kind, body in chunks if kind == b"IDAT")
    half = len(stream) // 2
    rest = [chunk for chunk in chunks[1:] if chunk[0] != b"IDAT"]
    return assemble([chunks[0], (b"IDAT", stream[:half]), (b"ID\x00T", stream[half:]), *rest])


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
