"""The extract stage: per source image, cut the object out, erase every box and inpaint the hole.

Work is planned as shards of source images sorted by id. A shard builder decodes its images, asks
the masker for one mask per box and the inpainter for a background, in batches, and writes one
parts sample per usable image (see `builder.parts`). Bad images become issue rows, never crashes.
"""

from __future__ import annotations

import json
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterator, Sequence

import cv2
import numpy as np

from builder import __version__
from builder.backends import BackendUnavailable, Inpainter, Masker, backend_config, make_backend
from builder.core.classes import class_of
from builder.core.errors import RunFailed
from builder.core.config import ConfigError, fingerprint
from builder.extract.images import DEFAULT_MAX_PIXELS, ImageDecodeError, decode_image
from builder.compose.backgrounds import canvas_background
from builder.formats.parts import PARTS_CANVAS_FILTER, PARTS_CANVAS_SIZE, PARTS_SCHEMA_VERSION
from builder.formats.parts import encode_parts_members, parts_metadata
from builder.core.records import Box, Issue, SourceImage
from builder.core.runner import ShardPlan, ShardResult, report_progress
from builder.core.shards import write_shard

OBJECT_BOX_RULES = ("largest", "first", "last")


@dataclass(frozen=True)
class ExtractConfig:
    """Everything that decides the bytes of the parts shards, plus how to run (device, workers)."""

    split: str = "val"
    masker: str = "box"
    inpainter: str = "telea"
    dilation: int = 15  # side of the square dilation kernel; 15 is the paper's; 0 or 1 disables
    object_box: str = "largest"
    shard_size: int = 256
    batch_size: int = 8
    io_threads: int = 4  # threads decoding JPEGs ahead and encoding PNGs behind the models (not in the output)
    max_pixels: int = DEFAULT_MAX_PIXELS
    # backend knobs, flat as the flags and YAML give them; each backend reads its own into its config
    # (`masker_config`, `inpainter_config`); paths are inputs, their sha256 is what is recorded
    telea_radius: int = 3
    sam_model: str = "vit_h"
    sam_checkpoint: str | None = None
    lama_checkpoint: str | None = None
    device: str = "auto"

    def __post_init__(self) -> None:
        if self.object_box not in OBJECT_BOX_RULES:
            raise ConfigError(f"--object-box must be one of {', '.join(OBJECT_BOX_RULES)}, got {self.object_box!r}")
        if self.dilation < 0:
            raise ConfigError(f"--dilation must be 0 (off) or a positive kernel side, got {self.dilation}")
        for name in ("shard_size", "batch_size", "max_pixels", "io_threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")

    def masker_config(self):
        """The chosen masker's own config (e.g. SamConfig), read from these settings."""
        return backend_config("masker", self.masker, self)

    def inpainter_config(self):
        """The chosen inpainter's own config (e.g. LamaConfig), read from these settings."""
        return backend_config("inpainter", self.inpainter, self)

    def output_settings(self, backends: dict, listing_digest: str) -> dict:
        """The settings that decide the output bytes: saved beside the output, fingerprinted."""
        return {
            "stage": "extract",
            "split": self.split,
            "dilation": self.dilation,
            "object_box": self.object_box,
            "shard_size": self.shard_size,
            "max_pixels": self.max_pixels,
            "backends": backends,
            "sources": listing_digest,
            "parts_schema_version": PARTS_SCHEMA_VERSION,
        }


def dilate(mask: np.ndarray, kernel_side: int) -> np.ndarray:
    """Grow a boolean mask by a square kernel (the paper dilates SAM masks by 15 x 15)."""
    if kernel_side <= 1 or not mask.any():
        return mask.copy()
    kernel = np.ones((kernel_side, kernel_side), dtype=np.uint8)
    return cv2.dilate(mask.astype(np.uint8), kernel) > 0


def choose_object_box(boxes: Sequence[Box], label_wnid: str, rule: str) -> int:
    """Index of the box to paste later: among boxes of the image's own class, by `rule`."""
    candidates = [i for i, box in enumerate(boxes) if box.wnid == label_wnid] or list(range(len(boxes)))
    if rule == "first":
        return candidates[0]
    if rule == "last":
        return candidates[-1]
    return max(candidates, key=lambda i: (boxes[i].area, -i))  # largest; ties go to the first


def clip_boxes(record: SourceImage, width: int, height: int) -> tuple[list[Box], list[Issue]]:
    kept, issues = [], []
    for box in record.boxes:
        clipped = box.clipped(width, height)
        if clipped.is_empty:
            issues.append(Issue(record.image_id, "box-empty", f"{box.as_list()} is empty inside the {width}x{height} image", "extract"))
            continue
        if clipped != box:
            issues.append(Issue(record.image_id, "box-outside-image", f"{box.as_list()} clipped to {clipped.as_list()} ({width}x{height})", "extract"))
        kept.append(clipped)
    return kept, issues


def parts_metadata_of(record: SourceImage, image: np.ndarray, boxes: list[Box], object_index: int,
                   conversions: list[str], config: ExtractConfig, backends: dict) -> dict:
    cls = class_of(record.wnid)
    height, width = image.shape[:2]
    return parts_metadata(
        source_id=record.image_id, wnid=record.wnid, class_index=cls.index, class_name=cls.name,
        width=width, height=height, boxes=boxes, object_box_index=object_index,
        object_box_rule=config.object_box, conversions=conversions,
        provenance={"backends": backends, "dilation": config.dilation, "tool_version": __version__},
    )


@dataclass
class _Decoded:
    record: SourceImage
    image: np.ndarray
    boxes: list[Box]
    conversions: list[str] = field(default_factory=list)


# Backends are built once per process (models are large and are not pickled to workers).
_backend_cache: dict[tuple, tuple[Masker, Inpainter]] = {}


def load_backends(config: ExtractConfig) -> tuple[Masker, Inpainter]:
    masker_config, inpainter_config = config.masker_config(), config.inpainter_config()
    key = (config.masker, masker_config, config.inpainter, inpainter_config)
    if key not in _backend_cache:
        _backend_cache[key] = (make_backend("masker", config.masker, masker_config),
                               make_backend("inpainter", config.inpainter, inpainter_config))
    return _backend_cache[key]


def unload_backends() -> None:
    """Drop this process's models, e.g. before worker processes load their own on their GPUs."""
    _backend_cache.clear()
    torch = sys.modules.get("torch")  # a process that never imported torch holds no GPU memory
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def describe_backends(masker: Masker, inpainter: Inpainter) -> dict:
    return {"masker": masker.info().to_json(), "inpainter": inpainter.info().to_json()}


@dataclass
class RawParts:
    """The arrays of one parts sample before encoding (encoding runs in I/O threads)."""

    key: str
    crop: np.ndarray
    mask: np.ndarray
    background: np.ndarray
    erase: np.ndarray
    meta: dict


def extract_batch(decoded: list[_Decoded], masker: Masker, inpainter: Inpainter, config: ExtractConfig,
                  backends: dict) -> list[RawParts]:
    """Masks, erase masks and inpainted backgrounds for a batch of decoded images."""
    masks = masker.masks_batch([d.image for d in decoded], [d.boxes for d in decoded])
    erase_masks = []
    for item, box_masks in zip(decoded, masks):
        union = np.zeros(item.image.shape[:2], dtype=bool)
        for mask in box_masks:
            union |= mask
        erase_masks.append(dilate(union, config.dilation))
    backgrounds = inpainter.inpaint_batch([d.image for d in decoded], erase_masks)
    raw = []
    for item, box_masks, erase, background in zip(decoded, masks, erase_masks, backgrounds):
        index = choose_object_box(item.boxes, item.record.wnid, config.object_box)
        box = item.boxes[index]
        window = (slice(box.y0, box.y1 + 1), slice(box.x0, box.x1 + 1))
        meta = parts_metadata_of(item.record, item.image, item.boxes, index, item.conversions, config, backends)
        raw.append(RawParts(item.record.image_id, np.ascontiguousarray(item.image[window]),
                             box_masks[index][window], background, erase, meta))
    return raw


class BackendFailure(RunFailed):
    """Every image of a shard failed in the masker or inpainter: a broken backend, not bad images."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nFinished shards are kept: fix the backend and run the same command to resume."


def extract_images(decoded: list[_Decoded], masker: Masker, inpainter: Inpainter, config: ExtractConfig,
                   backends: dict, issues: list[Issue]) -> tuple[list[RawParts], Exception | None]:
    """`extract_batch`, except that an image the backends fail on becomes a `backend-failed` issue:
    after a failed batch each image is tried on its own (results never depend on batch company),
    so the same images fail whatever the batch size. Returns the parts and the first failure."""
    try:
        return extract_batch(decoded, masker, inpainter, config, backends), None
    except BackendUnavailable:
        raise
    except Exception:  # noqa: BLE001 - narrowed below, image by image
        if len(decoded) == 1:
            return _extract_alone(decoded[0], masker, inpainter, config, backends, issues)
    raw, first_failure = [], None
    for item in decoded:
        parts, failure = _extract_alone(item, masker, inpainter, config, backends, issues)
        raw.extend(parts)
        first_failure = first_failure or failure
    return raw, first_failure


def _extract_alone(item: _Decoded, masker: Masker, inpainter: Inpainter, config: ExtractConfig, backends: dict,
                   issues: list[Issue]) -> tuple[list[RawParts], Exception | None]:
    try:
        return extract_batch([item], masker, inpainter, config, backends), None
    except BackendUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded as data; a shard where all fail is raised
        issues.append(Issue(item.record.image_id, "backend-failed", f"{type(exc).__name__}: {str(exc)[:300]}", "extract"))
        return [], exc


def encode_parts(raw: RawParts) -> tuple[str, dict[str, bytes]]:
    canvas = canvas_background(raw.background, PARTS_CANVAS_SIZE, PARTS_CANVAS_FILTER)
    return raw.key, encode_parts_members(raw.crop, raw.mask, raw.background, raw.erase, canvas, raw.meta)


@dataclass(frozen=True)
class ExtractShardBuilder:
    """Builds one parts shard; picklable, so worker processes and Ray actors can run it."""

    config: ExtractConfig
    out_dir: str

    def decode(self, record: SourceImage) -> tuple[_Decoded | None, list[Issue]]:
        issues: list[Issue] = []
        try:
            decoded = decode_image(Path(record.path), self.config.max_pixels)
        except ImageDecodeError as exc:
            return None, [Issue(record.image_id, exc.reason, exc.detail, "extract")]
        height, width = decoded.rgb.shape[:2]
        for reason, detail in decoded.notes:
            issues.append(Issue(record.image_id, reason, detail, "extract"))
        boxes, box_issues = clip_boxes(record, width, height)
        issues.extend(box_issues)
        if not boxes:
            issues.append(Issue(record.image_id, "no-valid-box", "no box is left inside the image", "extract"))
            return None, issues
        return _Decoded(record, decoded.rgb, boxes, [reason for reason, _ in decoded.notes]), issues

    def decoded_batches(self, pool: ThreadPoolExecutor, records: Sequence[SourceImage]) -> Iterator[list]:
        """Batches of (decoded, issues) in record order, decoded in I/O threads up to two batches
        ahead, so the models (on a GPU) do not wait for JPEG decoding. Pillow releases the GIL."""
        size = self.config.batch_size
        ahead: deque = deque(pool.submit(self.decode, r) for r in records[: 2 * size])
        upcoming = iter(records[2 * size :])
        batch = []
        while ahead:
            batch.append(ahead.popleft().result())
            following = next(upcoming, None)
            if following is not None:
                ahead.append(pool.submit(self.decode, following))
            if len(batch) == size or not ahead:
                yield batch
                batch = []

    def __call__(self, plan: ShardPlan) -> ShardResult:
        masker, inpainter = load_backends(self.config)
        backends = describe_backends(masker, inpainter)
        issues: list[Issue] = []
        encoded = []
        attempted, first_failure = 0, None
        with ThreadPoolExecutor(max_workers=self.config.io_threads) as pool:
            for batch in self.decoded_batches(pool, plan.items):
                for _, found in batch:
                    issues.extend(found)
                decoded = [item for item, _ in batch if item is not None]
                if decoded:
                    raw, failure = extract_images(decoded, masker, inpainter, self.config, backends, issues)
                    attempted, first_failure = attempted + len(decoded), first_failure or failure
                    encoded.extend(pool.submit(encode_parts, r) for r in raw)  # PNG encoding overlaps the next batch
                report_progress(len(batch))
            samples = [future.result() for future in encoded]
        if attempted and not samples and first_failure is not None:
            raise BackendFailure(
                f"every one of the {attempted} decoded images of {plan.filename} failed in the masker or inpainter "
                f"({masker.info().name} / {inpainter.info().name}); first error: {first_failure!r}"
            ) from first_failure
        stats = write_shard(Path(self.out_dir) / plan.filename, samples)
        issues.sort(key=lambda issue: issue.sort_key)
        return ShardResult(stats, issues, {"images": len(plan.items), "samples": len(samples)})


def config_from_mapping(values: dict) -> ExtractConfig:
    known = {f for f in ExtractConfig.__dataclass_fields__}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown extract settings {unknown}; known: {sorted(known)}")
    return ExtractConfig(**values)


def with_overrides(config: ExtractConfig, overrides: dict) -> ExtractConfig:
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})


def listing_digest(records: Sequence[SourceImage]) -> str:
    """A fingerprint of what is extracted: ids, labels and boxes (not paths, so layouts agree)."""
    return fingerprint({"records": [[r.image_id, r.wnid, [asdict(b) for b in r.boxes]] for r in records]})
