"""Where and how big a pasted object is, and the pixel operations that put it there.

Paper-compatible defaults (canvas C, object size s): `center` puts the object's top-left corner at
(C//2 - w//2, C//2 - h//2); the paper's corner is `top-right`, flush: x = C - w, y = 0. Every other
placement is expressed as a fraction of the free range C - w - 2*margin on each axis, so a margin
moves corner and edge placements inwards by the same number of pixels. `random-corner` draws one of
the four corners from the sample's own RNG.

Square mode stretches the object's box to s x s; AR mode keeps its aspect ratio with the short side s;
when the long side would then pass the canvas (minus margins), the whole object is shrunk so the long
side fits and the ratio is still kept (as the paper's create_dataset_preserve_AR.py does), so the
short side pasted (the sample's `effective_size`) is then smaller than s.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from PIL import Image

from builder.core.errors import UsageError
from builder.core.imaging import RESIZE_FILTERS

MODES = ("square", "ar")
CROPS = ("inclusive", "exclusive")
BOX_ROUNDINGS = ("none", "float32-normalised")
CORNER_DRAWS = ("per-size", "per-composite")
# AR mode's computed side: rounded half up (ours) or truncated by int() (the paper's)
SIZE_ROUNDINGS = ("half-up", "truncate")
PASTE_MODES = ("box", "mask")
# name -> (fraction of the free range on x, on y); `center` is handled by the paper's formula.
ANCHORS: dict[str, tuple[float, float]] = {
    "top-left": (0.0, 0.0),
    "top": (0.5, 0.0),
    "top-right": (1.0, 0.0),
    "left": (0.0, 0.5),
    "right": (1.0, 0.5),
    "bottom-left": (0.0, 1.0),
    "bottom": (0.5, 1.0),
    "bottom-right": (1.0, 1.0),
}
CORNERS = ("top-left", "top-right", "bottom-left", "bottom-right")
NAMED_POSITIONS = ("center", *ANCHORS, "random-corner")
_XY = re.compile(r"^xy:(?P<fx>[0-9]*\.?[0-9]+),(?P<fy>[0-9]*\.?[0-9]+)$")


class GeometryError(UsageError, ValueError):
    """An unknown placement, mode or size that cannot fit the canvas."""


@dataclass(frozen=True)
class Placement:
    """Where one object landed: the resolved position name and its pixel box on the canvas."""

    position: str
    x: int
    y: int
    w: int
    h: int


def round_half_up(value: float) -> int:
    # Python's round() rounds halves to even; pixel maths wants the usual convention.
    return int(math.floor(value + 0.5))


def parse_fraction_position(position: str) -> tuple[float, float] | None:
    match = _XY.match(position)
    if not match:
        return None
    fx, fy = float(match["fx"]), float(match["fy"])
    if not (0.0 <= fx <= 1.0 and 0.0 <= fy <= 1.0):
        raise GeometryError(f"position {position!r}: fractions must lie in [0, 1]")
    return fx, fy


def check_position(position: str) -> str:
    if position in NAMED_POSITIONS or parse_fraction_position(position) is not None:
        return position
    raise GeometryError(
        f"unknown position {position!r}; use one of {', '.join(NAMED_POSITIONS)} or xy:FX,FY "
        "(fractions of the free range, e.g. xy:0.25,0.75)"
    )


def scaled_side(numerator: int, denominator: int, rounding: str) -> int:
    """numerator / denominator as a pixel count: rounded half up, or truncated (`truncate`, the
    paper's int(); floor division is exact where int() of the float quotient could be off by one
    only for quotients within a double's rounding of an integer, which pixel sizes never reach)."""
    if rounding == "truncate":
        return numerator // denominator
    if rounding != "half-up":
        raise GeometryError(f"unknown size rounding {rounding!r}; use one of {', '.join(SIZE_ROUNDINGS)}")
    return round_half_up(numerator / denominator)


def object_size(
    crop_w: int, crop_h: int, size: int, canvas: int, mode: str, margin: int = 0, rounding: str = "half-up"
) -> tuple[int, int]:
    """Width and height of the pasted object for an object box of crop_w x crop_h; in AR mode the
    side computed from the ratio is rounded by `rounding` (see SIZE_ROUNDINGS)."""
    if mode == "square":
        return size, size
    if mode != "ar":
        raise GeometryError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    cap = canvas - 2 * margin
    short_crop, long_crop = min(crop_w, crop_h), max(crop_w, crop_h)
    short, long = size, max(size, scaled_side(long_crop * size, short_crop, rounding))
    if long > cap:  # shrink the whole object, never distort it
        short, long = max(1, min(size, scaled_side(short_crop * cap, long_crop, rounding))), cap
    return (short, long) if crop_w <= crop_h else (long, short)


def place(
    position: str, w: int, h: int, canvas: int, margin: int = 0, rng: np.random.Generator | None = None
) -> Placement:
    """The pixel box of a w x h object at `position` (random-corner draws from `rng`)."""
    if w + 2 * margin > canvas or h + 2 * margin > canvas:
        raise GeometryError(f"a {w}x{h} object with margin {margin} does not fit a {canvas} px canvas")
    if position == "center":
        return Placement("center", canvas // 2 - w // 2, canvas // 2 - h // 2, w, h)
    if position == "random-corner":
        if rng is None:
            raise GeometryError("random-corner needs the sample's RNG")
        position = CORNERS[int(rng.integers(len(CORNERS)))]
    fractions = ANCHORS.get(position) or parse_fraction_position(position)
    if fractions is None:
        check_position(position)  # raises with the list of known positions
    fx, fy = fractions
    free_x, free_y = canvas - w - 2 * margin, canvas - h - 2 * margin
    if position in ("top", "bottom"):  # edge midpoints share the centre's formula on their free axis
        x = canvas // 2 - w // 2
    else:
        x = margin + round_half_up(fx * free_x)
    y = canvas // 2 - h // 2 if position in ("left", "right") else margin + round_half_up(fy * free_y)
    return Placement(position, x, y, w, h)


def resize_mask(mask: np.ndarray, w: int, h: int, resize_filter: str = "bicubic") -> np.ndarray:
    """Resize a boolean mask with the image's filter, then threshold at half, so edges follow the
    resized object rather than a nearest-neighbour staircase."""
    image = Image.fromarray(mask.astype(np.uint8) * 255)
    return np.asarray(image.resize((w, h), RESIZE_FILTERS[resize_filter])) >= 128


def paste(canvas: np.ndarray, obj: np.ndarray, placement: Placement, mask: np.ndarray | None = None) -> None:
    """Paste `obj` (h x w x 3) onto `canvas` in place; with `mask`, only its True pixels."""
    window = canvas[placement.y : placement.y + placement.h, placement.x : placement.x + placement.w]
    if mask is None:
        window[...] = obj
    else:
        window[mask] = obj[mask]


def float32_normalised_box(box: tuple[int, int, int, int], width: int, height: int) -> tuple[int, int, int, int]:
    """The paper's box after its round trip (create_dataset.py): corners normalised by the image
    size and stored, read back as a float32 tensor, multiplied by float32 (w, h, w, h), truncated
    by int(). A corner can move down by one pixel."""
    scale = (width, height, width, height)
    return tuple(int(np.float32(np.float32(v / s) * np.float32(s))) for v, s in zip(box, scale, strict=True))  # type: ignore


def crop_window(
    box: tuple[int, int, int, int],
    width: int,
    height: int,
    crop: str,
    box_rounding: str,
    stored: tuple[int, int, int, int] | None = None,
) -> tuple[int, int, int, int] | None:
    """The window (x0, y0, x1, y1, ends exclusive) of the object's pixels in the stored crop, which
    holds the image region `stored` (inclusive corners; default the box itself, as extract stores
    it without --crop-margin): the inclusive VOC box, or with `exclusive` the paper's [x0:x1]
    crop, of the box first moved as the paper's float32 round trip moves it with
    `float32-normalised`. None when the window needs a pixel the stored crop does not hold (the
    moved top-left corner of a crop stored without a margin)."""
    if crop not in CROPS or box_rounding not in BOX_ROUNDINGS:
        raise GeometryError(f"unknown crop {crop!r} or box rounding {box_rounding!r}")
    sx0, sy0, sx1, sy1 = stored or box
    rx0, ry0, rx1, ry1 = float32_normalised_box(box, width, height) if box_rounding != "none" else box
    end = 0 if crop == "exclusive" else 1
    window = (rx0 - sx0, ry0 - sy0, rx1 - sx0 + end, ry1 - sy0 + end)
    if window[2] <= window[0] or window[3] <= window[1]:
        raise GeometryError(f"the {crop} crop of box {list(box)} is empty")
    if window[0] < 0 or window[1] < 0 or window[2] > sx1 - sx0 + 1 or window[3] > sy1 - sy0 + 1:
        return None
    return window
