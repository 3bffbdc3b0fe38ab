"""The extract stage: per source image, cut the object out, erase every box and inpaint the hole.

Work is planned as shards of source images sorted by id. A shard builder decodes its images, asks
the masker for one mask per box and the inpainter for a background, in batches, and writes one
parts sample per usable image (see `builder.parts`). Bad images become issue rows, never crashes.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import cv2
import numpy as np

from builder import __version__
from builder.backends import BackendUnavailable, Inpainter, Masker, backend_config, make_backend
from builder.backends.base import InpaintFallback
from builder.backends.code_trust import CodeTrust
from builder.backends.registry import SETTING
from builder.backends.torch_base import PRECISIONS
from builder.backends.torch_threads import runs_torch, use_stage_threads
from builder.core.config import ConfigError, fingerprint
from builder.core.errors import RunFailed
from builder.core.imaging import canvas_background
from builder.core.records import Box, Issue, SourceImage
from builder.core.runner import ShardPlan, ShardResult, report_progress
from builder.core.shard_partial import KeptSample, PartialWriter, drop_partials, kept_samples, shards_with_partials
from builder.core.shard_write import ShardWriter, sample_blocks
from builder.extract.images import DEFAULT_MAX_PIXELS, ImageDecodeError, decode_image
from builder.formats.fill_scores import canvas_mask, score_fill
from builder.formats.parts import (
    BACKGROUND_NONE,
    BACKGROUND_OWN,
    PARTS_CANVAS_FILTER,
    PARTS_CANVAS_SIZE,
    PARTS_SCHEMA_VERSION,
    encode_parts_members,
    parts_metadata,
)

OBJECT_BOX_RULES = ("largest", "first", "last")
# A split names files and folders (`parts/<split>-NNNNN.tar`): one safe path component.
SPLIT_NAME = re.compile(r"[A-Za-z0-9_-]+")
# Pixels of the images one masker/inpainter call gets together: 16 images of 49 Mpx in one batch
# took 6.1 GB; 50 Mpx keeps a batch near 150 MB of RGB whatever the images, and any ImageNet batch of
# 8 typical photos (about 0.2 Mpx each) far below it. A larger image still runs, alone.
DEFAULT_BATCH_PIXELS = 50_000_000
# Boxes per masker call: the masker returns one full-image mask per box, so an image with 10,000
# boxes held 10,000 masks at once; in chunks, memory stays at this many masks plus the union.
MASK_BOXES_PER_CALL = 32


@dataclass(frozen=True)
class ExtractConfig:
    """Everything that decides the bytes of the parts shards, plus how to run (device, workers)."""

    split: str = "val"
    masker: str = "box"
    inpainter: str = "patchmatch"  # model-free texture fills; telea is faster, lama needs its file
    dilation: int = 15  # side of the square dilation kernel; 15 is the paper's; 0 or 1 disables
    object_box: str = "largest"
    # pixels of context stored around the object box in crop.png (the json's crop_box says where);
    # 1 holds what compose --paper-exact needs (the paper's float32 boxes start up to a pixel left/above)
    crop_margin: int = 0
    shard_size: int = 256
    batch_size: int = 8
    batch_pixels: int = DEFAULT_BATCH_PIXELS  # bounds a batch by its pixels too (not in the output)
    max_skip_fraction: float = 0.5  # stop when more of the listed images are skipped (not in the output)
    io_threads: int = 4  # threads decoding JPEGs ahead and encoding PNGs behind the models (not in the output)
    max_pixels: int = DEFAULT_MAX_PIXELS
    # backend knobs, flat as the flags and YAML give them; each backend reads its own into its config
    # (`masker_config`, `inpainter_config`); paths are inputs, their sha256 is what is recorded
    telea_radius: int = 3
    # patchmatch: the scale it fills at (None: its default, canvas; see builder.backends.patchmatch),
    # its patch side and the least share of source pixels it fills from (else Telea, recorded)
    inpaint_scale: str | int | None = None
    patchmatch_patch_size: int | None = None
    patchmatch_min_source: float | None = None
    sam_model: str = "vit_h"
    sam_checkpoint: str | None = None
    lama_checkpoint: str | None = None
    # TorchScript files (big-lama) trusted to run their code: by sha256 (--trust-file, the config's
    # list), or any with --trust-code, which a config file cannot set (not in the output)
    trusted_sha256: tuple[str, ...] = ()
    trust_code: bool = False
    device: str = "auto"
    # the models' math (bf16, tf32, fp32; None: bf16 on CUDA, fp32 on the CPU) and whether SAM's
    # encoder is compiled (speed only); extract pins the precision before anything loads
    precision: str | None = None
    compile_encoder: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.trusted_sha256, str) or not isinstance(self.trusted_sha256, (list, tuple)):
            raise ConfigError(f"trusted_sha256 takes a list of sha256s, got {self.trusted_sha256!r}")
        trusted = CodeTrust.of(self.trusted_sha256, where="trusted_sha256 (--trust-file)").sha256s
        object.__setattr__(self, "trusted_sha256", tuple(sorted(trusted)))
        if self.precision is not None and self.precision not in PRECISIONS:
            raise ConfigError(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.object_box not in OBJECT_BOX_RULES:
            raise ConfigError(f"--object-box must be one of {', '.join(OBJECT_BOX_RULES)}, got {self.object_box!r}")
        if self.dilation < 0:
            raise ConfigError(f"--dilation must be 0 (off) or a positive kernel side, got {self.dilation}")
        if not isinstance(self.crop_margin, int) or isinstance(self.crop_margin, bool) or self.crop_margin < 0:
            raise ConfigError(f"--crop-margin must be a whole number of pixels, 0 or more, got {self.crop_margin!r}")
        for name in ("shard_size", "batch_size", "batch_pixels", "max_pixels", "io_threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if not isinstance(self.split, str) or not SPLIT_NAME.fullmatch(self.split):
            raise ConfigError(
                f"--split must be one name of letters, digits, '_' or '-' (train, val), "
                f"got {self.split!r}: it names the shards inside parts/"
            )
        if not (
            isinstance(self.max_skip_fraction, (int, float))
            and math.isfinite(self.max_skip_fraction)
            and 0 <= self.max_skip_fraction <= 1
        ):
            raise ConfigError(f"--max-skip-fraction must be a number from 0 to 1, got {self.max_skip_fraction!r}")

    def masker_config(self):
        """The chosen masker's own config (e.g. SamConfig), read from these settings."""
        return backend_config("masker", self.masker, self)

    def inpainter_config(self):
        """The chosen inpainter's own config (e.g. LamaConfig), read from these settings. A scale
        given to an inpainter that has none is refused: it would change nothing, silently."""
        config = backend_config("inpainter", self.inpainter, self)
        if self.inpaint_scale is not None and not any(
            f.metadata.get(SETTING) == "inpaint_scale" for f in dataclasses.fields(config)
        ):
            raise ConfigError(
                f"--inpaint-scale applies to the patchmatch inpainter; {self.inpainter} fills at full resolution"
            )
        return config

    def output_settings(self, backends: dict, listing_digest: str) -> dict:
        """The settings that decide the output bytes: saved beside the output, fingerprinted."""
        settings = {
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
        if self.crop_margin:  # absent at 0: parts built without a margin keep their fingerprint
            settings["crop_margin"] = self.crop_margin
        return settings

    def crop_region(self, box: Box, width: int, height: int) -> tuple[int, int, int, int]:
        """The image region stored as crop.png (inclusive corners): the box grown by the crop
        margin on each side, clipped to the image."""
        m = self.crop_margin
        return max(0, box.x0 - m), max(0, box.y0 - m), min(width - 1, box.x1 + m), min(height - 1, box.y1 + m)


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
        # a box wholly outside would clip to a one-pixel sliver on the border (inclusive corners)
        outside = box.x0 >= width or box.y0 >= height or box.x1 < 0 or box.y1 < 0
        if clipped.is_empty or outside:
            issues.append(
                Issue(
                    record.image_id,
                    "box-empty",
                    f"{box.as_list()} is empty inside the {width}x{height} image",
                    "extract",
                )
            )
            continue
        if clipped != box:
            issues.append(
                Issue(
                    record.image_id,
                    "box-outside-image",
                    f"{box.as_list()} clipped to {clipped.as_list()} ({width}x{height})",
                    "extract",
                )
            )
        kept.append(clipped)
    return kept, issues


def parts_metadata_of(
    record: SourceImage,
    image: np.ndarray,
    boxes: list[Box],
    object_index: int,
    conversions: list[str],
    config: ExtractConfig,
    backends: dict,
    fallback: InpaintFallback | None = None,
    background_status: str = BACKGROUND_OWN,
) -> dict:
    height, width = image.shape[:2]
    crop_box = config.crop_region(boxes[object_index], width, height) if config.crop_margin else None
    provenance = {"backends": backends, "dilation": config.dilation, "tool_version": __version__}
    if fallback is not None:  # absent otherwise: parts filled by their own inpainter keep their bytes
        provenance["inpaint_fallback"] = fallback.to_json()
    return parts_metadata(
        crop_box=crop_box,
        source_id=record.image_id,
        wnid=record.wnid,
        width=width,
        height=height,
        boxes=boxes,
        object_box_index=object_index,
        object_box_rule=config.object_box,
        conversions=conversions,
        provenance=provenance,
        background_status=background_status,
    )


NO_BACKGROUND_DETAIL = (
    "the erase mask covers the whole photo: nothing of its own is left to fill from; kept with "
    'background_status "none" (compose takes it as no foreign background unless its spec says so)'
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
        _backend_cache[key] = (
            make_backend("masker", config.masker, masker_config),
            make_backend("inpainter", config.inpainter, inpainter_config),
        )
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
    notes: list[Issue] = field(default_factory=list)  # rows of a kept image (an inpainter's fallback)
    fill: np.ndarray | None = None  # the pixels replaced (None: the erase mask)
    canvas: np.ndarray | None = None  # the fill as made at canvas scale (None: the background resized)
    canvas_fill: np.ndarray | None = None  # the pixels it replaced on the canvas (with `canvas`)


def extract_batch(
    decoded: list[_Decoded], masker: Masker, inpainter: Inpainter, config: ExtractConfig, backends: dict
) -> list[RawParts]:
    """Masks, erase masks and inpainted backgrounds for a batch of decoded images."""
    indexes = [choose_object_box(d.boxes, d.record.wnid, config.object_box) for d in decoded]
    regions = [config.crop_region(d.boxes[i], d.image.shape[1], d.image.shape[0]) for d, i in zip(decoded, indexes)]
    unions, object_masks = union_masks(decoded, indexes, masker, regions)
    erase_masks = [dilate(union, config.dilation) for union in unions]
    del unions
    fills = inpainter.fill_images([d.image for d in decoded], erase_masks, [d.record.image_id for d in decoded])
    raw = []
    for item, index, region, object_mask, erase, filled in zip(
        decoded, indexes, regions, object_masks, erase_masks, fills, strict=True
    ):
        fallback = filled.fallback
        x0, y0, x1, y1 = region  # the object box, or the box and its margin
        window = (slice(y0, y1 + 1), slice(x0, x1 + 1))
        # nothing of the photo outside the erase mask: a fill made from nothing, said so (#46)
        status = BACKGROUND_NONE if erase.all() else BACKGROUND_OWN
        meta = parts_metadata_of(
            item.record, item.image, item.boxes, index, item.conversions, config, backends, fallback, status
        )
        if status == BACKGROUND_NONE:
            notes = [Issue(item.record.image_id, "no-background", NO_BACKGROUND_DETAIL, "extract")]
        elif fallback is not None:
            notes = [Issue(item.record.image_id, fallback.reason, fallback.detail, "extract")]
        else:
            notes = []
        raw.append(
            RawParts(
                item.record.image_id,
                np.ascontiguousarray(item.image[window]),
                object_mask,
                filled.background,
                erase,
                meta,
                notes,
                filled.replaced,
                filled.canvas,
                filled.canvas_replaced,
            )
        )
    return raw


def union_masks(
    decoded: list[_Decoded], indexes: list[int], masker: Masker, regions: list[tuple[int, int, int, int]]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per image, the union of its box masks and the object box's mask cut to its crop region
    (`regions`, inclusive corners: the box, or the box and its margin), built as the
    masks arrive: images with few boxes share one masker call (as before), an image with more than
    `MASK_BOXES_PER_CALL` boxes gets one call per chunk, so no call returns more masks than that."""
    unions = [np.zeros(d.image.shape[:2], dtype=bool) for d in decoded]
    object_masks: list[np.ndarray | None] = [None] * len(decoded)

    def take(i: int, first: int, masks: list[np.ndarray]) -> None:
        for offset, mask in enumerate(masks):
            unions[i] |= mask
            if first + offset == indexes[i]:
                x0, y0, x1, y1 = regions[i]
                object_masks[i] = mask[y0 : y1 + 1, x0 : x1 + 1].copy()

    few = [i for i, d in enumerate(decoded) if len(d.boxes) <= MASK_BOXES_PER_CALL]
    if few:
        batch = masker.masks_batch([decoded[i].image for i in few], [decoded[i].boxes for i in few])
        for i, masks in zip(few, batch, strict=True):
            take(i, 0, masks)
    for i, item in enumerate(decoded):
        if len(item.boxes) <= MASK_BOXES_PER_CALL:
            continue
        for first in range(0, len(item.boxes), MASK_BOXES_PER_CALL):
            chunk = list(item.boxes[first : first + MASK_BOXES_PER_CALL])
            take(i, first, masker.masks_batch([item.image], [chunk])[0])
    return unions, object_masks  # type: ignore[return-value]


class BackendFailure(RunFailed):
    """Every image of a shard failed in the masker or inpainter: a broken backend, not bad images."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nFinished shards are kept: fix the backend and run the same command to resume."


def extract_images(
    decoded: list[_Decoded],
    masker: Masker,
    inpainter: Inpainter,
    config: ExtractConfig,
    backends: dict,
    issues: list[Issue],
) -> tuple[list[RawParts], Exception | None]:
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


def _extract_alone(
    item: _Decoded, masker: Masker, inpainter: Inpainter, config: ExtractConfig, backends: dict, issues: list[Issue]
) -> tuple[list[RawParts], Exception | None]:
    try:
        return extract_batch([item], masker, inpainter, config, backends), None
    except BackendUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded as data; a shard where all fail is raised
        issues.append(
            Issue(item.record.image_id, "backend-failed", f"{type(exc).__name__}: {str(exc)[:300]}", "extract")
        )
        return [], exc


def encode_parts(raw: RawParts) -> tuple[str, dict[str, bytes]]:
    """The members of one part; its fill is scored here, on the canvas, in an I/O thread."""
    fill = raw.erase if raw.fill is None else raw.fill
    canvas, canvas_fill = raw.canvas, raw.canvas_fill
    if canvas is None or canvas_fill is None:
        canvas = canvas_background(raw.background, PARTS_CANVAS_SIZE, PARTS_CANVAS_FILTER)
        canvas_fill = canvas_mask(fill, PARTS_CANVAS_SIZE)
    scores = score_fill(canvas, canvas_fill)
    meta = {**raw.meta, "fill_scores": None if scores is None else scores.to_json()}
    return raw.key, encode_parts_members(raw.crop, raw.mask, raw.background, raw.erase, canvas, meta, fill)


def encode_sample(raw: RawParts) -> tuple[str, bytes]:
    """`encode_parts` as a shard holds it: the key and its tar members, in one piece."""
    key, members = encode_parts(raw)
    return key, sample_blocks(key, members)


@dataclass(frozen=True)
class ExtractShardBuilder:
    """Builds one parts shard; picklable, so worker processes and Ray actors can run it."""

    config: ExtractConfig
    out_dir: str
    # the split's settings fingerprint: images an interrupted run kept under other settings are not reused
    fingerprint: str = ""

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
        ahead, so the models (on a GPU) do not wait for JPEG decoding. Pillow releases the GIL.
        A batch holds at most `batch_size` images and `batch_pixels` pixels (one larger image runs
        alone); decoding ahead stops while the decoded images waiting hold `batch_pixels` pixels."""
        size, budget = self.config.batch_size, self.config.batch_pixels
        upcoming = iter(records)
        ahead: deque = deque()

        def top_up() -> None:
            while len(ahead) < 2 * size:
                if ahead and sum(_pixels(f.result()) for f in ahead if f.done()) >= budget:
                    return
                following = next(upcoming, None)
                if following is None:
                    return
                ahead.append(pool.submit(self.decode, following))

        batch, pixels = [], 0
        top_up()
        while ahead:
            item = ahead.popleft().result()
            if batch and pixels + _pixels(item) > budget:
                yield batch
                batch, pixels = [], 0
            batch.append(item)
            pixels += _pixels(item)
            top_up()
            if len(batch) == size or not ahead:
                yield batch
                batch, pixels = [], 0

    def finished_items(self, plans: Sequence[ShardPlan]) -> list[frozenset[int]]:
        """The images of each plan an interrupted run kept (one listing of `_state/` for them all)."""
        begun = shards_with_partials(Path(self.out_dir))
        return [frozenset(self.kept(plan)) if plan.filename in begun else frozenset() for plan in plans]

    def kept(self, plan: ShardPlan) -> dict[int, KeptSample]:
        """The images of the shard an interrupted run finished (kept under these very settings)."""
        ids = [record.image_id for record in plan.items]
        return kept_samples(Path(self.out_dir), plan.filename, ids, self.fingerprint, valid_info=outcome_info_ok)

    def __call__(self, plan: ShardPlan) -> ShardResult:
        kept = self.kept(plan)
        for start, stop in missing_runs(len(plan.items), kept):
            kept.update((sample.index, sample) for sample in self.build_items(plan, start, stop))
        return self.assemble(plan, kept)

    def build_items(self, plan: ShardPlan, start: int, stop: int) -> list[KeptSample]:
        """Extract images `start` to `stop` of the shard, each kept on disk as soon as it is encoded
        (in image order, the shard's key order), so an interrupt loses no finished image."""
        masker, inpainter = load_backends(self.config)
        if runs_torch(masker, inpainter):
            use_stage_threads()  # the run's thread count in any worker: SAM's and LaMa's sums depend on it
        backends = describe_backends(masker, inpainter)
        waiting: deque[_Outcome] = deque()  # every image in order; PNG encodes in flight
        kept: list[KeptSample] = []
        with (
            PartialWriter(Path(self.out_dir), plan.filename, start, self.fingerprint) as keeper,
            ThreadPoolExecutor(max_workers=self.config.io_threads) as pool,
        ):

            def keep_ready(keep: int) -> None:
                while len(waiting) > keep or (waiting and waiting[0].ready()):
                    outcome = waiting.popleft()
                    key, blocks = outcome.encoded.result() if outcome.encoded else (None, b"")
                    kept.append(keeper.append(outcome.image_id, key, blocks, outcome.info()))

            try:
                for outcomes in self.outcome_batches(plan, (start, stop), pool, (masker, inpainter), backends):
                    waiting.extend(outcomes)
                    # each waiting encode holds full-size arrays: let at most two batches wait
                    keep_ready(keep=2 * self.config.batch_size)
                    report_progress(len(outcomes))
            except BaseException:
                with suppress(Exception):  # Ctrl-C (or an error): keep the images finished before it
                    keep_ready(keep=0)
                raise
            keep_ready(keep=0)
        return kept

    def outcome_batches(
        self,
        plan: ShardPlan,
        span: tuple[int, int],
        pool: ThreadPoolExecutor,
        models: tuple[Masker, Inpainter],
        backends: dict,
    ) -> Iterator[list[_Outcome]]:
        """What becomes of each image of the shard's `span` (start, stop), batch by batch, in image
        order; PNG encoding (in `pool`) overlaps the next batch."""
        masker, inpainter = models
        position, stop = span
        for batch, following in with_next(self.decoded_batches(pool, plan.items[position:stop])):
            if following:  # the masker readies the next batch (upload, resize) while this one runs
                masker.prepare_ahead([item.image for item, _ in following if item is not None])
            decoded = [item for item, _ in batch if item is not None]
            failures: list[Issue] = []
            raw = extract_images(decoded, masker, inpainter, self.config, backends, failures)[0] if decoded else []
            made = {r.key: r for r in raw}
            outcomes = []
            for item, found in batch:
                image_id = plan.items[position].image_id
                parts = made.pop(image_id, None)
                failed = [issue for issue in failures if issue.image_id == image_id]
                outcomes.append(
                    _Outcome(
                        image_id,
                        [*found, *failed, *(parts.notes if parts else [])],
                        decoded=item is not None,
                        failed=bool(failed),
                        encoded=pool.submit(encode_sample, parts) if parts is not None else None,
                    )
                )
                position += 1
            del raw, made
            yield outcomes

    def assemble(self, plan: ShardPlan, kept: dict[int, KeptSample]) -> ShardResult:
        """The shard from its kept images, in image order: the bytes of an uninterrupted run."""
        issues: list[Issue] = []
        attempted = written = 0
        first_failure: str | None = None
        with ShardWriter(Path(self.out_dir) / plan.filename) as writer:
            for index in range(len(plan.items)):
                sample = kept[index]
                found = [Issue(**row) for row in sample.info["issues"]]
                issues += found
                attempted += bool(sample.info["decoded"])
                if sample.info["failed"] and first_failure is None:
                    first_failure = next(i.detail for i in found if i.reason == "backend-failed")
                if sample.key is not None:
                    writer.write_blocks(sample.key, sample.blocks())
                    written += 1
            if attempted and not written and first_failure is not None:
                drop_partials(Path(self.out_dir), plan.filename)  # fix the backend, and these images run again
                raise BackendFailure(
                    f"every one of the {attempted} decoded images of {plan.filename} failed in the masker or inpainter "
                    f"({self.config.masker} / {self.config.inpainter}); first error: {first_failure}"
                )
            stats = writer.close()
        issues.sort(key=lambda issue: issue.sort_key)
        return ShardResult(stats, issues, {"images": len(plan.items), "samples": written})


@dataclass
class _Outcome:
    """What became of one image of a shard, waiting (for its PNG encode) to be kept in order."""

    image_id: str
    issues: list[Issue]
    decoded: bool
    failed: bool  # the masker or inpainter failed on it
    encoded: Future | None  # its (key, tar blocks); None: no sample

    def ready(self) -> bool:
        return self.encoded is None or self.encoded.done()

    def info(self) -> dict:
        issues = sorted(self.issues, key=lambda issue: issue.sort_key)
        return {"issues": [issue.to_json() for issue in issues], "decoded": self.decoded, "failed": self.failed}


def outcome_info_ok(info: dict) -> bool:
    """Whether a kept image's JSON is one `_Outcome.info` wrote: its issue rows load as issues."""
    if set(info) != {"issues", "decoded", "failed"} or not isinstance(info["issues"], list):
        return False
    if not isinstance(info["decoded"], bool) or not isinstance(info["failed"], bool):
        return False
    try:
        issues = [Issue(**row) for row in info["issues"]]
    except (TypeError, ValueError):
        return False
    fields = [(i.image_id, i.reason, i.detail, i.stage, i.action) for i in issues]
    plain = all(isinstance(value, str) for row in fields for value in row)
    return plain and info["failed"] == any(i.reason == "backend-failed" for i in issues)


def missing_runs(count: int, kept: dict[int, KeptSample]) -> list[tuple[int, int]]:
    """The runs (start, stop) of the `count` items of a shard that are not kept, in order."""
    runs: list[tuple[int, int]] = []
    for index in range(count):
        if index in kept:
            continue
        if runs and runs[-1][1] == index:
            runs[-1] = (runs[-1][0], index + 1)
        else:
            runs.append((index, index + 1))
    return runs


def with_next(batches: Iterator[list]) -> Iterator[tuple[list, list | None]]:
    """Each batch with the one after it (None after the last): decoding stays two batches ahead."""
    current = next(batches, None)
    while current is not None:
        following = next(batches, None)
        yield current, following
        current = following


def config_from_mapping(values: dict) -> ExtractConfig:
    known = {f for f in ExtractConfig.__dataclass_fields__}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown extract settings {unknown}; known: {sorted(known)}")
    if "trust_code" in values:  # trusting every code file is the user's own word, never a file's
        raise ConfigError(
            "trust_code cannot be set in a config file: pass --trust-code on the command line, or list the sha256 "
            "of each TorchScript file you trust under trusted_sha256"
        )
    return ExtractConfig(**values)


def with_overrides(config: ExtractConfig, overrides: dict) -> ExtractConfig:
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})


def _pixels(item: tuple[_Decoded | None, list[Issue]]) -> int:
    decoded = item[0]
    return 0 if decoded is None else decoded.image.shape[0] * decoded.image.shape[1]


def listing_digest(records: Sequence[SourceImage]) -> str:
    """A fingerprint of what is extracted: ids, labels, boxes and each file's size (not paths, so
    layouts agree; not mtimes, so copies agree and builds stay byte-identical). The size is what
    changes when a truncated or broken download is replaced, so a repaired input is not mistaken
    for a finished one: the run is refused with a message to rebuild the split with --overwrite."""
    return fingerprint(
        {"records": [[r.image_id, r.wnid, [asdict(b) for b in r.boxes], _file_size(r.path)] for r in records]}
    )


def _file_size(path: str) -> int | None:
    try:
        return Path(path).stat().st_size
    except OSError:  # gone since listing: decoding will report it
        return None
