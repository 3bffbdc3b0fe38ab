"""The parts format: what `hsi extract` writes per source image and what compose and validation read.

Members of one parts sample (key = source image id):
  crop.png        RGB pixels of the object box (inclusive VOC corners, so (x1-x0+1) x (y1-y0+1)); with
                  extract's --crop-margin M, of the box grown by M pixels on each side and clipped to
                  the image, the region the json's `crop_box` names (readers take the box out of it
                  with `object_window`; the margin is context for crops that reach past the box, as
                  the paper's float32 boxes do)
  mask.png        L, 0/255, crop-sized: the masker's object mask (before dilation)
  background.png  RGB, the image at full resolution with every box erased and inpainted
  erase.png       L, 0/255, full resolution: the dilated mask that was inpainted
  fill.png        L, 0/255, full resolution: the pixels the inpainter replaced (schema 2): the erase
                  mask and whatever else the fill wrote (patchmatch keeps its whole fill, the band it
                  grew the mask by included, so no original pixel is left unmatched at the border)
  canvas.npy      uint8 224 x 224 x 3 (NumPy .npy): the background resized (bicubic) to the default
                  compose canvas, stored raw because compose reads it for every image and a PNG
                  decode costs as much as five JPEG encodes of the composites
  json            metadata (see `parts_metadata`), sorted keys; schema 2 adds `fill_scores`, the
                  no-reference scores of the fill on the canvas (`builder.formats.fill_scores`;
                  null when nothing was filled); `background_status` "none" when the erase mask
                  covered the whole photo, so nothing of its own was left to fill from (#46; absent,
                  read as "own", for every part with a background of its own, so those keep their bytes)
  cls             ImageNet class index 0-999 as ASCII digits
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from builder.core.classes import class_of
from builder.core.manifest import Manifest
from builder.core.records import Box
from builder.core.shard_read import iter_shard, load_json_member, npy_member_problem, tar_members
from builder.formats.png import open_png

PARTS_SCHEMA_VERSION = 2
# Schema 1 (no fill mask, no fill scores) is still read: its fill is its erase mask.
PARTS_MEMBERS_V1 = ("background.png", "canvas.npy", "cls", "crop.png", "erase.png", "json", "mask.png")
PARTS_MEMBERS = tuple(sorted((*PARTS_MEMBERS_V1, "fill.png")))
# A part's background: its own photo's, filled ("own"), or none of its own (the erase mask covered
# the whole frame: background.png is a fill made from nothing, kept so paper-exact compose can use it)
BACKGROUND_OWN, BACKGROUND_NONE = "own", "none"
BACKGROUND_STATUSES = (BACKGROUND_OWN, BACKGROUND_NONE)
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


_CANVAS_SHAPE = (PARTS_CANVAS_SIZE, PARTS_CANVAS_SIZE, 3)
_CANVAS_PIXEL_BYTES = PARTS_CANVAS_SIZE * PARTS_CANVAS_SIZE * 3
_CANVAS_NPY_HEADER = encode_canvas(np.zeros(_CANVAS_SHAPE, np.uint8))[:-_CANVAS_PIXEL_BYTES]


def decode_canvas(data: bytes) -> np.ndarray:
    """The canvas-sized background; refuses anything but a 224 x 224 x 3 uint8 array."""
    if len(data) == len(_CANVAS_NPY_HEADER) + _CANVAS_PIXEL_BYTES and data.startswith(_CANVAS_NPY_HEADER):
        # the header encode_canvas writes: the pixels follow it (np.load would parse it with ast, 10x slower)
        return np.frombuffer(data, np.uint8, offset=len(_CANVAS_NPY_HEADER)).reshape(_CANVAS_SHAPE).copy()
    problem = npy_member_problem(data, "canvas.npy")
    if problem:  # before np.load allocates the shape its header declares
        raise ValueError(problem)
    array = np.load(io.BytesIO(data), allow_pickle=False)
    if array.dtype != np.uint8 or array.shape != _CANVAS_SHAPE:
        raise ValueError(f"canvas.npy holds {array.dtype} {array.shape}, expected uint8 {_CANVAS_SHAPE}")
    return array


def decode_png_image(data: bytes) -> Image.Image:
    """A PNG member as a loaded L or RGB image (other modes converted to one of them)."""
    image = open_png(data)
    if image.mode in ("L", "RGB"):
        return image  # converting to its own mode would only copy the pixels once more
    return image.convert("L" if image.mode == "1" else "RGB")


def decode_png_checked(data: bytes) -> Image.Image:
    """`decode_png_image`, with a decompression bomb and a broken chunk refused as a ValueError
    (Pillow raises DecompressionBombError and SyntaxError for those, which callers that skip bad
    members miss)."""
    try:
        return decode_png_image(data)
    except Image.DecompressionBombError as exc:
        raise ValueError(f"refused as a decompression bomb: {exc}") from None
    except SyntaxError as exc:  # a chunk type that is not four letters where image data was due
        raise ValueError(str(exc)) from None


def decode_png(data: bytes) -> np.ndarray:
    """The pixels of a PNG member; ValueError for anything that does not decode, a bomb included."""
    return np.asarray(decode_png_checked(data))


def encode_mask(mask: np.ndarray) -> bytes:
    """A boolean mask as an L PNG of 0/255."""
    return encode_png(mask.astype(np.uint8) * 255)


def decode_mask(data: bytes) -> np.ndarray:
    return decode_png(data) > 127


def parts_metadata(
    *,
    source_id: str,
    wnid: str,
    width: int,
    height: int,
    boxes: Sequence[Box],
    object_box_index: int,
    object_box_rule: str,
    conversions: Sequence[str],
    provenance: dict,
    crop_box: Sequence[int] | None = None,
    fill_scores: dict | None = None,
    background_status: str = BACKGROUND_OWN,
) -> dict:
    """The `json` member of one parts sample (`boxes` are the image's boxes after clipping;
    `crop_box`, inclusive corners, only when crop.png holds more than the object box; the class
    index and name come from `wnid`)."""
    cls = class_of(wnid)
    meta = {
        "schema_version": PARTS_SCHEMA_VERSION,
        "source_id": source_id,
        "wnid": wnid,
        "class_index": cls.index,
        "class_name": cls.name,
        "width": width,
        "height": height,
        "boxes": [{"x0": b.x0, "y0": b.y0, "x1": b.x1, "y1": b.y1, "wnid": b.wnid} for b in boxes],
        "object_box_index": object_box_index,
        "object_box": boxes[object_box_index].as_list(),
        "object_box_rule": object_box_rule,
        "conversions": list(conversions),
        "provenance": provenance,
        "fill_scores": fill_scores,
    }
    if crop_box is not None:  # absent otherwise: parts without a margin keep their bytes
        meta["crop_box"] = [int(v) for v in crop_box]
    if background_status != BACKGROUND_OWN:  # absent otherwise: parts with a background keep their bytes
        meta["background_status"] = background_status
    return meta


def background_status(meta: dict) -> str:
    """A part's `background_status` ("own" when absent: parts before #46 and every part with a
    background of its own); ValueError for any other value."""
    status = meta.get("background_status", BACKGROUND_OWN)
    if status not in BACKGROUND_STATUSES:
        raise ValueError(f"background_status must be one of {', '.join(BACKGROUND_STATUSES)}, got {status!r:.40}")
    return status


def stored_crop_box(meta: dict) -> tuple[int, int, int, int]:
    """The image region crop.png holds (inclusive corners): `crop_box`, else the object box.
    ValueError when `crop_box` does not hold the object box inside the image."""
    x0, y0, x1, y1 = (int(v) for v in meta["object_box"])
    if "crop_box" not in meta:
        return x0, y0, x1, y1
    region = [int(v) for v in meta["crop_box"]]
    if len(region) != 4 or not (
        0 <= region[0] <= x0
        and 0 <= region[1] <= y0
        and x1 <= region[2] < int(meta["width"])
        and y1 <= region[3] < int(meta["height"])
    ):
        raise ValueError(f"crop_box {region} does not hold the object box {[x0, y0, x1, y1]} inside the image")
    return region[0], region[1], region[2], region[3]


def object_window(meta: dict) -> tuple[int, int, int, int] | None:
    """Where the object box lies in crop.png (x0, y0, x1, y1, ends exclusive), or None when
    crop.png is the box itself."""
    if "crop_box" not in meta:
        return None
    x0, y0, x1, y1 = (int(v) for v in meta["object_box"])
    cx0, cy0, _, _ = stored_crop_box(meta)
    return x0 - cx0, y0 - cy0, x1 - cx0 + 1, y1 - cy0 + 1


def check_crop_size(meta: dict, width: int, height: int) -> None:
    """ValueError unless crop.png (width x height) is the size of the region it should hold."""
    x0, y0, x1, y1 = stored_crop_box(meta)
    if (width, height) != (x1 - x0 + 1, y1 - y0 + 1):
        what = "crop_box" if "crop_box" in meta else "object box"
        raise ValueError(f"crop.png is {width}x{height}, its {what} {[x0, y0, x1, y1]} is {x1 - x0 + 1}x{y1 - y0 + 1}")


def encode_parts_members(
    crop: np.ndarray,
    mask: np.ndarray,
    background: np.ndarray,
    erase: np.ndarray,
    canvas: np.ndarray,
    meta: dict,
    fill: np.ndarray,
) -> dict[str, bytes]:
    """The members of one parts sample. `canvas` is the background at the default compose canvas
    (the fill as the inpainter made it at that scale, or the background resized as compose resizes
    it); `fill` the pixels replaced."""
    return {
        "fill.png": encode_mask(fill),
        "crop.png": encode_png(crop),
        "mask.png": encode_mask(mask),
        "background.png": encode_png(background),
        "canvas.npy": encode_canvas(canvas),
        "erase.png": encode_mask(erase),
        "json": json.dumps(meta, sort_keys=True).encode("utf-8"),
        "cls": str(meta["class_index"]).encode("ascii"),
    }


@dataclass(frozen=True)
class Parts:
    """One decoded parts sample."""

    key: str
    meta: dict
    crop: np.ndarray  # H x W x 3 uint8: the object box (a stored margin taken off)
    mask: np.ndarray  # H x W bool
    background: np.ndarray  # full resolution, H x W x 3 uint8
    erase: np.ndarray  # full resolution, H x W bool
    fill: np.ndarray  # full resolution, H x W bool: the pixels replaced (the erase mask for schema 1)

    @property
    def class_index(self) -> int:
        return int(self.meta["class_index"])

    @property
    def wnid(self) -> str:
        return self.meta["wnid"]


def decode_parts_json(members: dict[str, bytes]) -> dict:
    return json.loads(members["json"])


def decode_parts(key: str, members: dict[str, bytes]) -> Parts:
    missing = [name for name in PARTS_MEMBERS_V1 if name not in members]
    if missing:
        raise ValueError(f"parts sample {key!r} lacks members {missing}")
    meta = decode_parts_json(members)
    crop, mask = decode_png(members["crop.png"]), decode_mask(members["mask.png"])
    window = object_window(meta)
    if window is not None:  # the object box out of a crop stored with a margin
        check_crop_size(meta, crop.shape[1], crop.shape[0])
        x0, y0, x1, y1 = window
        crop, mask = crop[y0:y1, x0:x1], mask[y0:y1, x0:x1]
    return Parts(
        key=key,
        meta=meta,
        crop=crop,
        mask=mask,
        background=decode_png(members["background.png"]),
        erase=(erase := decode_mask(members["erase.png"])),
        fill=decode_mask(members["fill.png"]) if "fill.png" in members else erase,
    )


def iter_parts_samples(parts_dir: Path, split: str | None = None) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Raw (key, members) of every parts sample listed in the manifest, in shard order."""
    for path in Manifest.read(parts_dir).shard_paths(parts_dir, split):
        yield from iter_shard(path)


def iter_parts(parts_dir: Path, split: str | None = None) -> Iterator[Parts]:
    for key, members in iter_parts_samples(parts_dir, split):
        yield decode_parts(key, members)


def iter_parts_json(shard: Path) -> Iterator[dict]:
    """The json member of every sample of a parts shard extract wrote, read without the images
    (extract's manifest summary of fill scores reads every part it just wrote)."""
    with open(shard, "rb", buffering=0) as handle:
        for member in tar_members(shard):
            if member.name.endswith(".json"):
                data = os.pread(handle.fileno(), member.size, member.offset_data)
                yield load_json_member(data, shard.name, member.name)
