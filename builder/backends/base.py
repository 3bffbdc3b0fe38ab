"""The backend interfaces: extract's masker (image + boxes -> one mask per box) and inpainter
(image + mask -> image), and validation's detector (image + text prompt -> boxes). All take batches
so model backends can fill a GPU; the model-free ones simply loop.

Every backend describes itself for provenance: name, parameters, checkpoint file name and sha256.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from builder.core.records import Box


@dataclass(frozen=True)
class BackendInfo:
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None  # file name only, never a machine path
    checkpoint_sha256: str | None = None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "params": dict(sorted(self.params.items())),
            "checkpoint": self.checkpoint,
            "checkpoint_sha256": self.checkpoint_sha256,
        }


class Masker(ABC):
    """Turns each box of an image into a boolean object mask of the image's size."""

    @abstractmethod
    def info(self) -> BackendInfo: ...

    @abstractmethod
    def masks_batch(self, images: Sequence[np.ndarray], boxes: Sequence[Sequence[Box]]) -> list[list[np.ndarray]]:
        """For each image (H x W x 3 uint8) and its boxes, one H x W bool mask per box, in order."""

    def prepare_ahead(self, images: Sequence[np.ndarray]) -> None:  # noqa: B027 - optional hook
        """A hint: `images` are the next batch's; a model masker may start readying them (upload,
        resize) while the current batch runs. Never changes a mask."""


@dataclass(frozen=True)
class InpaintFallback:
    """An image an inpainter could not fill itself and filled with another backend instead (e.g.
    PatchMatch with no source pixels left): extract records it as an error row and in the part's
    provenance, so a fallback is never silent."""

    reason: str  # an issue reason of builder.core.records.REASONS
    detail: str
    backend: BackendInfo  # the backend that filled the image

    def to_json(self) -> dict:
        return {"reason": self.reason, "detail": self.detail, "inpainter": self.backend.to_json()}


@dataclass(frozen=True)
class FilledImage:
    """One inpainted image as extract stores it: the background, the pixels replaced (the fill
    mask: at least the mask asked for), the 224-px canvas and the pixels replaced on it when the
    inpainter made its fill at that scale (None: extract resizes the background and the fill mask),
    and the fallback used, if any."""

    background: np.ndarray
    replaced: np.ndarray
    canvas: np.ndarray | None = None
    fallback: InpaintFallback | None = None
    canvas_replaced: np.ndarray | None = None


class Inpainter(ABC):
    """Fills the masked pixels of each image from their surroundings."""

    @abstractmethod
    def info(self) -> BackendInfo: ...

    @abstractmethod
    def inpaint_batch(
        self, images: Sequence[np.ndarray], masks: Sequence[np.ndarray], ids: Sequence[str] | None = None
    ) -> list[np.ndarray]:
        """For each image (H x W x 3 uint8) and mask (H x W bool), an H x W x 3 uint8 result whose
        pixels outside the mask equal the input's. `ids` (the source image ids, when known) let a
        randomised inpainter seed each image by its id, so a result never depends on its batch."""

    def inpaint_with_fallbacks(
        self, images: Sequence[np.ndarray], masks: Sequence[np.ndarray], ids: Sequence[str] | None = None
    ) -> tuple[list[np.ndarray], list[InpaintFallback | None]]:
        """`inpaint_batch`, plus per image the fallback used for it (None: filled by this backend).
        What extract calls; an inpainter that can fall back overrides it."""
        return self.inpaint_batch(images, masks, ids), [None] * len(images)

    def fill_images(
        self, images: Sequence[np.ndarray], masks: Sequence[np.ndarray], ids: Sequence[str] | None = None
    ) -> list[FilledImage]:
        """What extract calls: per image its background, fill mask, canvas and fallback. Here the
        fill mask is the mask (an inpainter that replaces only those pixels), no canvas."""
        backgrounds, fallbacks = self.inpaint_with_fallbacks(images, masks, ids)
        return [
            FilledImage(background, mask.copy(), None, fallback)
            for background, mask, fallback in zip(backgrounds, masks, fallbacks, strict=True)
        ]


class Detector(ABC):
    """Finds the boxes a text prompt names in each image (open-vocabulary detection)."""

    @abstractmethod
    def info(self) -> BackendInfo: ...

    @abstractmethod
    def detect(
        self, images: Sequence[np.ndarray], prompts: Sequence[str], box_threshold: float, text_threshold: float
    ) -> list[np.ndarray]:
        """For each image (H x W x 3 uint8) and its prompt, an N x 4 array of the detected boxes
        (continuous x0, y0, x1, y1 pixels) that pass both score thresholds."""
