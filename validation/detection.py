"""Box re-detection: how well do ImageNet's ground-truth boxes agree with an open-vocabulary
detector prompted with the class's readable name? (The paper reports mIoU 0.875 with Grounding DINO.)

The detector is a backend from the registry (`builder.backends`, kind "detector"; Grounding DINO is
`builder.backends.grounding_dino`). This module only batches images to it and scores its boxes.

Per image and ground-truth box: the best IoU with any detection that passes the box and text
thresholds (0 when none does); per image the mean over its boxes; per class the mean over its images;
overall the mean over images. Ground-truth boxes are VOC inclusive pixel corners; they are turned into
continuous corners (x1 + 1, y1 + 1) before the IoU, matching the detector's box convention.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from builder.backends.base import BackendInfo, Detector
from builder.core.classes import class_of, is_known_wnid
from builder.core.records import Box, Issue, count_by_reason

DEFAULT_BOX_THRESHOLD = 0.35  # the thresholds of Grounding DINO's own demo
DEFAULT_TEXT_THRESHOLD = 0.25
DEFAULT_IOU_THRESHOLD = 0.5


@dataclass(frozen=True)
class DetectionItem:
    """One image to re-detect: its pixels (H x W x 3 uint8) are loaded on demand; `load` raises
    `ImageUnavailable` (or OSError/ValueError) when they cannot be."""

    image_id: str
    wnid: str
    boxes: tuple[Box, ...]
    load: Callable[[], np.ndarray]
    split: str | None = None


class ImageUnavailable(Exception):
    """An image to re-detect cannot be loaded: `reason` is one of `REASONS` (the decoder's, or
    `image-not-found`)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def unavailable_row(item: DetectionItem, error: Exception) -> Issue:
    """The error row of an image left out of the re-detection, keyed by its image id."""
    reason, detail = (
        (error.reason, error.detail) if isinstance(error, ImageUnavailable) else ("unreadable-image", str(error))
    )
    return Issue(item.image_id, reason, detail, "validate", "not-detected", split=item.split, key=item.image_id)


@dataclass(frozen=True)
class ImageIoU:
    image_id: str
    wnid: str
    box_ious: tuple[float, ...]
    detections: int

    @property
    def mean_iou(self) -> float:
        return float(np.mean(self.box_ious))


def prompt_for(wnid: str) -> str:
    """Grounding DINO's prompt convention: lower-case phrase ending with a full stop."""
    name = class_of(wnid).name if is_known_wnid(wnid) else wnid
    return f"{name.lower().strip()}."


def detector_provenance(info: BackendInfo) -> dict:
    """The detector fields of a detection report: its checkpoint (a folder's name or a hub id)
    under "detector", then its parameters (where the weights came from, their sha256, the device)."""
    return {"detector": info.checkpoint, **info.params}


def best_ious(ground_truth: Sequence[Box], detections: np.ndarray) -> tuple[float, ...]:
    """For each ground-truth box, its best IoU with any detection (0 when there is none)."""
    import torch
    from torchvision.ops import box_iou

    if len(detections) == 0:
        return tuple(0.0 for _ in ground_truth)
    truth = torch.tensor([[b.x0, b.y0, b.x1 + 1, b.y1 + 1] for b in ground_truth], dtype=torch.float32)
    ious = box_iou(truth, torch.as_tensor(detections, dtype=torch.float32))
    return tuple(float(v) for v in ious.max(dim=1).values)


@dataclass
class DetectionReport:
    images: list[ImageIoU]
    info: dict
    iou_threshold: float
    unreadable: list[Issue] = field(default_factory=list)  # images left out: not found or not decodable

    def per_class(self) -> dict[str, dict]:
        grouped: dict[str, list[float]] = {}
        for image in self.images:
            grouped.setdefault(image.wnid, []).append(image.mean_iou)
        return {
            wnid: {"images": len(values), "mean_iou": float(np.mean(values))}
            for wnid, values in sorted(grouped.items())
        }

    @property
    def mean_iou(self) -> float | None:
        return float(np.mean([i.mean_iou for i in self.images])) if self.images else None

    def below_threshold(self) -> list[dict]:
        return [
            {"image_id": i.image_id, "wnid": i.wnid, "mean_iou": round(i.mean_iou, 6)}
            for i in sorted(self.images, key=lambda i: (i.mean_iou, i.image_id))
            if i.mean_iou < self.iou_threshold
        ]

    def to_json(self) -> dict:
        per_class = self.per_class()
        return {
            **self.info,
            "images": len(self.images),
            "mean_iou": self.mean_iou,
            "class_mean_iou": float(np.mean([c["mean_iou"] for c in per_class.values()])) if per_class else None,
            "iou_threshold": self.iou_threshold,
            "below_threshold": self.below_threshold(),
            "per_class": per_class,
            "per_image": {
                i.image_id: {
                    "wnid": i.wnid,
                    "mean_iou": round(i.mean_iou, 6),
                    "box_ious": [round(v, 6) for v in i.box_ious],
                    "detections": i.detections,
                }
                for i in self.images
            },
            "unreadable": [row.to_json() for row in self.unreadable],
            "unreadable_by_reason": count_by_reason(self.unreadable),
            "paper_reference": {"mean_iou": 0.875, "note": "Grounding DINO against ImageNet's val boxes"},
        }


def redetect(
    items: Iterable[DetectionItem],
    detector: Detector,
    *,
    batch_size: int = 8,
    box_threshold: float = DEFAULT_BOX_THRESHOLD,
    text_threshold: float = DEFAULT_TEXT_THRESHOLD,
    iou_threshold: float = DEFAULT_IOU_THRESHOLD,
    progress: Callable[[int], None] | None = None,
) -> DetectionReport:
    """Run the detector over `items` in batches and collect per-box best IoUs."""
    report = DetectionReport(
        [],
        {
            **detector_provenance(detector.info()),
            "box_threshold": box_threshold,
            "text_threshold": text_threshold,
            "batch_size": batch_size,
        },
        iou_threshold,
    )
    batch: list[tuple[DetectionItem, np.ndarray]] = []

    def flush() -> None:
        detections = detector.detect(
            [image for _, image in batch], [prompt_for(item.wnid) for item, _ in batch], box_threshold, text_threshold
        )
        for (item, _), found in zip(batch, detections):
            report.images.append(ImageIoU(item.image_id, item.wnid, best_ious(item.boxes, found), len(found)))
        if progress:
            progress(len(batch))
        batch.clear()

    for item in items:
        if not item.boxes:
            continue
        try:
            image = item.load()
        except (ImageUnavailable, OSError, ValueError) as exc:
            report.unreadable.append(unavailable_row(item, exc))
            continue
        batch.append((item, image))
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    report.images.sort(key=lambda i: i.image_id)
    return report


def items_from_sources(records, limit: int | None = None, split: str | None = None) -> list[DetectionItem]:
    """Detection items for `builder.sources` records (their files are decoded when batched)."""
    chosen = sorted(records, key=lambda r: r.image_id)[: limit or None]
    return [DetectionItem(r.image_id, r.wnid, tuple(r.boxes), file_loader(r.path), split) for r in chosen]


def file_loader(path: str) -> Callable[[], np.ndarray]:
    """Decode `path` as extract decodes it; a file it refuses raises `ImageUnavailable` with its reason."""

    def load() -> np.ndarray:
        from builder.extract.images import ImageDecodeError, decode_image

        try:
            return decode_image(Path(path)).rgb
        except ImageDecodeError as exc:
            raise ImageUnavailable(exc.reason, exc.detail) from None

    return load


def missing_loader(image_id: str) -> Callable[[], np.ndarray]:
    """A loader for an image that is not under --source."""

    def load() -> np.ndarray:
        raise ImageUnavailable("image-not-found", f"{image_id} is not under --source")

    return load
