"""The parts format: what `hsi extract` writes per source image and what compose and validation read.

Members of one parts sample (key = source image id):
  crop.png        RGB pixels of the object box (inclusive VOC corners, so (x1-x0+1) x (y1-y0+1))
  mask.png        L, 0/255, crop-sized: the masker's object mask (before dilation)
  background.png  RGB, the image at full resolution with every box erased and inpainted
  erase.png       L, 0/255, full resolution: the dilated mask that was inpainted
  canvas.npy      uint8 224 x 224 x 3 (NumPy .npy): the background resized (bicubic) to the default
                  compose canvas, stored raw because compose reads it for every image and a PNG
                  decode costs as much as five JPEG encodes of the composites
  json            metadata (see `parts_metadata`), sorted keys
  cls             ImageNet class index 0-999 as ASCII digits
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
from PIL import Image

from .shards import iter_shard, manifest_shard_paths, read_manifest

PARTS_SCHEMA_VERSION = 1
PARTS_MEMBERS = ("background.png", "canvas.npy", "cls", "crop.png", "erase.png", "json", "mask.png")
# The canvas.npy member: the background exactly as compose would resize it for this canvas.
PARTS_CANVAS_SIZE = 224
PARTS_CANVAS_FILTER = "bicubic"


def encode_png(array: np.ndarray) -> bytes:
    """Lossless, deterministic PNG (fixed compression level, no metadata)."""
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG", compress_level=3)
    return buffer.getvalue()


def encode_canvas(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array, dtype=np.uint8), allow_pickle=False)
    return buffer.getvalue()


def decode_canvas(data: bytes) -> np.ndarray:
    """The canvas-sized background; refuses anything but a 224 x 224 x 3 uint8 array."""
    array = np.load(io.BytesIO(data), allow_pickle=False)
    expected = (PARTS_CANVAS_SIZE, PARTS_CANVAS_SIZE, 3)
    if array.dtype != np.uint8 or array.shape != expected:
        raise ValueError(f"canvas.npy holds {array.dtype} {array.shape}, expected uint8 {expected}")
    return array


def decode_png_image(data: bytes) -> Image.Image:
    """A PNG member as a loaded L or RGB image (other modes converted to one of them)."""
    image = Image.open(io.BytesIO(data))
    image.load()
    if image.mode in ("L", "RGB"):
        return image  # converting to its own mode would only copy the pixels once more
    return image.convert("L" if image.mode == "1" else "RGB")


def decode_png(data: bytes) -> np.ndarray:
    return np.asarray(decode_png_image(data))


@dataclass(frozen=True)
class Parts:
    """One decoded parts sample."""

    key: str
    meta: dict
    crop: np.ndarray  # H x W x 3 uint8
    mask: np.ndarray  # H x W bool
    background: np.ndarray  # full resolution, H x W x 3 uint8
    erase: np.ndarray  # full resolution, H x W bool

    @property
    def class_index(self) -> int:
        return int(self.meta["class_index"])

    @property
    def wnid(self) -> str:
        return self.meta["wnid"]


def decode_parts(key: str, members: dict[str, bytes]) -> Parts:
    missing = [name for name in PARTS_MEMBERS if name not in members]
    if missing:
        raise ValueError(f"parts sample {key!r} lacks members {missing}")
    return Parts(
        key=key,
        meta=json.loads(members["json"]),
        crop=decode_png(members["crop.png"]),
        mask=decode_png(members["mask.png"]) > 127,
        background=decode_png(members["background.png"]),
        erase=decode_png(members["erase.png"]) > 127,
    )


def iter_parts_samples(parts_dir: Path, split: str | None = None) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Raw (key, members) of every parts sample listed in the manifest, in shard order."""
    manifest = read_manifest(parts_dir)
    for path in manifest_shard_paths(parts_dir, manifest, split):
        yield from iter_shard(path)


def iter_parts(parts_dir: Path, split: str | None = None) -> Iterator[Parts]:
    for key, members in iter_parts_samples(parts_dir, split):
        yield decode_parts(key, members)
