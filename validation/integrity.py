"""Integrity of a composed dataset (or a parts folder) against its `_info.json` manifest.

Checks, each failure an error row (`builder.core.records.Issue`, a reason from `REASONS`) naming the
split, the shard and the sample key:
  - every listed shard exists, has the recorded byte size, sha256 and sample count;
  - every tar member is a plain file with a safe name (no absolute path, no `..`), `key.ext` form;
  - every sample has exactly the members of its stage, decodes, and its `json` fits the schema;
  - no key repeats anywhere in the dataset;
  - totals per split, group, size, tier and group/size match the manifest's counts;
  - `random` backgrounds never come from the object's own class;
  - what a sample says it is follows from what it is: group and tier from position, background, size
    and the spec (`builder.core.taxonomy`), the key from source, position, size and background, the
    pasted box from the position (`builder.compose.geometry`), the background source from the kind;
  - the declared pasted box lies in the canvas and fits the declared size, and, when the parts are at
    hand, the composite's pixels in that box match the object's crop resized the same way (within a
    JPEG tolerance), and the pixels around it match the declared background source's canvas. The
    object is cut and sized by compose's own rules under the spec (`builder.compose.object_crop`,
    `crop`, `box_rounding`, `size_rounding`), so a `--paper-exact` set is checked against the
    paper's crop.

Shards are checked independently (in `workers` processes when asked) and merged in manifest order,
so the result is the same for any worker count.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

from builder.compose.background_cache import read_canvas_background
from builder.compose.backgrounds import gray_background
from builder.compose.geometry import (
    BOX_ROUNDINGS,
    CORNERS,
    CROPS,
    SIZE_ROUNDINGS,
    GeometryError,
    object_size,
    place,
    resize_mask,
)
from builder.compose.object_crop import PAPER_CROP_CLIPPED, PaperCropClipped, read_spec_object
from builder.compose.parts_input import index_checked_parts
from builder.core.errors import HsiError, InputError
from builder.core.imaging import resize_rgb
from builder.core.manifest import COMPOSITES, Manifest, ManifestError, format_of
from builder.core.records import Issue, count_by_reason
from builder.core.runner import init_worker, stop_pool
from builder.core.shards import MANIFEST_NAME, ShardReadError, iter_shard, sha256_file
from builder.core.taxonomy import group_name, tier_of
from builder.formats.augmented import (
    AUGMENT_MEMBERS,
    check_augment_json,
    decode_augment_json,
    is_generated,
    source_of_key,
)
from builder.formats.composites import (
    COMPOSITE_MEMBERS,
    check_composite_json,
    count_buckets,
    decode_composite_json,
    decode_composite_pixels,
    decode_label,
    sample_key,
)
from builder.formats.parts import PARTS_MEMBERS, decode_canvas, decode_parts
from builder.formats.parts_index import MemberReader, PartsRef

# Mean absolute difference (0-255) allowed between the composite's pasted region and the resized
# crop. JPEG at the qualities compose uses stays well below this; a box moved off the object does not.
DEFAULT_PLACEMENT_TOLERANCE = 12.0
# What a member that does not decode raises: Pillow's decompression-bomb refusal is none of the others.
DECODE_ERRORS = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


def check_tolerance(tolerance: float) -> float:
    """The placement tolerance as a finite, non-negative float: NaN would make every comparison pass."""
    try:
        value = float(tolerance)
    except (TypeError, ValueError):
        raise InputError(
            f"--tolerance {tolerance!r} is not a number; pass a mean pixel difference 0-255 (default "
            f"{DEFAULT_PLACEMENT_TOLERANCE})"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise InputError(
            f"--tolerance {tolerance!r} must be a finite number >= 0 (a mean pixel difference 0-255, "
            f"default {DEFAULT_PLACEMENT_TOLERANCE}); NaN or infinity would disable the placement check"
        )
    return value


def describe_value(value) -> str:
    """A value with its type when it is not a plain int, so `'96'` never reads like 96."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{value!r} ({type(value).__name__})"


STAGE = "validate"  # the stage of every row validation writes


def failure(
    reason: str, detail: str, split: str | None = None, shard: str | None = None, key: str | None = None
) -> Issue:
    """An integrity failure as an error row: it names the sample key, else the shard, else the manifest."""
    return Issue(key or shard or MANIFEST_NAME, reason, detail, STAGE, split=split, shard=shard, key=key)


def failure_line(row: Issue) -> str:
    """`shard/key: reason: detail`, the line `hsi validate` prints for a failure."""
    where = "/".join(part for part in (row.shard, row.key) if part) or MANIFEST_NAME
    return f"{where}: {row.reason}: {row.detail}"


@dataclass
class IntegrityResult:
    stage: str
    samples_checked: int = 0
    shards_checked: int = 0
    placements_compared: int = 0
    backgrounds_compared: int = 0
    failures: list[Issue] = field(default_factory=list)
    counts: dict = field(default_factory=dict)
    tolerance: float = DEFAULT_PLACEMENT_TOLERANCE
    shard_sha256: dict[str, str] = field(default_factory=dict)  # every shard read: its sha256 on disk
    source_ids: list[str] = field(default_factory=list)  # composites: the source images they were cut from

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "stage": self.stage,
            "samples_checked": self.samples_checked,
            "shards_checked": self.shards_checked,
            "placements_compared": self.placements_compared,
            "backgrounds_compared": self.backgrounds_compared,
            "tolerance": self.tolerance,
            "failures_by_reason": count_by_reason(self.failures),
            "failures": [f.to_json() for f in self.failures],
            "counts": self.counts,
        }


def read_shard_members(
    path: Path, shard: str, split: str, failures: list[Issue]
) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Samples of a shard, tolerating bad members: each becomes a failure and is skipped."""

    def record(error: ShardReadError) -> None:
        failures.append(failure(error.reason, error.detail, split, shard, error.key))

    return iter_shard(path, handler=record)


def safe_shard_name(name) -> bool:
    """A listed shard must be one plain file name inside the dataset folder."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and not name.startswith(".")
    )


def check_shard_file(dataset_dir: Path, split: str, entry: dict, failures: list[Issue]) -> str | None:
    """Existence, byte size and sha256 of one listed shard: its sha256 on disk, None when missing."""
    name = entry.get("filename", "?")
    if not safe_shard_name(name):
        failures.append(
            failure(
                "unsafe-shard-name", f"{name!r} is not a plain file name inside the dataset folder", split, str(name)
            )
        )
        return None
    path = dataset_dir / name
    if not path.is_file() or path.is_symlink():
        failures.append(failure("missing-shard", f"listed in {MANIFEST_NAME} but not a file on disk", split, name))
        return None
    size = path.stat().st_size
    if "bytes" in entry and size != entry["bytes"]:
        failures.append(
            failure("shard-size", f"{size} bytes on disk, manifest says {describe_value(entry['bytes'])}", split, name)
        )
    digest = sha256_file(path)
    if "sha256" in entry and digest != entry["sha256"]:
        failures.append(
            failure(
                "shard-sha256",
                f"sha256 {digest[:16]}... differs from the manifest's {str(entry['sha256'])[:16]}...",
                split,
                name,
            )
        )
    return digest


def _tally(counts: dict, meta: dict) -> None:
    """Count a sample the way compose counts it (the composite format's buckets)."""
    for kind, name in count_buckets(meta).items():
        bucket = counts.setdefault(kind, {})
        bucket[name] = bucket.get(name, 0) + 1


def _normalise_counts(counts: dict) -> dict:
    """Counts with string keys and without empty buckets, so both sides compare alike."""
    return {
        kind: {str(k): int(v) for k, v in sorted(bucket.items()) if v}
        for kind, bucket in sorted(counts.items())
        if isinstance(bucket, dict)
    }


def compare_counts(split: str, declared: dict, found: dict, failures: list[Issue]) -> None:
    declared, found = _normalise_counts(declared), _normalise_counts(found)
    for kind in sorted(set(declared) | set(found)):
        ours, theirs = found.get(kind, {}), declared.get(kind, {})
        for bucket in sorted(set(ours) | set(theirs)):
            if ours.get(bucket, 0) != theirs.get(bucket, 0):
                failures.append(
                    failure(
                        "count-mismatch",
                        f"{kind} {bucket}: manifest says {theirs.get(bucket, 0)}, shards hold {ours.get(bucket, 0)}",
                        split,
                    )
                )


@dataclass
class PartsLookup:
    """The objects of a parts folder by source id, through compose's offset index (only the `json`
    members are read up front); only crops of composites being checked are decoded."""

    reader: MemberReader
    refs: dict[str, PartsRef]
    _cache: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    _canvases: dict[tuple[str, int, str], np.ndarray] = field(default_factory=dict)

    @classmethod
    def build(cls, parts_dir: Path) -> PartsLookup:
        parts_dir = Path(parts_dir)
        manifest = Manifest.read(parts_dir)
        # compose's own index: it locates the `json` members the spec's cut reads (object_crop)
        index, _ = index_checked_parts(parts_dir, manifest, sorted(manifest.splits))
        refs: dict[str, PartsRef] = {}
        for split in sorted(index):
            for ref in index[split]:
                refs.setdefault(ref.key, ref)
        return cls(MemberReader(parts_dir), refs)

    def crop_and_mask(
        self, source_id: str, crop: str = "inclusive", box_rounding: str = "none"
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The crop and mask of `source_id` cut as compose cuts them under the spec's `crop` and
        `box_rounding` (`builder.compose.object_crop`); None when the parts lack it;
        `PaperCropClipped` when the cut needs pixels the parts do not hold; ValueError/OSError when
        its members do not read."""
        wanted = (source_id, crop, box_rounding)
        if wanted in self._cache:
            return self._cache[wanted]
        ref = self.refs.get(source_id)
        if ref is None:
            return None
        image, mask = read_spec_object(self.reader, ref, crop, box_rounding, with_mask=True)
        assert mask is not None  # asked for
        if len(self._cache) > 256:
            self._cache.clear()
        self._cache[wanted] = (np.asarray(image), mask)
        return self._cache[wanted]

    def canvas(self, source_id: str, canvas: int, resize_filter: str) -> np.ndarray | None:
        """The canvas-sized background of `source_id` exactly as compose reads it; None when the
        parts lack it."""
        ref = self.refs.get(source_id)
        if ref is None:
            return None
        wanted = (source_id, canvas, resize_filter)
        if wanted not in self._canvases:
            if len(self._canvases) > 256:  # a composite's own image and donor recur within a shard
                self._canvases.clear()
            self._canvases[wanted] = read_canvas_background(self.reader, ref, canvas, resize_filter)
        return self._canvases[wanted]

    def close(self) -> None:
        self.reader.close()


def placement_error(
    composite: np.ndarray, meta: dict, crop: np.ndarray, mask: np.ndarray, resize_filter: str = "bicubic"
) -> float | None:
    """Mean absolute difference between the declared pasted region and the resized crop (over the
    mask's pixels when only the mask was pasted); None when nothing can be compared."""
    x, y, w, h = meta["box_x"], meta["box_y"], meta["box_w"], meta["box_h"]
    region = composite[y : y + h, x : x + w].astype(np.int16)
    # resized exactly as compose resizes (builder.geometry), so only JPEG loss remains
    expected = resize_rgb(crop, w, h, resize_filter).astype(np.int16)
    if region.shape != expected.shape:
        return None
    difference = np.abs(region - expected).mean(axis=2)
    if meta.get("paste") == "mask":
        pasted = resize_mask(mask, w, h, resize_filter)
        if pasted.sum() < 16:  # too few object pixels to say anything
            return None
        return float(difference[pasted].mean())
    return float(difference.mean())


def check_geometry(meta: dict, image: np.ndarray) -> list[str]:
    """The declared box lies in the canvas and fits the declared size and mode."""
    problems = []
    canvas = meta["canvas"]
    height, width = image.shape[:2]
    if (width, height) != (canvas, canvas):
        problems.append(f"image is {width}x{height}, canvas is declared {canvas}x{canvas}")
    x, y, w, h = meta["box_x"], meta["box_y"], meta["box_w"], meta["box_h"]
    if w < 1 or h < 1 or x < 0 or y < 0 or x + w > canvas or y + h > canvas:
        problems.append(f"pasted box x={x} y={y} w={w} h={h} does not lie in the {canvas}x{canvas} canvas")
    size = meta["size"]
    if meta["mode"] == "square" and (w, h) != (size, size):
        problems.append(f"square mode with size {size} but the pasted box is {w}x{h}")
    if meta["mode"] == "ar" and min(w, h) > size:
        problems.append(f"ar mode with size {size} but the box's short side is {min(w, h)}")
    return problems


def expected_groups(meta: dict, spec: dict) -> dict[str, str]:
    """{requested position: group} of every placement of the spec that lands where `meta` says:
    the position itself, and `random-corner` for a corner when the spec asks for it."""
    positions = spec.get("positions") or [meta["position"]]
    margin = spec.get("margin") or 0
    landed = meta["position"]
    requested = [p for p in positions if p == landed or (p == "random-corner" and landed in CORNERS)]
    return {p: group_name(p, meta["background"], margin) for p in requested}


def generated_source_key(key: str, members: dict[str, bytes], fail) -> str | None:
    """The source key of a generated (hsi scgs) sample, its augment block checked; None when broken."""
    try:
        block = decode_augment_json(members)
    except ValueError as exc:
        fail("augment-json", f"augment.json does not parse: {exc}")
        return None
    problems = check_augment_json(block)
    if problems:
        fail("augment-schema", "; ".join(problems))
        return None
    if source_of_key(key) != (block["source_key"], block["index"]):
        fail(
            "key",
            f"a generated sample's key is <source key>_scgs<index>: {block['source_key']}_scgs{block['index']}",
        )
    return block["source_key"]


def check_meaning(key: str, meta: dict, spec: dict) -> list[tuple[str, str]]:
    """(reason, detail) for each label of the sample that does not follow from what it is."""
    problems = []
    groups = expected_groups(meta, spec)
    if not groups:
        problems.append(
            (
                "taxonomy",
                f"position {meta['position']!r} is not one the spec places ({', '.join(spec.get('positions') or [])})",
            )
        )
    elif meta["group"] not in groups.values():
        expected = " or ".join(sorted(set(groups.values())))
        problems.append(
            (
                "taxonomy",
                f"group {meta['group']!r} does not follow from position {meta['position']!r} and "
                f"background {meta['background']!r}: expected {expected}",
            )
        )
    else:
        tier = tier_of(meta["group"], meta["size"], meta["canvas"])
        if meta["tier"] != tier:
            problems.append(
                (
                    "taxonomy",
                    f"tier {meta['tier']!r} does not follow from group {meta['group']} and size "
                    f"{meta['size']} on a {meta['canvas']} px canvas: expected {tier!r}",
                )
            )
        keys = {
            sample_key(meta["source_id"], p, meta["size"], meta["background"])
            for p, g in groups.items()
            if g == meta["group"]
        }
        if key not in keys:
            problems.append(
                (
                    "key",
                    f"key does not match source, position, size and background (expected {' or '.join(sorted(keys))})",
                )
            )
    kind, donor = meta["background"], meta["background_source_id"]
    if kind == "original" and (donor != meta["source_id"] or meta["background_wnid"] != meta["wnid"]):
        problems.append(
            (
                "background-source",
                f"original background from {donor!r} ({meta['background_wnid']}), "
                f"not the object's own image {meta['source_id']!r}",
            )
        )
    elif kind in ("random", "paired") and donor == meta["source_id"]:
        problems.append(("background-source", f"{kind} background is the object's own image {donor!r}"))
    elif kind == "paired" and meta["background_wnid"] != meta["paired_wnid"]:
        problems.append(
            (
                "background-source",
                f"paired background of class {meta['background_wnid']}, the pair is {meta['paired_wnid']}",
            )
        )
    elif kind in ("gray", "noise") and donor is not None:
        problems.append(("background-source", f"{kind} background names a source image {donor!r}"))
    try:
        placed = place(meta["position"], meta["box_w"], meta["box_h"], meta["canvas"], spec.get("margin") or 0)
    except (GeometryError, ValueError):
        placed = None  # an unknown position or an object too large: the bounds check names it
    if placed is not None and (placed.x, placed.y) != (meta["box_x"], meta["box_y"]):
        size = f"{meta['box_w']}x{meta['box_h']}"
        problems.append(
            (
                "placement-position",
                f"position {meta['position']!r} puts a {size} box at ({placed.x},"
                f"{placed.y}), the sample says ({meta['box_x']},{meta['box_y']})",
            )
        )
    return problems


def background_error(composite: np.ndarray, meta: dict, background: np.ndarray) -> float | None:
    """Mean absolute difference between the composite and the declared background outside the
    pasted box; None when too little background shows."""
    height, width = composite.shape[:2]
    outside = height * width - meta["box_w"] * meta["box_h"]  # the box lies in the canvas (checked first)
    if outside < 64 or background.shape != composite.shape:
        return None
    difference = cv2.absdiff(composite, background)  # sums, not masked means: 4x faster on a 224 canvas
    inside = difference[meta["box_y"] : meta["box_y"] + meta["box_h"], meta["box_x"] : meta["box_x"] + meta["box_w"]]
    return (int(difference.sum(dtype=np.int64)) - int(inside.sum(dtype=np.int64))) / (3 * outside)


def object_rules(spec: dict) -> tuple[str, str, str]:
    """How the spec cuts and sizes the object (`crop`, `box_rounding`, `size_rounding`; a spec
    that predates a field has its default); ManifestError for a value compose does not know."""
    rules = []
    for name, default, known in (
        ("crop", "inclusive", CROPS),
        ("box_rounding", "none", BOX_ROUNDINGS),
        ("size_rounding", "half-up", SIZE_ROUNDINGS),
    ):
        value = spec.get(name, default)
        if value not in known:
            raise ManifestError(
                f"{MANIFEST_NAME}: spec field {name} is {value!r}, not one of {', '.join(known)}; "
                "the dataset was not composed by this tool, or its manifest was edited"
            )
        rules.append(value)
    return rules[0], rules[1], rules[2]


@dataclass
class _SampleChecker:
    split: str
    class_names: list | None
    parts: PartsLookup | None
    tolerance: float
    result: IntegrityResult
    resize_filter: str = "bicubic"
    spec: dict = field(default_factory=dict)

    def failure_recorder(self, shard: str, key: str):
        """`fail(reason, detail)` for one sample: records a failure row naming its split, shard and key."""

        def fail(reason: str, detail: str) -> None:
            self.result.failures.append(failure(reason, detail, self.split, shard, key))

        return fail

    def composite(self, shard: str, key: str, members: dict[str, bytes], counts: dict) -> None:
        fail = self.failure_recorder(shard, key)

        generated = is_generated(members)  # hsi scgs: augment members beside the composite's
        expected_members = sorted(COMPOSITE_MEMBERS + AUGMENT_MEMBERS) if generated else list(COMPOSITE_MEMBERS)
        if sorted(members) != expected_members:
            fail("members", f"has {sorted(members)}, expected {expected_members}")
        try:
            meta = decode_composite_json(members)
        except ValueError as exc:
            fail("json-decode", f"json member does not parse: {exc}")
            return
        problems = check_composite_json(meta)
        if problems:
            fail("schema", "; ".join(problems))
            return
        _tally(counts, meta)
        self.result.source_ids.append(meta["source_id"])
        try:
            label = decode_label(members)
        except ValueError:
            fail("cls", f"cls member {members.get('cls', b'')[:20]!r} is not an integer")
            label = None
        if label is not None and label != meta["label"]:
            fail("cls", f"cls says {label}, json label says {meta['label']}")
        if meta["split"] != self.split:
            fail("split", f"json says split {meta['split']!r}, the shard belongs to {self.split!r}")
        if self.class_names is not None and not 0 <= meta["label"] < len(self.class_names):
            fail("label", f"label {meta['label']} outside the manifest's {len(self.class_names)} class names")
        if meta["background"] == "random" and (
            meta["background_wnid"] == meta["wnid"] or meta["background_class_index"] == meta["class_index"]
        ):
            fail(
                "own-class-background",
                f"random background {meta['background_source_id']} is of the object's own class {meta['wnid']}",
            )
        meaning_key = generated_source_key(key, members, fail) if generated else key
        for reason, detail in check_meaning(meaning_key or key, meta, self.spec):
            fail(reason, detail)
        try:
            image = decode_composite_pixels(members.get("jpg", b""))
        except DECODE_ERRORS as exc:
            fail("jpg-decode", f"jpg member does not decode: {type(exc).__name__}: {exc}")
            return
        geometry = check_geometry(meta, image)
        for problem in geometry:
            fail("placement-bounds", problem)
        if geometry or self.parts is None or generated:  # a generated image is compared with nothing
            return
        self.compare_background(image, meta, fail)
        crop_rule, box_rounding, size_rounding = object_rules(self.spec)
        parts = _from_parts(
            fail,
            "placement-parts",
            meta["source_id"],
            lambda source: self.parts.crop_and_mask(source, crop_rule, box_rounding),
        )
        if parts is None:
            return
        crop, mask = parts
        expected_wh = object_size(
            crop.shape[1],
            crop.shape[0],
            meta["size"],
            meta["canvas"],
            meta["mode"],
            self.spec.get("margin") or 0,
            size_rounding,
        )
        if expected_wh != (meta["box_w"], meta["box_h"]):
            fail(
                "placement",
                f"a {crop.shape[1]}x{crop.shape[0]} crop at size {meta['size']} ({meta['mode']}) pastes "
                f"{expected_wh[0]}x{expected_wh[1]}, the sample declares {meta['box_w']}x{meta['box_h']}",
            )
            return
        box = f"({meta['box_x']},{meta['box_y']},{meta['box_w']}x{meta['box_h']})"
        self.judge(
            placement_error(image, meta, crop, mask, self.resize_filter),
            "placements_compared",
            fail,
            "placement",
            f"pixels in the declared box {box} differ from the object's crop",
        )

    def judge(self, error: float | None, counter: str, fail, reason: str, what: str) -> None:
        """Count a comparison that could be made (`error` not None) in `counter` of the result, and
        fail it with `reason` when its mean difference is above the tolerance."""
        if error is None:
            return
        setattr(self.result, counter, getattr(self.result, counter) + 1)
        if error > self.tolerance:
            fail(reason, f"{what} by {error:.1f} on average (tolerance {self.tolerance})")

    def compare_background(self, image: np.ndarray, meta: dict, fail) -> None:
        """The pixels around the pasted box against the declared background (noise is not kept)."""
        assert self.parts is not None
        kind, donor = meta["background"], meta["background_source_id"]
        if kind == "noise":
            return
        if kind == "gray":
            background = gray_background(meta["canvas"])
        else:
            background = _from_parts(
                fail,
                "background-parts",
                donor,
                lambda source: self.parts.canvas(source, meta["canvas"], self.resize_filter),
            )
            if background is None:
                return
        self.judge(
            background_error(image, meta, background),
            "backgrounds_compared",
            fail,
            "background-pixels",
            f"pixels around the pasted box differ from the {kind} background of {donor or kind}",
        )

    def parts_sample(self, shard: str, key: str, members: dict[str, bytes], counts: dict) -> None:
        fail = self.failure_recorder(shard, key)

        if sorted(members) != sorted(PARTS_MEMBERS):
            fail("members", f"has {sorted(members)}, expected {sorted(PARTS_MEMBERS)}")
            return
        try:
            parts = decode_parts(key, members)
            decode_canvas(members["canvas.npy"])  # checks dtype and the 224 x 224 x 3 shape
            meta = parts.meta
            x0, y0, x1, y1 = meta["object_box"]
            width, height, wnid = meta["width"], meta["height"], meta["wnid"]
        except (*DECODE_ERRORS, KeyError, TypeError) as exc:
            fail("decode", f"a member does not decode: {type(exc).__name__}: {exc}")
            return
        if parts.crop.shape[:2] != (y1 - y0 + 1, x1 - x0 + 1):
            fail("crop-size", f"crop is {parts.crop.shape[1]}x{parts.crop.shape[0]}, object box {meta['object_box']}")
        if parts.background.shape[:2] != (height, width):
            fail("background-size", f"background does not have the declared {width}x{height}")
        counts.setdefault("class", {})
        counts["class"][str(wnid)] = counts["class"].get(str(wnid), 0) + 1
        self.result.source_ids.append(key)


def _from_parts(fail, reason: str, source_id: str, read):
    """`read(source_id)` from the parts, or None with a `reason` failure saying why it is not there."""
    try:
        value = read(source_id)
    except PaperCropClipped as exc:  # compose skips such an image: no composite of it can be right
        fail(
            reason,
            f"source {source_id} is {PAPER_CROP_CLIPPED} in these parts, so compose makes no composite of it: {exc}",
        )
        return None
    except (*DECODE_ERRORS, KeyError) as exc:
        fail(reason, f"the parts of source {source_id} do not read: {exc}")
        return None
    if value is None:
        fail(reason, f"source {source_id} is not in the parts folder")
    return value


@dataclass(frozen=True)
class ShardTask:
    """One listed shard to check; picklable, so worker processes can run it."""

    dataset_dir: str
    split: str
    entry: dict
    stage: str
    class_names: list | None
    spec: dict
    parts_dir: str | None
    tolerance: float


@dataclass
class ShardCheck:
    """What checking one shard found; merged in manifest order by `check_dataset`."""

    result: IntegrityResult
    counts: dict
    keys: list[str]
    read: bool


_LOOKUPS: dict[str, PartsLookup] = {}  # per process: the parts index is built once, not per shard


def _parts_lookup(parts_dir: str | None) -> PartsLookup | None:
    if parts_dir is None:
        return None
    if parts_dir not in _LOOKUPS:
        _LOOKUPS[parts_dir] = PartsLookup.build(Path(parts_dir))
    return _LOOKUPS[parts_dir]


def close_lookups() -> None:
    while _LOOKUPS:
        _LOOKUPS.popitem()[1].close()


def check_shard(task: ShardTask) -> ShardCheck:
    """Every check of one shard and its samples (cross-shard checks are left to the merge)."""
    result = IntegrityResult(task.stage, tolerance=task.tolerance)
    name = task.entry.get("filename", "?")
    digest = check_shard_file(Path(task.dataset_dir), task.split, task.entry, result.failures)
    if digest is None:
        return ShardCheck(result, {}, [], False)
    result.shard_sha256[name] = digest
    result.shards_checked = 1
    checker = _SampleChecker(
        task.split,
        task.class_names,
        _parts_lookup(task.parts_dir),
        task.tolerance,
        result,
        task.spec.get("resize_filter", "bicubic"),
        task.spec,
    )
    check_sample = checker.composite if format_of(task.stage) == COMPOSITES else checker.parts_sample
    counts: dict = {}
    keys: list[str] = []
    in_shard: dict[str, int] = {}
    for key, members in read_shard_members(Path(task.dataset_dir) / name, name, task.split, result.failures):
        if key in in_shard:
            result.failures.append(failure("duplicate-key", f"key also in {name}", task.split, name, key))
        in_shard[key] = 1
        keys.append(key)
        check_sample(name, key, members, counts)
    result.samples_checked = len(keys)
    if len(keys) != task.entry.get("num_samples"):
        declared = describe_value(task.entry.get("num_samples"))
        result.failures.append(
            failure("shard-count", f"holds {len(keys)} samples, manifest says {declared}", task.split, name)
        )
    return ShardCheck(result, counts, keys, True)


def _add_counts(total: dict, counts: dict) -> None:
    for kind, bucket in counts.items():
        into = total.setdefault(kind, {})
        for name, value in bucket.items():
            into[name] = into.get(name, 0) + value


class ValidationInterrupted(HsiError):
    """Ctrl-C during the checks: the workers are stopped and no report is written."""

    exit_status = 130


def _map_shards(tasks: list[ShardTask], workers: int) -> list[ShardCheck]:
    """`check_shard` over the tasks, in worker processes when asked, results in task order."""
    done: list[ShardCheck] = []
    try:
        if workers <= 1 or len(tasks) <= 1:
            try:
                for task in tasks:
                    done.append(check_shard(task))
                return done
            finally:
                close_lookups()
        context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        pool = ProcessPoolExecutor(
            max_workers=min(workers, len(tasks)),
            mp_context=context,
            initializer=init_worker,
            initargs=(context.Value("q", 0),),
        )
        try:
            done.extend(pool.map(check_shard, tasks))
        except BaseException:
            stop_pool(pool)
            raise
        pool.shutdown(wait=True)
        return done
    except KeyboardInterrupt:
        raise ValidationInterrupted(
            f"interrupted after {len(done)} of {len(tasks)} shards; no report was written "
            "(an earlier one was removed): run the same command again"
        ) from None


def load_manifest(dataset_dir: Path) -> tuple[Manifest, dict]:
    """The typed manifest (a malformed one is refused with the field at fault) and its raw JSON,
    whose derived fields (`filenames`, `shard_lengths`) are compared with the shards."""
    manifest = Manifest.read(dataset_dir)
    if manifest.holds is None:
        raise InputError(
            f"{dataset_dir / MANIFEST_NAME}: stage {manifest.stage!r} is neither compose nor extract; "
            "validate a composed config folder or a parts folder"
        )
    return manifest, json.loads((Path(dataset_dir) / MANIFEST_NAME).read_text("utf-8"))


def check_dataset(
    dataset_dir: Path, parts_dir: Path | None = None, tolerance: float = DEFAULT_PLACEMENT_TOLERANCE, workers: int = 1
) -> IntegrityResult:
    """Every integrity check of a composed dataset or a parts folder (by its manifest's stage).

    A malformed manifest is refused (`ManifestError`); every problem below it is a failure row."""
    dataset_dir = Path(dataset_dir)
    tolerance = check_tolerance(tolerance)
    manifest, raw = load_manifest(dataset_dir)
    stage = manifest.stage
    result = IntegrityResult(stage, tolerance=tolerance)
    parts = str(parts_dir) if parts_dir is not None and format_of(stage) == COMPOSITES else None
    if parts is not None:
        object_rules(manifest.spec or {})  # refused here, once, rather than in every worker
    tasks, listed = [], Counter()
    for split in sorted(manifest.splits):
        for shard in raw["splits"][split]["shards"]:
            listed[shard["filename"]] += 1
            if listed[shard["filename"]] == 1:
                tasks.append(
                    ShardTask(
                        str(dataset_dir),
                        split,
                        shard,
                        stage,
                        manifest.class_names,
                        manifest.spec or {},
                        parts,
                        tolerance,
                    )
                )
    for name, times in sorted(listed.items()):
        if times > 1:
            result.failures.append(failure("duplicate-shard", f"listed {times} times in {MANIFEST_NAME}", None, name))
    checks = _map_shards(tasks, workers)
    seen: dict[str, str] = {}
    for split in sorted(manifest.splits):
        _merge_split(
            split,
            raw["splits"][split],
            stage,
            [(t, c) for t, c in zip(tasks, checks) if t.split == split],
            result,
            seen,
        )
    return result


def _merge_split(
    split: str,
    entry: dict,
    stage: str,
    checked: list[tuple[ShardTask, ShardCheck]],
    result: IntegrityResult,
    seen: dict[str, str],
) -> None:
    """The shard results of one split, in manifest order, with the split's own checks: derived
    fields, keys across shards, totals and counts. `seen` maps every key met so far to its shard."""
    shards = entry.get("shards", [])
    if [s.get("filename") for s in shards] != entry.get("filenames", []):
        result.failures.append(failure("manifest", "filenames and shards list different files", split))
    if [s.get("num_samples") for s in shards] != entry.get("shard_lengths", []):
        result.failures.append(failure("manifest", "shard_lengths disagree with the shards' num_samples", split))
    counts: dict = {}
    total = 0
    for task, check in checked:
        name = task.entry["filename"]
        part = check.result
        result.failures.extend(part.failures)
        for key in check.keys:
            if key in seen and seen[key] != name:
                result.failures.append(failure("duplicate-key", f"key also in {seen[key]}", split, name, key))
            seen.setdefault(key, name)
        result.shards_checked += part.shards_checked
        result.samples_checked += part.samples_checked
        result.placements_compared += part.placements_compared
        result.backgrounds_compared += part.backgrounds_compared
        result.shard_sha256.update(part.shard_sha256)
        result.source_ids.extend(part.source_ids)
        _add_counts(counts, check.counts)
        total += part.samples_checked
    if total != entry.get("num_samples"):
        result.failures.append(
            failure(
                "split-count",
                f"shards hold {total} samples, manifest says {describe_value(entry.get('num_samples'))}",
                split,
            )
        )
    if format_of(stage) == COMPOSITES:
        compare_counts(split, entry.get("counts", {}), counts, result.failures)
    result.counts[split] = {"num_samples": total, **{k: dict(sorted(v.items())) for k, v in sorted(counts.items())}}
