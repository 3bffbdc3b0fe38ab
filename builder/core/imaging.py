"""Resizing with the toolkit's named filters, and the canvas-sized background both extract (which
stores it in the parts as `canvas.npy`) and compose (which pastes onto it) must compute alike."""

from __future__ import annotations

import numpy as np
from PIL import Image

RESIZE_FILTERS: dict[str, Image.Resampling] = {
    "bicubic": Image.Resampling.BICUBIC,
    "bilinear": Image.Resampling.BILINEAR,
    "lanczos": Image.Resampling.LANCZOS,
    "nearest": Image.Resampling.NEAREST,
    "box": Image.Resampling.BOX,
}


def resize_rgb(array: np.ndarray | Image.Image, w: int, h: int, resize_filter: str = "bicubic") -> np.ndarray:
    """`array` may be a PIL image: resizing one crop to several sizes then converts it only once."""
    if isinstance(array, Image.Image):
        image, size = array, array.size
    else:
        image, size = None, (array.shape[1], array.shape[0])
    if size == (w, h):
        return np.asarray(array)
    if image is None:
        image = Image.fromarray(array)
    return np.asarray(image.resize((w, h), RESIZE_FILTERS[resize_filter]))


def canvas_background(background: np.ndarray, canvas: int, resize_filter: str = "bicubic") -> np.ndarray:
    """A donor background stretched to the canvas (the paper resizes backgrounds to 224 x 224)."""
    return np.ascontiguousarray(resize_rgb(background, canvas, canvas, resize_filter))
