"""The compose stage: parts + a variant spec + a seed -> composites as deterministic WebDataset shards.

Two passes keep memory flat in the number of source images:
1. `builder.formats.parts_index` indexes the parts by tar offset (reading only their `json` members)
   and `builder.compose.planning` fixes every image's composites and background donors from (seed, key).
2. Shards of source images are built independently (in worker processes if asked): each job reads
   its own crop and the backgrounds it needs (its own, a donor's) by offset or from the background
   cache, resizes them, pastes, and encodes JPEGs, so the bytes of every shard are the same whatever
   the worker count or the order in which shards finish.

The manifest (`_info.json`) is written last, with per-split counts by group, size and tier.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
from PIL import Image

from builder.compose.background_cache import (
    CACHE_DIR,
    fill_background_cache,
    has_stored_canvas,
    read_cached_background,
    read_canvas_background,
)
from builder.compose.backgrounds import DONOR_KINDS, gray_background, noise_background
from builder.compose.geometry import Placement, object_size, paste, place, resize_mask
from builder.compose.object_crop import PAPER_CROP_CLIPPED, PaperCropClipped, read_spec_object
from builder.compose.parts_input import index_checked_parts, read_parts_manifest_checked, verify_parts_shards
from builder.compose.planning import ImageJob, check_has_work, coverage_report, images_per_shard, plan_jobs
from builder.compose.spec import VariantSpec, load_variant
from builder.compose.tables import format_table
from builder.core.classes import class_of, imagenet_classes
from builder.core.config import canonical_json, fingerprint
from builder.core.errors import InputError
from builder.core.imaging import resize_rgb
from builder.core.manifest import COMPOSITES, Manifest, SplitEntry
from builder.core.records import Issue
from builder.core.rng import sample_rng
from builder.core.runner import (
    ShardPlan,
    ShardResult,
    load_finished,
    plan_shards,
    report_progress,
)
from builder.core.shards import write_shard
from builder.core.stage import RunOptions, Stage, StageOutcome, run_stage
from builder.core.taxonomy import group_name, sorted_groups, tier_of
from builder.formats.composites import (
    SCHEMA_VERSION,
    composite_members,
    count_composites,
    encode_jpeg_bgr,
    merge_counts,
    rgb_to_bgr,
    sample_key,
)
from builder.formats.parts_index import MemberReader, PartsRef, resolve_parts_dir

TOOL_NAME = "hard-spurious-imagenet"
SPEC_NAME = "spec.yaml"


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
        report_progress(len(samples))  # once per image: the shared counter's lock cost ~1% per composite
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


# --- the stage --------------------------------------------------------------------------------


def summary_table(manifest: dict) -> str:
    """Counts per group (rows) x size (columns), one block per split."""
    sizes = [str(s) for s in manifest["spec"]["sizes"]]
    lines = []
    for split, entry in manifest["splits"].items():
        by_pair = entry["counts"]["group_size"]
        groups = sorted_groups(entry["counts"]["group"])
        header = [f"{manifest['config']} / {split}", *sizes, "total"]
        rows = [
            [g, *[str(by_pair.get(f"{g}/{s}", 0)) for s in sizes], str(entry["counts"]["group"][g])] for g in groups
        ]
        rows.append(["total", *[str(entry["counts"]["size"].get(s, 0)) for s in sizes], str(entry["num_samples"])])
        lines += [*format_table(header, rows), ""]
    errors = manifest["errors"]
    lines.append(
        f"errors: {errors['total']}"
        + (f" ({', '.join(f'{k}: {v}' for k, v in errors['by_reason'].items())})" if errors["total"] else "")
    )
    return "\n".join(lines)


@dataclass(frozen=True)
class ComposeSummary:
    dataset_dir: Path
    manifest: dict
    table: str
    reused_shards: int = 0


def class_names(spec: VariantSpec) -> list[str]:
    if spec.subset:
        return [class_of(wnid).name for wnid in spec.subset.classes]
    return [c.name for c in imagenet_classes()]


def output_settings(spec: VariantSpec, parts_manifest: dict) -> dict:
    """What decides the output bytes; a folder made with other settings is never resumed."""
    return {
        "stage": "compose",
        "spec": spec.to_json(),
        "parts_fingerprint": parts_manifest.get("fingerprint"),
        "schema_version": SCHEMA_VERSION,
    }


def build_notes(spec: VariantSpec, parts_manifest: dict) -> list[str]:
    """What a reader of this build should know that the spec alone does not say."""
    notes = []
    masker = ((parts_manifest.get("backends") or {}).get("masker") or {}).get("name")
    if spec.paste == "mask" and masker == "box":
        notes.append(
            "--paste mask on parts from the box masker: every mask is the whole box, so these composites "
            "are identical to --paste box; extract with a segmenting masker (sam) for object-shaped pastes"
        )
    return notes


def write_spec(dataset_dir: Path, spec: VariantSpec) -> None:
    """The resolved spec as YAML, reusable as `--variant` to rebuild the same dataset."""
    import yaml

    text = yaml.safe_dump(spec.to_json(), sort_keys=True, allow_unicode=True)
    (dataset_dir / SPEC_NAME).write_text(
        f"# resolved spec of {spec.name}; fingerprint {spec.fingerprint}\n{text}", "utf-8"
    )


class ComposeStage(Stage):
    """Parts + a variant spec -> one composed dataset folder, `OUT/<config>/`."""

    name: ClassVar[str] = "compose"
    holds: ClassVar[str] = COMPOSITES

    def __init__(
        self,
        parts_dir: Path,
        variant: str,
        out_root: Path,
        overrides: Mapping | None = None,
        allow_missing: bool = False,
    ) -> None:
        self.spec = load_variant(variant, dict(overrides or {}))
        self.parts_dir = resolve_parts_dir(Path(parts_dir))
        typed_parts = read_parts_manifest_checked(self.parts_dir, self.spec.splits)
        verify_parts_shards(self.parts_dir, typed_parts, self.spec.splits)
        self.parts_manifest = typed_parts.to_json()
        self.out_dir = Path(out_root) / self.spec.name
        self._settings = json.loads(canonical_json(output_settings(self.spec, self.parts_manifest)))
        self.index, self.index_issues = index_checked_parts(self.parts_dir, typed_parts, self.spec.splits)
        self.jobs = plan_jobs(self.spec, self.index)
        check_has_work(self.spec, self.jobs)  # refused here, before the folder is touched
        self.notes = build_notes(self.spec, self.parts_manifest)
        self.coverage, self.missing = coverage_report(self.spec, self.jobs)
        if self.missing and not allow_missing:
            raise InputError(
                f"the parts cannot give what {self.spec.name} promises: "
                + "; ".join(self.missing)
                + f".\n{self.coverage}Extract the missing classes (e.g. add --splits train,val), or pass "
                "--allow-missing to build it anyway (the manifest then lists what is missing)."
            )
        self._plans: list[ShardPlan] = []
        for split in self.spec.output_splits:
            split_jobs = self.jobs.get(split, [])
            if split_jobs:
                self._plans.extend(plan_shards(split, split_jobs, images_per_shard(self.spec, split_jobs)))
        self.cache_dir = self.out_dir / f"{CACHE_DIR}.{os.getpid()}"  # per run: a cache is never shared
        self.cache_failures: tuple[tuple[str, str, str], ...] = ()

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.spec.output_splits)

    def settings(self) -> dict:
        return self._settings

    def plans(self) -> list[ShardPlan]:
        return self._plans

    def planning_issues(self) -> list[Issue]:
        return list(self.index_issues)

    def progress_label(self) -> str:
        return f"compose {self.spec.name}"

    def before_run(self, plans: Sequence[ShardPlan], options: RunOptions) -> None:
        for stale in self.out_dir.glob(f"{CACHE_DIR}.*"):  # left by a killed run of ours (the folder is locked)
            if re.fullmatch(rf"{re.escape(CACHE_DIR)}\.\d+", stale.name) and stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale)
        write_spec(self.out_dir, self.spec)
        # Backgrounds are decoded once into a disk cache, only for shards still to be built.
        unfinished = [job for plan in plans if load_finished(self.out_dir, plan) is None for job in plan.items]
        donors = [donor for job in unfinished for _, donor in job.donors if donor is not None]
        self.cache_failures = fill_background_cache(
            self.parts_dir,
            self.cache_dir,
            self.index,
            donors,
            self.spec.canvas,
            self.spec.resize_filter,
            options.workers,
            options.progress,
        )

    def after_run(self) -> None:
        shutil.rmtree(self.cache_dir, ignore_errors=True)

    def shard_builder(self) -> ComposeShardBuilder:
        return ComposeShardBuilder(
            self.spec, str(self.parts_dir), str(self.out_dir), str(self.cache_dir), self.cache_failures
        )

    def manifest(self, outcome: StageOutcome) -> Manifest:
        spec, parts_manifest = self.spec, self.parts_manifest
        splits: dict[str, SplitEntry] = {}
        for split in spec.output_splits:
            split_results = outcome.results_of(split)
            splits[split] = SplitEntry(
                split,
                [r.stats for r in split_results],
                counts=merge_counts([r.counts for r in split_results]),
                source_images=len(self.jobs.get(split, [])),
            )
        return Manifest(
            stage=self.name,
            config=spec.name,
            fingerprint=fingerprint(self._settings),
            spec_fingerprint=spec.fingerprint,
            spec=spec.to_json(),
            parts={
                "fingerprint": parts_manifest.get("fingerprint"),
                "backends": parts_manifest.get("backends"),
                "splits": {s: parts_manifest["splits"][s].get("num_samples") for s in spec.splits},
            },
            schema_version=SCHEMA_VERSION,
            splits=splits,
            errors=outcome.errors,
            class_names=class_names(spec),
            allowed_missing=list(self.missing) or None,
            notes=list(self.notes) or None,
        )


def compose_dataset(
    parts_dir: Path,
    variant: str,
    out_root: Path,
    *,
    options: RunOptions = RunOptions(),
    overrides: Mapping | None = None,
    allow_missing: bool = False,
) -> ComposeSummary:
    """Compose `variant` (a name or a YAML spec path, with `overrides`) from the parts in
    `parts_dir` into `out_root/<config>`; finished shards of an earlier run are reused. A variant
    that promises classes or groups the parts lack is refused unless `allow_missing`."""
    options.check()
    stage = ComposeStage(parts_dir, variant, out_root, overrides, allow_missing)
    run = run_stage(stage, options)
    manifest = run.manifest.to_json()
    missing = "".join(f"missing (--allow-missing): {line}\n" for line in stage.missing)
    notes = "".join(f"note: {line}\n" for line in stage.notes)
    return ComposeSummary(
        stage.out_dir, manifest, stage.coverage + missing + notes + summary_table(manifest), run.shards_reused
    )
