"""Decoding ImageNet files into RGB arrays, with every known kind of bad file handled as data.

ImageNet's train set holds a few files that are not what their name says: CMYK JPEGs, one PNG
named `.JPEG`, and many grayscale JPEGs (tensorflow-datasets keeps the same explicit lists). They are
converted and the conversion is recorded; unreadable, truncated and oversized files raise
`ImageDecodeError` with a reason, and the caller records it and moves on.

EXIF orientation is deliberately not applied: ImageNet's boxes refer to the stored pixel grid.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

# Larger than any real ImageNet image (the largest train image has about 1e8 pixels), small enough
# to refuse decompression bombs before decoding.
DEFAULT_MAX_PIXELS = 120_000_000

# Known oddities of ILSVRC2012 train (image ids, as listed by tensorflow-datasets' ImageNet builder).
KNOWN_CMYK_IDS = frozenset(
    {
        "n01739381_1309",
        "n02077923_14822",
        "n02447366_23489",
        "n02492035_15739",
        "n02747177_10752",
        "n03018349_4028",
        "n03062245_4620",
        "n03347037_9675",
        "n03467068_12171",
        "n03529860_11437",
        "n03544143_17228",
        "n03633091_5218",
        "n03710637_5125",
        "n03961711_5286",
        "n04033995_2932",
        "n04258138_17003",
        "n04264628_27969",
        "n04336792_7448",
        "n04371774_5854",
        "n04596742_4225",
        "n07583066_647",
        "n13037406_4650",
    }
)
KNOWN_PNG_IDS = frozenset({"n02105855_2933"})

# Modes whose samples are wider than 8 bits; Pillow's own convert("RGB") clips them at 255 (an
# almost all-white image), so they are scaled to 8 bits by their range first (`_to_8_bits`).
_WIDE_GRAY_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")

_MODE_REASONS = {
    "CMYK": "cmyk-converted",
    "L": "grayscale-converted",
    "LA": "grayscale-converted",
    "1": "grayscale-converted",
    "P": "palette-converted",
    "RGBA": "alpha-dropped",
    **dict.fromkeys(_WIDE_GRAY_MODES, "grayscale-converted"),
}


class ImageDecodeError(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass
class DecodedImage:
    rgb: np.ndarray  # H x W x 3 uint8
    notes: list[tuple[str, str]] = field(default_factory=list)  # (reason, detail) of repairs made


def _known_note(image_id: str) -> str:
    if image_id in KNOWN_CMYK_IDS:
        return " (a known CMYK file of ILSVRC2012 train)"
    if image_id in KNOWN_PNG_IDS:
        return " (the known PNG file of ILSVRC2012 train)"
    return ""


def _to_8_bits(image: Image.Image) -> tuple[Image.Image, str]:
    """A 16-bit (or 32-bit) grayscale image as 8-bit L: 16-bit samples map 0..65535 to 0..255
    (rounded), so brightness is kept; other ranges (32-bit, float) are stretched from their min to max."""
    values = np.asarray(image)
    if image.mode.startswith("I;16") or (
        values.size and values.min() >= 0 and values.max() <= 65535 and image.mode == "I"
    ):
        scaled, how = (values.astype(np.uint32) * 255 + 32767) // 65535, "scaled from 16 to 8 bits"
    else:
        low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
        span = high - low or 1.0
        scaled = np.rint((values.astype(np.float64) - low) * (255.0 / span))
        how = f"stretched from its range {low:g}..{high:g} to 8 bits"
    return Image.fromarray(np.clip(scaled, 0, 255).astype(np.uint8), "L"), how


def decode_image(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS) -> DecodedImage:
    notes: list[tuple[str, str]] = []
    known = _known_note(path.stem)
    # Pillow refuses images above its own limit (89,478,485 pixels by default) before our check could
    # admit them: --max-pixels is the one limit. Set here, so every worker process and thread has it.
    Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                width, height = image.size
                if width * height > max_pixels:
                    raise ImageDecodeError(
                        "too-many-pixels",
                        f"{width}x{height} = {width * height} pixels exceeds --max-pixels {max_pixels}",
                    )
                expected = "JPEG" if path.suffix.lower() in (".jpeg", ".jpg") else None
                if expected and image.format != expected:
                    notes.append(("format-mismatch", f"{image.format} data in a {path.suffix} file{known}"))
                image.load()
                mode = image.mode
                if mode != "RGB":
                    how = ""
                    if mode in ("P", "PA") and "transparency" in image.info:
                        image = image.convert("RGBA")
                    elif mode in _WIDE_GRAY_MODES:
                        image, how = _to_8_bits(image)
                        how = f", {how}"
                    rgb_image = image.convert("RGB")
                    notes.append(
                        (_MODE_REASONS.get(mode, "palette-converted"), f"{mode} image converted to RGB{how}{known}")
                    )
                else:
                    rgb_image = image
                rgb = np.asarray(rgb_image, dtype=np.uint8).copy()
    except ImageDecodeError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageDecodeError("too-many-pixels", f"{exc} (the limit is --max-pixels {max_pixels})") from None
    except UnidentifiedImageError:
        raise ImageDecodeError("unreadable-image", "not an image file Pillow can identify") from None
    except OSError as exc:
        text = str(exc)
        reason = (
            "truncated-image"
            if "truncated" in text.lower() or "broken data stream" in text.lower()
            else "unreadable-image"
        )
        raise ImageDecodeError(reason, text) from None
    except (ValueError, SyntaxError) as exc:
        raise ImageDecodeError("unreadable-image", str(exc)) from None
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise ImageDecodeError("unreadable-image", f"decoded to an unusable array of shape {rgb.shape}")
    return DecodedImage(rgb, notes)
