"""Compose's shard builder: one shard of source images -> composites. Each image's crop and the
backgrounds it needs (its own, a donor's) are read by offset or from the background cache, resized,
pasted and encoded, so a shard's bytes depend only on its plan and the seed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from builder.compose.background_cache import (
    has_stored_canvas,
    read_cached_background,
    read_canvas_background,
)
from builder.compose.backgrounds import DONOR_KINDS, gray_background, noise_background
from builder.compose.geometry import Placement, object_size, paste, place, resize_mask
from builder.compose.object_crop import PAPER_CROP_CLIPPED, PaperCropClipped, read_spec_object
from builder.compose.planning import ImageJob, planned_composites
from builder.compose.spec import VariantSpec
from builder.core.classes import class_of
from builder.core.imaging import resize_rgb
from builder.core.records import Issue
from builder.core.rng import sample_rng
from builder.core.runner import (
    ShardPlan,
    ShardResult,
    report_progress,
)
from builder.core.shard_write import write_shard
from builder.core.taxonomy import group_name, tier_of
from builder.formats.composites import (
    SCHEMA_VERSION,
    composite_members,
    count_composites,
    encode_jpeg_bgr,
    rgb_to_bgr,
    sample_key,
)
from builder.formats.parts import BACKGROUND_NONE, BACKGROUND_OWN
from builder.formats.parts_index import MemberReader, PartsRef

# --- the per-sample record ----------------------------------------------------------------------


@dataclass
class Cutout:
    """The object's crop (and its mask when only mask pixels are pasted), resized once per pasted
    box size: an image's O and R composites of one size share the resize."""

    crop: Image.Image  # as decoded: resized directly, never through an array copy
    mask: np.ndarray | None
    resize_filter: str
    resized: dict[tuple[int, int], tuple[np.ndarray, np.ndarray | None]] = field(default_factory=dict)

    @property
    def width(self) -> int:
        return self.crop.width

    @property
    def height(self) -> int:
        return self.crop.height

    def at(self, w: int, h: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The object at w x h, its channels in the canvases' order (BGR), and its mask."""
        if (w, h) not in self.resized:
            obj_mask = resize_mask(self.mask, w, h, self.resize_filter) if self.mask is not None else None
            self.resized[(w, h)] = (rgb_to_bgr(resize_rgb(self.crop, w, h, self.resize_filter)), obj_mask)
        return self.resized[(w, h)]


class Backdrop:
    """One background, its channels in the encoder's order (BGR), and a working copy: each
    composite is pasted into the copy, encoded, and the pasted window restored, so a composite
    costs no copy of the whole canvas."""

    def __init__(self, rgb: np.ndarray) -> None:
        self.base = rgb_to_bgr(rgb)
        self.work = self.base.copy()

    def render(self, obj: np.ndarray, placed: Placement, mask: np.ndarray | None, quality: int) -> bytes:
        paste(self.work, obj, placed, mask)
        try:
            return encode_jpeg_bgr(self.work, quality)
        finally:
            window = (slice(placed.y, placed.y + placed.h), slice(placed.x, placed.x + placed.w))
            self.work[window] = self.base[window]


ComposedSample = tuple[str, dict[str, bytes], dict]  # (key, members, metadata)
_NO_BACKGROUND = object()  # this kind's composites are dropped (the reason is already an issue)


def background_status_of(donor: PartsRef | None) -> str | None:
    """A composite's `background_status`: whether the part whose background it sits on had one of its
    own ("none": a fill made from nothing, #46), null on gray and noise."""
    if donor is None:
        return None
    return BACKGROUND_OWN if donor.has_background else BACKGROUND_NONE


@dataclass(frozen=True)
class ComposeShardBuilder:
    """Builds one composite shard; picklable, so worker processes can run it."""

    spec: VariantSpec
    parts_dir: str
    out_dir: str
    cache_dir: str | None = None  # canvas-sized backgrounds by (split, row); None: decode here
    cache_failures: tuple[tuple[str, str, str], ...] = ()  # (split, key, why) of donors that failed

    def background_for(self, reader: MemberReader, kind: str, donor: PartsRef | None) -> np.ndarray:
        if kind == "gray":
            return gray_background(self.spec.canvas)
        assert donor is not None
        if self.cache_dir is None:
            return read_canvas_background(reader, donor, self.spec.canvas, self.spec.resize_filter)
        if has_stored_canvas(donor, self.spec.canvas, self.spec.resize_filter):  # never cached
            try:
                return read_canvas_background(reader, donor, self.spec.canvas, self.spec.resize_filter)
            except (OSError, ValueError) as exc:
                raise ValueError(f"background: {exc}") from None  # worded as a cache failure is
        for split, key, why in self.cache_failures:
            if (split, key) == (donor.split, donor.key):
                raise ValueError(why)
        return read_cached_background(reader, Path(self.cache_dir), donor, self.spec.canvas)

    def metadata(self, job: ImageJob, size: int, spec_position: str, placed, kind: str, donor: PartsRef | None) -> dict:
        spec, cls = self.spec, class_of(job.ref.wnid)
        group = group_name(spec_position, kind, spec.margin)
        return {
            "wnid": job.ref.wnid,
            "class_index": cls.index,
            "class_name": cls.name,
            "label": job.label,
            "source_id": job.ref.key,
            "variant": spec.name,
            "split": job.split,
            "canvas": spec.canvas,
            "size": size,
            "effective_size": min(placed.w, placed.h) if spec.mode == "ar" else size,
            "mode": spec.mode,
            "paste": spec.paste,
            "requested_position": spec_position,
            "position": placed.position,
            "box_x": placed.x,
            "box_y": placed.y,
            "box_w": placed.w,
            "box_h": placed.h,
            "background": kind,
            "background_source_id": donor.key if donor else None,
            "background_wnid": donor.wnid if donor else None,
            "background_class_index": donor.class_index if donor else None,
            "background_fill_score": donor.fill_score if donor else None,
            "background_status": background_status_of(donor),
            "paired_wnid": job.paired_wnid,
            "group": group,
            "tier": tier_of(group, size, spec.canvas),
            "seed": spec.seed,
            "schema_version": SCHEMA_VERSION,
        }

    def load_cutout(self, reader: MemberReader, job: ImageJob, issues: list[Issue]) -> Cutout | None:
        """The object as the spec cuts it (`object_crop.read_spec_object`), or None with an issue:
        a `paper-crop-clipped` image gets no composites, as they would not be the paper's."""
        try:
            crop, mask = read_spec_object(
                reader, job.ref, self.spec.crop, self.spec.box_rounding, self.spec.paste == "mask"
            )
        except PaperCropClipped as exc:
            issues.append(Issue(job.ref.key, PAPER_CROP_CLIPPED, str(exc), "compose"))
            return None
        except (OSError, ValueError, KeyError) as exc:
            issues.append(Issue(job.ref.key, "unreadable-parts", f"object: {exc}", "compose"))
            return None
        return Cutout(crop, mask, self.spec.resize_filter)

    def load_background(
        self, reader: MemberReader, job: ImageJob, kind: str, donor: PartsRef | None, issues: list[Issue]
    ):
        """The canvas-sized background of `kind` (None for noise, drawn per sample), or
        `_NO_BACKGROUND` with an issue recorded when there is none or it does not read."""
        if kind in ("random", "paired") and donor is None:
            reason = "no-foreign-background" if kind == "random" else "no-paired-background"
            detail = (
                "no image of another class in this split"
                if kind == "random"
                else f"no image of paired class {job.paired_wnid} in split {job.split}"
            )
            issues.append(Issue(job.ref.key, reason, detail, "compose"))
            return _NO_BACKGROUND
        if kind == "noise":
            return None
        try:
            return self.background_for(reader, kind, donor)
        except (OSError, ValueError, KeyError) as exc:
            issues.append(
                Issue(
                    job.ref.key,
                    "unreadable-parts",
                    f"{kind} background from {donor.key if donor else '-'}: {exc}",
                    "compose",
                )
            )
            return _NO_BACKGROUND

    def composite(
        self,
        job: ImageJob,
        kind: str,
        donor: PartsRef | None,
        backdrop: Backdrop | None,
        cutout: Cutout,
        size: int,
        position: str,
    ) -> ComposedSample:
        """One composite: the object at `size` and `position` on `backdrop` (None: noise drawn here)."""
        spec = self.spec
        w, h = object_size(cutout.width, cutout.height, size, spec.canvas, spec.mode, spec.margin, spec.size_rounding)
        obj, obj_mask = cutout.at(w, h)
        key = sample_key(job.ref.key, position, size, kind)
        # The corner is drawn per (image, size), so O and R composites share it; the paper drew it
        # per composite (corner_draw: per-composite), so its own- and random-background versions differ.
        draw = f"corner:{job.ref.key}:{size}" + (f":{kind}" if spec.corner_draw == "per-composite" else "")
        rng = sample_rng(spec.seed, draw) if position == "random-corner" else None
        placed = place(position, w, h, spec.canvas, spec.margin, rng)
        if backdrop is None:  # noise: a fresh canvas per composite
            canvas = rgb_to_bgr(noise_background(spec.canvas, sample_rng(spec.seed, f"noise:{key}")))
            paste(canvas, obj, placed, obj_mask)
            jpg = encode_jpeg_bgr(canvas, spec.jpeg_quality)
        else:
            jpg = backdrop.render(obj, placed, obj_mask, spec.jpeg_quality)
        meta = self.metadata(job, size, position, placed, kind, donor if kind in DONOR_KINDS else None)
        return key, composite_members(jpg, job.label, meta), meta

    def compose_image(self, reader: MemberReader, job: ImageJob, issues: list[Issue]) -> list[ComposedSample]:
        """Every composite of one source image: per background kind, size and position."""
        cutout = self.load_cutout(reader, job, issues)
        if cutout is None:
            return []
        samples = []
        for kind, donor in job.donors:
            background = self.load_background(reader, job, kind, donor, issues)
            if background is _NO_BACKGROUND:
                continue
            backdrop = None if background is None else Backdrop(background)
            for size in self.spec.sizes:
                for position in self.spec.positions:
                    samples.append(self.composite(job, kind, donor, backdrop, cutout, size, position))
        # once per image (the shared counter's lock costs ~1% per composite), the composites planned
        # even when some failed: the bar counts work done against the plan; failures are issues
        report_progress(planned_composites(self.spec, job))
        return samples

    def __call__(self, plan: ShardPlan) -> ShardResult:
        reader = MemberReader(Path(self.parts_dir))
        issues: list[Issue] = []
        samples = []
        try:
            for job in plan.items:
                samples.extend(self.compose_image(reader, job, issues))
        finally:
            reader.close()
        stats = write_shard(Path(self.out_dir) / plan.filename, [(key, members) for key, members, _ in samples])
        issues.sort(key=lambda issue: issue.sort_key)
        return ShardResult(stats, issues, count_composites([meta for _, _, meta in samples]))
