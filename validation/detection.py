"""Box re-detection: how well do ImageNet's ground-truth boxes agree with an open-vocabulary
detector prompted with the class's readable name? (The paper reports mIoU 0.875 with Grounding DINO.)

The detector is a backend from the registry (`builder.backends`, kind "detector"; Grounding DINO is
`builder.backends.grounding_dino`). This module only batches images to it and scores its boxes.

Per image and ground-truth box: the best IoU with any detection that passes the box and text
thresholds (0 when none does); per image the mean over its boxes; per class the mean over its images;
overall the mean over images. Ground-truth boxes are VOC inclusive pixel corners; they are turned into
continuous corners (x1 + 1, y1 + 1) before the IoU, matching the detector's box convention.

The images are grouped by aspect (landscape, portrait; read from each file's header) and cut into
batches in that order (`detection_batches`), and the batches into contiguous
chunks (`plan_chunks`); `DetectionJob` re-detects one chunk and can run in worker processes or Ray
actors, each building the detector once. Batches never change with the split (a detector's result
depends on its batch company: images are padded to the batch's largest), and chunks are merged in
order, so the report is the same for any number of workers and either runner.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from builder.backends.base import BackendInfo, Detector
from builder.backends.torch_base import device_type_named
from builder.backends.torch_threads import threads_setting, use_stage_threads
from builder.core.classes import class_of, is_known_wnid
from builder.core.errors import HsiError, RunFailed
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


def detector_failed_row(item: DetectionItem, error: Exception) -> Issue:
    """The error row of an image the detector failed on (alone, not only in its batch)."""
    detail = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"  # one line, as every row
    return Issue(
        item.image_id, "backend-failed", detail, "validate", "not-detected", split=item.split, key=item.image_id
    )


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


LANDSCAPE, PORTRAIT, UNKNOWN_SHAPE = 0, 1, 2  # the aspect groups images are batched in, in this order


def aspect_group(item: DetectionItem) -> int:
    """The aspect group an image is batched with: landscape (or square), portrait, or unknown (a
    loader that cannot tell its size from the file's header, or a header that does not read). The
    detector pads a batch to its largest height and width: Grounding DINO's processor makes a
    4:3 photo 800 x 1066 and a 3:4 one 1066 x 800, so one batch of both runs at 1066 x 1066."""
    size = getattr(item.load, "size", None)
    shape = size() if callable(size) else None
    if shape is None:
        return UNKNOWN_SHAPE
    width, height = shape
    return PORTRAIT if height > width else LANDSCAPE


def detection_batches(items: Iterable[DetectionItem], batch_size: int) -> list[tuple[DetectionItem, ...]]:
    """The items with boxes, grouped by aspect (`aspect_group`; item order within a group), each
    group in consecutive batches of `batch_size` (no batch mixes groups). The batches are cut here,
    once, from every item before any worker takes one, so they (and the detections: a detector's
    result depends on its batch company) are the same however they are shared out. An image that
    cannot be loaded leaves its batch one image short instead of pulling the next one in."""
    if batch_size < 1:
        raise ValueError("batch size must be at least 1")
    groups: dict[int, list[DetectionItem]] = {}
    for item in items:
        if item.boxes:
            groups.setdefault(aspect_group(item), []).append(item)
    return [
        tuple(group[start : start + batch_size])
        for _, group in sorted(groups.items())
        for start in range(0, len(group), batch_size)
    ]


CHUNKS_PER_WORKER = 4  # a slow chunk (large images) does not leave the other workers idle for long
MAX_CHUNK_IMAGES = 512  # a chunk is what a worker returns at once


def plan_chunks(batches: Sequence[tuple[DetectionItem, ...]], workers: int) -> list[tuple[tuple, ...]]:
    """The batches, in order, as contiguous chunks of whole batches for `workers` processes. Where
    the chunks are cut changes no result; only how the work is shared."""
    if not batches:
        return []
    per_chunk = math.ceil(len(batches) / (CHUNKS_PER_WORKER * max(1, workers)))
    per_chunk = max(1, min(per_chunk, MAX_CHUNK_IMAGES // max(len(batches[0]), 1)))
    return [tuple(batches[start : start + per_chunk]) for start in range(0, len(batches), per_chunk)]


def detect_or_failure(
    loaded: Sequence[tuple[DetectionItem, np.ndarray]], detector: Detector, box_threshold: float, text_threshold: float
) -> list[np.ndarray | Exception]:
    """The detector's boxes for each loaded image, or the exception it raised on that image alone:
    after a failed batch each image is tried on its own, so one bad image costs only its own row. A
    refusal (`HsiError`: a device this process lacks) is raised, as is Ctrl-C."""
    try:
        return list(
            detector.detect(
                [image for _, image in loaded],
                [prompt_for(item.wnid) for item, _ in loaded],
                box_threshold,
                text_threshold,
            )
        )
    except HsiError:
        raise
    except Exception as exc:  # noqa: BLE001 - narrowed image by image; each failure becomes a row
        if len(loaded) == 1:
            return [exc]
    return [detect_or_failure([pair], detector, box_threshold, text_threshold)[0] for pair in loaded]


def detect_batch(
    batch: Sequence[DetectionItem], detector: Detector, box_threshold: float, text_threshold: float
) -> tuple[list[ImageIoU], list[Issue]]:
    """One batch: the best IoUs of each image, and a row for each image left out (not loadable, or
    the detector failed on it), in the batch's order."""
    loaded: list[tuple[DetectionItem, np.ndarray]] = []
    rows: dict[int, Issue] = {}  # by position in the batch
    positions = []
    for position, item in enumerate(batch):
        try:
            loaded.append((item, item.load()))
            positions.append(position)
        except (ImageUnavailable, OSError, ValueError) as exc:
            rows[position] = unavailable_row(item, exc)
    images = []
    if loaded:
        found_all = detect_or_failure(loaded, detector, box_threshold, text_threshold)
        for position, (item, _), found in zip(positions, loaded, found_all):
            if isinstance(found, Exception):
                rows[position] = detector_failed_row(item, found)
            else:
                images.append(ImageIoU(item.image_id, item.wnid, best_ious(item.boxes, found), len(found)))
    return images, [rows[position] for position in sorted(rows)]


@dataclass
class ChunkResult:
    """What one chunk gave: its images' IoUs, its error rows (in item order) and the provenance of
    the detector that ran it."""

    images: list[ImageIoU]
    rows: list[Issue]
    info: dict


_detectors: dict[tuple[str, Any], Detector] = {}


def cached_detector(name: str, config: Any) -> Detector:
    """The registry's detector `name` built from `config`, once per process (a worker reuses it
    for every chunk; a forked worker inherits the parent's)."""
    from builder.backends import make_backend

    key = (name, config)
    if key not in _detectors:
        _detectors[key] = make_backend("detector", name, config)
    return _detectors[key]


def forget_detectors() -> None:
    """Drop this process's detectors, before workers that build their own (on their GPUs)."""
    _detectors.clear()


@dataclass(frozen=True)
class DetectionJob:
    """Re-detects one chunk of batches; picklable (a frozen config and two numbers), so worker
    processes and Ray actors run it, each building its detector once."""

    detector_name: str
    config: Any  # the detector's frozen config (builder.backends)
    box_threshold: float = DEFAULT_BOX_THRESHOLD
    text_threshold: float = DEFAULT_TEXT_THRESHOLD

    def detector(self) -> Detector:
        return cached_detector(self.detector_name, self.config)

    def __call__(self, chunk: Sequence[Sequence[DetectionItem]]) -> ChunkResult:
        use_stage_threads()  # the run's thread count in any worker: the detector's sums depend on it
        detector = self.detector()
        images: list[ImageIoU] = []
        rows: list[Issue] = []
        for batch in chunk:
            found, left_out = detect_batch(batch, detector, self.box_threshold, self.text_threshold)
            images += found
            rows += left_out
        return ChunkResult(images, rows, detector_provenance(detector.info()))


def report_info(provenance: dict, box_threshold: float, text_threshold: float, batch_size: int) -> dict:
    return {
        **provenance,
        "box_threshold": box_threshold,
        "text_threshold": text_threshold,
        "batch_size": batch_size,
        # every worker's intra-op threads (the scores do not depend on --workers), device type and precision
        "torch": threads_setting(
            device_type_named(provenance["device"]) if provenance.get("device") else None, provenance.get("precision")
        ),
    }


def merge_chunks(
    results: Sequence[ChunkResult], provenance: dict, *, batch_size: int, iou_threshold: float, job: DetectionJob
) -> DetectionReport:
    """The report of chunks re-detected anywhere, merged in chunk order. The provenance is the first
    chunk's worker's (its device), else `provenance` (the driver's: no image had boxes)."""
    if results:
        provenance = results[0].info
    report = DetectionReport(
        sorted((image for result in results for image in result.images), key=lambda image: image.image_id),
        report_info(provenance, job.box_threshold, job.text_threshold, batch_size),
        iou_threshold,
        sorted((row for result in results for row in result.rows), key=lambda row: row.image_id),
    )
    check_detector_worked(report)
    return report


class DetectorFailed(RunFailed):
    """The detector failed on every image it was given: a broken backend, not bad images."""


def check_detector_worked(report: DetectionReport) -> None:
    failed = [row for row in report.unreadable if row.reason == "backend-failed"]
    if failed and not report.images:
        raise DetectorFailed(
            f"the detector failed on every one of the {len(failed)} images it was given; first error "
            f"({failed[0].image_id}): {failed[0].detail}"
        )


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
    """Run the detector over `items` in batches, in this process, and collect per-box best IoUs
    (the same report `DetectionJob` gives over chunks in workers)."""
    report = DetectionReport(
        [], report_info(detector_provenance(detector.info()), box_threshold, text_threshold, batch_size), iou_threshold
    )
    for batch in detection_batches(items, batch_size):
        images, rows = detect_batch(batch, detector, box_threshold, text_threshold)
        report.images += images
        report.unreadable += rows
        if progress:
            progress(len(batch))
    report.images.sort(key=lambda i: i.image_id)
    report.unreadable.sort(key=lambda row: row.image_id)  # by image, as the images: not by aspect group
    check_detector_worked(report)
    return report


def items_from_sources(records, limit: int | None = None, split: str | None = None) -> list[DetectionItem]:
    """Detection items for `builder.sources` records (their files are decoded when batched)."""
    chosen = sorted(records, key=lambda r: r.image_id)[: limit or None]
    return [DetectionItem(r.image_id, r.wnid, tuple(r.boxes), file_loader(r.path), split) for r in chosen]


def file_loader(path: str) -> FileImage:
    """A loader that decodes `path` as extract decodes it."""
    return FileImage(str(path))


def missing_loader(image_id: str) -> MissingImage:
    """A loader for an image that is not under --source."""
    return MissingImage(image_id)


@dataclass(frozen=True)
class FileImage:
    """Decodes a source file as extract decodes it; a file it refuses raises `ImageUnavailable` with
    its reason. A plain value, so items travel to worker processes and Ray actors."""

    path: str

    def __call__(self) -> np.ndarray:
        from builder.extract.images import ImageDecodeError, decode_image

        try:
            return decode_image(Path(self.path)).rgb
        except ImageDecodeError as exc:
            raise ImageUnavailable(exc.reason, exc.detail) from None

    def size(self) -> tuple[int, int] | None:
        """(width, height) from the file's header, as the decoder will see it (it applies no EXIF
        rotation); None when the header does not read (the decode then reports why)."""
        import warnings

        from PIL import Image

        try:
            with warnings.catch_warnings():  # a huge image is the decoder's to refuse, with its reason
                warnings.simplefilter("ignore")
                with Image.open(self.path) as image:
                    return image.size
        except Exception:  # noqa: BLE001 - any unreadable header: the image's group is "unknown"
            return None


@dataclass(frozen=True)
class MissingImage:
    """An image to re-detect that is not under --source: loading it raises `image-not-found`."""

    image_id: str

    def __call__(self) -> np.ndarray:
        raise ImageUnavailable("image-not-found", f"{self.image_id} is not under --source")
