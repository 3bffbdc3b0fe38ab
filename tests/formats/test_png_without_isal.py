"""builder/formats/png.py imports and decodes without ISA-L (the lent GPU image has no isal): Pillow
then inflates the original bytes with zlib, and the pixels are those of the ISA-L path."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]

WITHOUT_ISAL = """
import sys
sys.modules["isal"] = None  # `import isal` now fails, as where it is not installed
import numpy as np
from builder.formats import png
assert not png.FAST_INFLATE
data = sys.stdin.buffer.read()
assert png.stored_copy(data) is None
sys.stdout.buffer.write(np.asarray(png.open_png(data)).tobytes())
"""


def test_without_isal_png_decodes_to_the_same_pixels():
    from builder.formats import png

    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    data = buffer.getvalue()
    assert png.FAST_INFLATE and png.stored_copy(data) is not None  # here ISA-L's path runs
    fast = np.asarray(png.open_png(data))
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_ISAL], input=data, capture_output=True, cwd=ROOT, check=True, timeout=120
    )
    assert done.stdout == fast.tobytes() == pixels.tobytes()
