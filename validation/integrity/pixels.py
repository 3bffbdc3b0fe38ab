"""The composite's pixels against the parts: the pasted box against the object's crop resized by
compose's own rules, the area around it against the declared background's canvas."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from builder.compose.background_cache import read_canvas_background
from builder.compose.geometry import (
    resize_mask,
)
from builder.compose.object_crop import PAPER_CROP_CLIPPED, PaperCropClipped, read_spec_object
from builder.compose.parts_input import index_checked_parts
from builder.core.imaging import resize_rgb
from builder.core.manifest import Manifest
from builder.formats.parts_index import MemberReader, PartsRef
from validation.integrity.results import DECODE_ERRORS


@dataclass
class PartsLookup:
    """The objects of a parts folder by source id, through compose's offset index (only the `json`
    members are read up front); only crops of composites being checked are decoded."""

    reader: MemberReader
    refs: dict[str, PartsRef]
    _cache: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    _canvases: dict[tuple[str, int, str], np.ndarray] = field(default_factory=dict)

    @classmethod
    def build(cls, parts_dir: Path) -> PartsLookup:
        parts_dir = Path(parts_dir)
        manifest = Manifest.read(parts_dir)
        # compose's own index: it locates the `json` members the spec's cut reads (object_crop)
        index, _ = index_checked_parts(parts_dir, manifest, sorted(manifest.splits))
        refs: dict[str, PartsRef] = {}
        for split in sorted(index):
            for ref in index[split]:
                refs.setdefault(ref.key, ref)
        return cls(MemberReader(parts_dir), refs)

    def crop_and_mask(
        self, source_id: str, crop: str = "inclusive", box_rounding: str = "none"
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The crop and mask of `source_id` cut as compose cuts them under the spec's `crop` and
        `box_rounding` (`builder.compose.object_crop`); None when the parts lack it;
        `PaperCropClipped` when the cut needs pixels the parts do not hold; ValueError/OSError when
        its members do not read."""
        wanted = (source_id, crop, box_rounding)
        if wanted in self._cache:
            return self._cache[wanted]
        ref = self.refs.get(source_id)
        if ref is None:
            return None
        image, mask = read_spec_object(self.reader, ref, crop, box_rounding, with_mask=True)
        assert mask is not None  # asked for
        if len(self._cache) > 256:
            self._cache.clear()
        self._cache[wanted] = (np.asarray(image), mask)
        return self._cache[wanted]

    def canvas(self, source_id: str, canvas: int, resize_filter: str) -> np.ndarray | None:
        """The canvas-sized background of `source_id` exactly as compose reads it; None when the
        parts lack it."""
        ref = self.refs.get(source_id)
        if ref is None:
            return None
        wanted = (source_id, canvas, resize_filter)
        if wanted not in self._canvases:
            if len(self._canvases) > 256:  # a composite's own image and donor recur within a shard
                self._canvases.clear()
            self._canvases[wanted] = read_canvas_background(self.reader, ref, canvas, resize_filter)
        return self._canvases[wanted]

    def close(self) -> None:
        self.reader.close()


def placement_error(
    composite: np.ndarray, meta: dict, crop: np.ndarray, mask: np.ndarray, resize_filter: str
) -> float | None:
    """Mean absolute difference between the declared pasted region and the resized crop (over the
    mask's pixels when only the mask was pasted); None when nothing can be compared."""
    x, y, w, h = meta["box_x"], meta["box_y"], meta["box_w"], meta["box_h"]
    region = composite[y : y + h, x : x + w].astype(np.int16)
    # resized exactly as compose resizes (builder.geometry), so only JPEG loss remains
    expected = resize_rgb(crop, w, h, resize_filter).astype(np.int16)
    if region.shape != expected.shape:
        return None
    difference = np.abs(region - expected).mean(axis=2)
    if meta.get("paste") == "mask":
        pasted = resize_mask(mask, w, h, resize_filter)
        if pasted.sum() < 16:  # too few object pixels to say anything
            return None
        return float(difference[pasted].mean())
    return float(difference.mean())


def background_error(composite: np.ndarray, meta: dict, background: np.ndarray) -> float | None:
    """Mean absolute difference between the composite and the declared background outside the
    pasted box; None when too little background shows."""
    height, width = composite.shape[:2]
    outside = height * width - meta["box_w"] * meta["box_h"]  # the box lies in the canvas (checked first)
    if outside < 64 or background.shape != composite.shape:
        return None
    difference = cv2.absdiff(composite, background)  # sums, not masked means: 4x faster on a 224 canvas
    inside = difference[meta["box_y"] : meta["box_y"] + meta["box_h"], meta["box_x"] : meta["box_x"] + meta["box_w"]]
    return (int(difference.sum(dtype=np.int64)) - int(inside.sum(dtype=np.int64))) / (3 * outside)


def object_rules(spec: dict) -> tuple[str, str, str]:
    """How the spec cuts and sizes the object (`crop`, `box_rounding`, `size_rounding`), from the
    spec as `resolved_spec` typed it (its type has the defaults and refused unknown values)."""
    return spec["crop"], spec["box_rounding"], spec["size_rounding"]


def from_parts(fail, reason: str, source_id: str, read):
    """`read(source_id)` from the parts, or None with a `reason` failure saying why it is not there."""
    try:
        value = read(source_id)
    except PaperCropClipped as exc:  # compose skips such an image: no composite of it can be right
        fail(
            reason,
            f"source {source_id} is {PAPER_CROP_CLIPPED} in these parts, so compose makes no composite of it: {exc}",
        )
        return None
    except (*DECODE_ERRORS, KeyError) as exc:
        fail(reason, f"the parts of source {source_id} do not read: {exc}")
        return None
    if value is None:
        fail(reason, f"source {source_id} is not in the parts folder")
    return value
