"""Model-free backends: the `box` masker (the box rectangle) and the `telea` inpainter (OpenCV's
fast-marching inpainting, Telea 2004). They need no weights and run anywhere."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from builder.backends.base import BackendInfo, Inpainter, Masker
from builder.backends.registry import from_setting, register_backend
from builder.core.records import Box


@dataclass(frozen=True)
class BoxConfig:
    """The box masker has no knobs: the mask is the box."""


@dataclass(frozen=True)
class TeleaConfig:
    radius: int = from_setting("telea_radius", 3)  # pixels of neighbourhood each filled pixel averages


class BoxMasker(Masker):
    def info(self) -> BackendInfo:
        return BackendInfo("box")

    def masks_batch(self, images: Sequence[np.ndarray], boxes: Sequence[Sequence[Box]]) -> list[list[np.ndarray]]:
        out = []
        for image, image_boxes in zip(images, boxes):
            per_box = []
            for box in image_boxes:
                mask = np.zeros(image.shape[:2], dtype=bool)
                mask[box.y0 : box.y1 + 1, box.x0 : box.x1 + 1] = True
                per_box.append(mask)
            out.append(per_box)
        return out


class TeleaInpainter(Inpainter):
    def __init__(self, radius: int = 3) -> None:
        if radius < 1:
            raise ValueError("--telea-radius must be at least 1 pixel")
        self.radius = radius

    def info(self) -> BackendInfo:
        return BackendInfo("telea", {"radius": self.radius, "opencv": cv2.__version__})

    def inpaint_batch(
        self, images: Sequence[np.ndarray], masks: Sequence[np.ndarray], ids: Sequence[str] | None = None
    ) -> list[np.ndarray]:
        results = []
        for image, mask in zip(images, masks):
            if not mask.any():
                results.append(image.copy())
                continue
            filled = cv2.inpaint(image, mask.astype(np.uint8) * 255, self.radius, cv2.INPAINT_TELEA)
            # cv2 already keeps unmasked pixels; make that a guarantee rather than an assumption.
            results.append(np.where(mask[..., None], filled, image))
        return results


@register_backend("masker", "box", config_class=BoxConfig)
def make_box_masker(config: BoxConfig) -> BoxMasker:
    return BoxMasker()


@register_backend("inpainter", "telea", config_class=TeleaConfig)
def make_telea_inpainter(config: TeleaConfig) -> TeleaInpainter:
    return TeleaInpainter(radius=config.radius)
