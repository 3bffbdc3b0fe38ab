"""The compose stage: parts + a variant spec + a seed -> composites as deterministic WebDataset shards.

Two passes keep memory flat in the number of source images:
1. `builder.parts_index` indexes the parts by tar offset (reading only their `json` members) and
   `builder.compose_plan` fixes every image's composites and background donors from (seed, key).
2. Shards of source images are built independently (in worker processes if asked): each job reads
   its own crop and the backgrounds it needs (its own, a donor's) by offset or from the background
   cache, resizes them, pastes, and encodes JPEGs, so the bytes of every shard are the same whatever
   the worker count or the order in which shards finish.

The manifest (`_info.json`) is written last, with per-split counts by group, size and tier.
"""

from __future__ import annotations

import io
import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import cv2
import numpy as np
from PIL import Image

from . import __version__
from .backgrounds import gray_background, noise_background, sample_rng
from .classes import class_of, imagenet_classes
from .compose_plan import ImageJob, check_has_work, images_per_shard, plan_jobs
from .config import check_settings, fingerprint, save_settings
from .geometry import object_size, paste, place, position_token, resize_mask, resize_rgb
from .parts import decode_png, decode_png_image
from .parts_index import (
    CACHE_DIR,
    MemberReader,
    PartsRef,
    fill_background_cache,
    index_parts,
    read_canvas_background,
    read_parts_manifest,
    resolve_parts_dir,
)
from .records import Issue, count_by_reason
from .runner import (
    ShardPlan,
    ShardResult,
    load_finished,
    plan_shards,
    prepare_output,
    remove_stale_temporaries,
    report_progress,
    run_shards,
)
from .schema import SCHEMA_VERSION
from .shards import (
    ERRORS_NAME,
    MANIFEST_NAME,
    split_entry,
    write_json_atomic,
    write_jsonl_atomic,
    write_shard,
)
from .variants import VariantSpec, load_variant

TOOL_NAME = "hard-spurious-imagenet"
SPEC_NAME = "spec.yaml"

# The paper's groups: which placements and backgrounds they are, and their tiers at 224 px.
PAPER_POSITIONS = {"center": "Ce", "top-right": "Co", "random-corner": "Co"}
PAPER_BACKGROUNDS = {"original": "O", "random": "R"}
PAPER_GROUPS = ("CeO", "CoO", "CeR", "CoR")
TIERS: dict[tuple[str, int], str] = {
    **{(g, s): "Easy" for g in ("CeO", "CoO") for s in (84, 112)},
    **{(g, 56): "Medium" for g in ("CeO", "CoO")},
    **{(g, 112): "Medium" for g in ("CeR", "CoR")},
    **{(g, s): "Hard" for g in ("CeR", "CoR") for s in (56, 84)},
}
PAPER_CANVAS = 224


# --- groups, tiers and the per-sample record --------------------------------------------------


def group_name(position: str, background: str, margin: int = 0) -> str:
    """CeO/CoO/CeR/CoR for the paper's placements (flush, no margin), else `position/background`."""
    prefix, suffix = PAPER_POSITIONS.get(position), PAPER_BACKGROUNDS.get(background)
    if prefix and suffix and margin == 0:
        return prefix + suffix
    return f"{position}/{background}"


def tier_of(group: str, size: int, canvas: int) -> str | None:
    return TIERS.get((group, size)) if canvas == PAPER_CANVAS else None


def encode_jpeg_pil(canvas: np.ndarray, quality: int) -> bytes:
    """Deterministic JPEG: fixed quality and 4:2:0 subsampling, no optimize pass, no EXIF."""
    buffer = io.BytesIO()
    Image.fromarray(canvas).save(buffer, format="JPEG", quality=quality, subsampling=2, optimize=False)
    return buffer.getvalue()


_CV2_JPEG = (cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420, cv2.IMWRITE_JPEG_OPTIMIZE, 0)


def encode_jpeg(canvas: np.ndarray, quality: int) -> bytes:
    """The bytes of `encode_jpeg_pil`, 1.5-2x faster: both call libjpeg-turbo with the same
    settings (baseline tables scaled by quality, 4:2:0, JFIF 1.01 with 1:1 density and no units);
    tests/test_shard_writer_bytes.py checks that they agree."""
    if canvas.ndim != 3 or canvas.shape[2] != 3 or canvas.dtype != np.uint8 or not 1 <= quality <= 100:
        # Only RGB canvases and the specs' quality range are checked equal; PIL takes grey images
        # and reads quality -1 as its default, where OpenCV would not match.
        return encode_jpeg_pil(canvas, quality)
    ok, encoded = cv2.imencode(".jpg", cv2.cvtColor(np.ascontiguousarray(canvas), cv2.COLOR_RGB2BGR),
                               (cv2.IMWRITE_JPEG_QUALITY, quality, *_CV2_JPEG))
    if not ok:
        raise ValueError(f"OpenCV could not encode a {canvas.shape} canvas as JPEG")
    return encoded.tobytes()


# json.dumps(meta, sort_keys=True) without building an encoder for every composite: same bytes.
_META_JSON = json.JSONEncoder(sort_keys=True)


def sample_key(source_id: str, position: str, size: int, background: str) -> str:
    return f"{source_id}_{position_token(position)}_{size}_{background}".replace(".", "-")


def _load_object(reader: MemberReader, ref: PartsRef, with_mask: bool) -> tuple[Image.Image, np.ndarray | None]:
    # The crop stays a PIL image: it is only ever resized, to each of the spec's sizes.
    crop = decode_png_image(reader.read(ref, "crop.png"))
    if crop.mode != "RGB":
        raise ValueError("crop.png is not RGB")
    if not with_mask:
        return crop, None
    mask = decode_png(reader.read(ref, "mask.png")) > 127
    if mask.shape != (crop.height, crop.width):
        raise ValueError(f"mask.png is {mask.shape}, crop.png is {(crop.height, crop.width)}")
    return crop, mask


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
        for split, key, why in self.cache_failures:
            if (split, key) == (donor.split, donor.key):
                raise ValueError(why)
        return reader.cached_background(Path(self.cache_dir), donor, self.spec.canvas)

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
            "mode": spec.mode,
            "paste": spec.paste,
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

    def compose_image(self, reader: MemberReader, job: ImageJob, issues: list[Issue]) -> list[tuple[str, dict[str, bytes], dict]]:
        spec = self.spec
        try:
            crop, mask = _load_object(reader, job.ref, spec.paste == "mask")
        except (OSError, ValueError, KeyError) as exc:
            issues.append(Issue(job.ref.key, "unreadable-parts", f"object: {exc}", "compose"))
            return []
        crop_w, crop_h = crop.size
        resized: dict[tuple[int, int], tuple[np.ndarray, np.ndarray | None]] = {}
        samples = []
        for kind, donor in job.donors:
            if kind in ("random", "paired") and donor is None:
                reason = "no-foreign-background" if kind == "random" else "no-paired-background"
                detail = ("no image of another class in this split" if kind == "random"
                          else f"no image of paired class {job.paired_wnid} in split {job.split}")
                issues.append(Issue(job.ref.key, reason, detail, "compose"))
                continue
            try:
                background = self.background_for(reader, kind, donor) if kind != "noise" else None
            except (OSError, ValueError, KeyError) as exc:
                issues.append(Issue(job.ref.key, "unreadable-parts", f"{kind} background from {donor.key if donor else '-'}: {exc}", "compose"))
                continue
            for size in spec.sizes:
                w, h = object_size(crop_w, crop_h, size, spec.canvas, spec.mode, spec.margin)
                if (w, h) not in resized:
                    obj_mask = resize_mask(mask, w, h, spec.resize_filter) if mask is not None else None
                    resized[(w, h)] = (resize_rgb(crop, w, h, spec.resize_filter), obj_mask)
                obj, obj_mask = resized[(w, h)]
                for position in spec.positions:
                    key = sample_key(job.ref.key, position, size, kind)
                    # The corner is drawn per (image, size), so O and R composites share it.
                    rng = sample_rng(spec.seed, f"corner:{job.ref.key}:{size}") if position == "random-corner" else None
                    placed = place(position, w, h, spec.canvas, spec.margin, rng)
                    canvas = (noise_background(spec.canvas, sample_rng(spec.seed, f"noise:{key}"))
                              if kind == "noise" else background.copy())
                    paste(canvas, obj, placed, obj_mask)
                    meta = self.metadata(job, size, position, placed, kind, donor if kind in ("original", "random", "paired") else None)
                    samples.append((key, {
                        "jpg": encode_jpeg(canvas, spec.jpeg_quality),
                        "cls": str(job.label).encode("ascii"),
                        "json": _META_JSON.encode(meta).encode("utf-8"),
                    }, meta))
        report_progress(len(samples))  # once per image: the counter's lock cost ~1% per composite
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


def count_composites(metas: Sequence[dict]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter] = {"group": Counter(), "size": Counter(), "tier": Counter(), "group_size": Counter()}
    for meta in metas:
        counts["group"][meta["group"]] += 1
        counts["size"][str(meta["size"])] += 1
        counts["tier"][meta["tier"] or "none"] += 1
        counts["group_size"][f"{meta['group']}/{meta['size']}"] += 1
    return {name: dict(sorted(counter.items())) for name, counter in counts.items()}


def merge_counts(parts: Sequence[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    merged: dict[str, Counter] = {"group": Counter(), "size": Counter(), "tier": Counter(), "group_size": Counter()}
    for counts in parts:
        for name, values in counts.items():
            merged.setdefault(name, Counter()).update(values)
    return {name: dict(sorted(counter.items())) for name, counter in merged.items()}


# --- the stage --------------------------------------------------------------------------------


def _group_order(group: str) -> tuple[int, str]:
    return (PAPER_GROUPS.index(group), "") if group in PAPER_GROUPS else (len(PAPER_GROUPS), group)


def summary_table(manifest: dict) -> str:
    """Counts per group (rows) x size (columns), one block per split."""
    sizes = [str(s) for s in manifest["spec"]["sizes"]]
    lines = []
    for split, entry in manifest["splits"].items():
        by_pair = entry["counts"]["group_size"]
        groups = sorted(entry["counts"]["group"], key=_group_order)
        header = [f"{manifest['config']} / {split}", *sizes, "total"]
        rows = [[g, *[str(by_pair.get(f"{g}/{s}", 0)) for s in sizes], str(entry["counts"]["group"][g])] for g in groups]
        rows.append(["total", *[str(entry["counts"]["size"].get(s, 0)) for s in sizes], str(entry["num_samples"])])
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        fmt = lambda row: "  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row))
        lines += [fmt(header), "  ".join("-" * w for w in widths), *[fmt(r) for r in rows], ""]
    errors = manifest["errors"]
    lines.append(f"errors: {errors['total']}" + (f" ({', '.join(f'{k}: {v}' for k, v in errors['by_reason'].items())})" if errors["total"] else ""))
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


def write_spec(dataset_dir: Path, spec: VariantSpec) -> None:
    """The resolved spec as YAML, reusable as `--variant` to rebuild the same dataset."""
    import yaml

    text = yaml.safe_dump(spec.to_json(), sort_keys=True, allow_unicode=True)
    (dataset_dir / SPEC_NAME).write_text(f"# resolved spec of {spec.name}; fingerprint {spec.fingerprint}\n{text}", "utf-8")


def compose_dataset(
    parts_dir: Path,
    variant: str,
    out_root: Path,
    *,
    workers: int = 1,
    overwrite: bool = False,
    progress: bool = True,
    overrides: dict | None = None,
) -> ComposeSummary:
    """Compose `variant` (a name or a YAML spec path, with `overrides`) from the parts in
    `parts_dir` into `out_root/<config>`; finished shards of an earlier run are reused."""
    spec = load_variant(variant, overrides)
    parts_dir = resolve_parts_dir(Path(parts_dir))
    parts_manifest = read_parts_manifest(parts_dir)
    dataset_dir = Path(out_root) / spec.name
    settings = output_settings(spec, parts_manifest)
    index, plan_issues = index_parts(parts_dir, parts_manifest, spec.splits)
    jobs = plan_jobs(spec, index)
    check_has_work(spec, jobs)
    prepare_output(dataset_dir, overwrite)
    check_settings(dataset_dir, settings)
    save_settings(dataset_dir, settings)
    remove_stale_temporaries(dataset_dir)
    write_spec(dataset_dir, spec)

    plans: list[ShardPlan] = []
    for split in spec.output_splits:
        split_jobs = jobs.get(split, [])
        if split_jobs:
            plans.extend(plan_shards(split, split_jobs, images_per_shard(spec, split_jobs)))
    # Backgrounds are decoded once into a disk cache, only for shards still to be built.
    unfinished = [job for plan in plans if load_finished(dataset_dir, plan) is None for job in plan.items]
    cache_dir = dataset_dir / CACHE_DIR
    donors = [donor for job in unfinished for _, donor in job.donors if donor is not None]
    failures = fill_background_cache(parts_dir, cache_dir, index, donors, spec.canvas, spec.resize_filter, workers, progress)
    builder = ComposeShardBuilder(spec, str(parts_dir), str(dataset_dir), str(cache_dir), failures)
    try:
        results, reused = run_shards(plans, builder, dataset_dir, workers=workers, desc=f"compose {spec.name}", unit="img", progress=progress)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)

    splits: dict[str, dict] = {}
    for split in spec.output_splits:
        split_results = [r for plan, r in zip(plans, results) if plan.split == split]
        entry = split_entry(split, [r.stats for r in split_results])
        entry["counts"] = merge_counts([r.counts for r in split_results])
        entry["source_images"] = len(jobs.get(split, []))
        splits[split] = entry
    issues = sorted([*plan_issues, *(i for r in results for i in r.issues)], key=lambda issue: issue.sort_key)
    write_jsonl_atomic(dataset_dir / ERRORS_NAME, [issue.to_json() for issue in issues])
    manifest = {
        "stage": "compose",
        "config": spec.name,
        "tool": {"name": TOOL_NAME, "version": __version__},
        "fingerprint": fingerprint(settings),
        "spec_fingerprint": spec.fingerprint,
        "spec": spec.to_json(),
        "parts": {
            "fingerprint": parts_manifest.get("fingerprint"),
            "backends": parts_manifest.get("backends"),
            "splits": {s: parts_manifest["splits"][s].get("num_samples") for s in spec.splits},
        },
        "schema_version": SCHEMA_VERSION,
        "splits": splits,
        "errors": {"total": len(issues), "by_reason": count_by_reason(issues)},
        "class_names": class_names(spec),
    }
    write_json_atomic(dataset_dir / MANIFEST_NAME, manifest)
    return ComposeSummary(dataset_dir, manifest, summary_table(manifest), reused)
