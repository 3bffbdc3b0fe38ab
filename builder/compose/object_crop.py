"""The object's pixels as a spec cuts them out of the parts: what compose pastes and what validation
compares the pasted box with, read by this one function so the two can never disagree.

By default that is the inclusive VOC box parts store (or take out of a crop stored with a margin).
With the paper's settings (`crop: exclusive`, `box_rounding: float32-normalised`, see
`geometry.crop_window`) it is the paper's window of the stored crop, which may need a pixel left of
or above the box: parts extracted without `--crop-margin 1` do not hold it, and the image is
`paper-crop-clipped` (`PaperCropClipped`) rather than cut another way.
"""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from builder.compose.geometry import crop_window
from builder.formats.parts import check_crop_size, stored_crop_box
from builder.formats.parts_index import MemberReader, PartsRef, read_object_image

PAPER_CROP_CLIPPED = "paper-crop-clipped"


class PaperCropClipped(ValueError):
    """The spec's crop of an object needs pixels its stored crop does not hold."""


def crops_by_window(crop: str, box_rounding: str) -> bool:
    """Whether the spec cuts its own window out of the stored crop (not the inclusive box)."""
    return crop != "inclusive" or box_rounding != "none"


def read_spec_object(
    reader: MemberReader, ref: PartsRef, crop: str, box_rounding: str, with_mask: bool
) -> tuple[Image.Image, np.ndarray | None]:
    """The object's crop (decoded RGB) and, if asked, its mask, cut as the spec's `crop` and
    `box_rounding` say; `PaperCropClipped` when the stored crop lacks pixels the cut needs,
    ValueError/OSError/KeyError when the parts do not read or do not fit together."""
    if not crops_by_window(crop, box_rounding):
        return read_object_image(reader, ref, with_mask)
    image, mask = read_object_image(reader, ref, with_mask, whole=True)
    meta = json.loads(reader.read(ref, "json"))
    bx0, by0, bx1, by1 = (int(v) for v in meta["object_box"])
    box = (bx0, by0, bx1, by1)
    stored = stored_crop_box(meta)
    check_crop_size(meta, image.width, image.height)
    window = crop_window(box, int(meta["width"]), int(meta["height"]), crop, box_rounding, stored)
    if window is None:
        raise PaperCropClipped(
            f"the paper's box for {list(box)} starts left of or above the stored crop "
            f"{list(stored)}; extract with --crop-margin 1 to store the pixels it needs"
        )
    x0, y0, x1, y1 = window
    return image.crop(window), (mask[y0:y1, x0:x1] if mask is not None else None)
