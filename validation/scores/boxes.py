"""Per image and per class: the paper's centre and size scores from boxes and image sizes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from builder.core.classes import class_of, is_known_wnid
from builder.core.records import Box

# The paper's class-averaged figures over the official ImageNet val boxes.
PAPER_CENTRE_MEAN = 0.747
PAPER_SIZE_MEAN = 0.418


@dataclass(frozen=True)
class ImageBoxes:
    """One image's boxes and size: what the scores are computed from."""

    image_id: str
    wnid: str
    width: int
    height: int
    boxes: tuple[Box, ...]


@dataclass(frozen=True)
class ImageScore:
    image_id: str
    wnid: str
    centre: float
    size: float


@dataclass(frozen=True)
class ClassScore:
    wnid: str
    name: str
    images: int
    centre: float
    size: float


def centre_distance(box: Box, width: int, height: int) -> float:
    """The box centre's offset from the image centre, each axis normalised by the half side and the
    larger kept (a Chebyshev distance): 0 at the centre, 1 on the image's edge."""
    half_w, half_h = width / 2, height / 2
    cx, cy = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
    return max(abs(cx - half_w) / half_w, abs(cy - half_h) / half_h)


def area_fraction(box: Box, width: int, height: int) -> float:
    return (box.x1 - box.x0) * (box.y1 - box.y0) / (width * height)


def score_image(item: ImageBoxes) -> ImageScore:
    if not item.boxes:
        raise ValueError(f"image {item.image_id} has no boxes to score")
    if item.width <= 0 or item.height <= 0:
        raise ValueError(f"image {item.image_id} has size {item.width}x{item.height}")
    distances = [centre_distance(b, item.width, item.height) for b in item.boxes]
    areas = [area_fraction(b, item.width, item.height) for b in item.boxes]
    return ImageScore(item.image_id, item.wnid, 1.0 - float(np.mean(distances)), float(np.mean(areas)))


def class_name(wnid: str) -> str:
    return class_of(wnid).name if is_known_wnid(wnid) else ""


def score_classes(image_scores: Iterable[ImageScore]) -> list[ClassScore]:
    """Per-class means over images, sorted by wnid."""
    grouped: dict[str, list[ImageScore]] = {}
    for score in image_scores:
        grouped.setdefault(score.wnid, []).append(score)
    return [
        ClassScore(
            wnid,
            class_name(wnid),
            len(rows),
            float(np.mean([r.centre for r in rows])),
            float(np.mean([r.size for r in rows])),
        )
        for wnid, rows in sorted(grouped.items())
    ]


def summarise(classes: Sequence[ClassScore], images: Sequence[ImageScore]) -> dict:
    """Class-averaged means (the paper's figures) plus image-averaged ones and the spread."""
    if not classes:
        return {"classes": 0, "images": 0}
    centres = np.array([c.centre for c in classes])
    sizes = np.array([c.size for c in classes])
    return {
        "classes": len(classes),
        "images": len(images),
        "centre_class_mean": float(centres.mean()),
        "size_class_mean": float(sizes.mean()),
        "centre_image_mean": float(np.mean([i.centre for i in images])),
        "size_image_mean": float(np.mean([i.size for i in images])),
        "centre_class_std": float(centres.std()),
        "size_class_std": float(sizes.std()),
        "paper_reference": {
            "centre_class_mean": PAPER_CENTRE_MEAN,
            "size_class_mean": PAPER_SIZE_MEAN,
            "note": "over ImageNet's official val boxes (LOC_val_solution.csv), all 50,000 images",
        },
    }
