"""Integrity of a composed dataset (or a parts folder) against its `_info.json` manifest.

Checks, each failure naming the shard and the sample key:
  - every listed shard exists, has the recorded byte size, sha256 and sample count;
  - every tar member is a plain file with a safe name (no absolute path, no `..`), `key.ext` form;
  - every sample has exactly the members of its stage, decodes, and its `json` fits the schema;
  - no key repeats anywhere in the dataset;
  - totals per split, group, size, tier and group/size match the manifest's counts;
  - `random` backgrounds never come from the object's own class;
  - the declared pasted box lies in the canvas and fits the declared size, and, when the parts are at
    hand, the composite's pixels in that box match the object's crop resized the same way (within a
    JPEG tolerance).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from builder.compose.geometry import resize_mask, resize_rgb
from builder.core.shards import MANIFEST_NAME, ShardReadError, iter_shard, read_manifest, sha256_file
from builder.formats.composites import (
    COMPOSITE_MEMBERS,
    check_composite_json,
    count_buckets,
    decode_composite_json,
    decode_composite_pixels,
    decode_label,
)
from builder.formats.parts import PARTS_MEMBERS, decode_canvas, decode_parts
from builder.formats.parts_index import MemberReader, PartsRef, index_parts, read_object

# Mean absolute difference (0-255) allowed between the composite's pasted region and the resized
# crop. JPEG at the qualities compose uses stays well below this; a box moved off the object does not.
DEFAULT_PLACEMENT_TOLERANCE = 12.0


@dataclass(frozen=True)
class Failure:
    check: str
    detail: str
    split: str | None = None
    shard: str | None = None
    key: str | None = None

    def to_json(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        where = "/".join(part for part in (self.shard, self.key) if part) or MANIFEST_NAME
        return f"{where}: {self.check}: {self.detail}"


@dataclass
class IntegrityResult:
    stage: str
    samples_checked: int = 0
    shards_checked: int = 0
    placements_compared: int = 0
    failures: list[Failure] = field(default_factory=list)
    counts: dict = field(default_factory=dict)

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
            "failures_by_check": dict(sorted(Counter(f.check for f in self.failures).items())),
            "failures": [f.to_json() for f in self.failures],
            "counts": self.counts,
        }


def read_shard_members(path: Path, shard: str, split: str, failures: list[Failure]) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Samples of a shard, tolerating bad members: each becomes a failure and is skipped."""
    def record(error: ShardReadError) -> None:
        failures.append(Failure(error.reason, error.detail, split, shard, error.key))

    return iter_shard(path, handler=record)


def check_shard_file(dataset_dir: Path, split: str, entry: dict, failures: list[Failure]) -> bool:
    """Existence, byte size and sha256 of one listed shard; False when it is missing."""
    name = entry.get("filename", "?")
    path = dataset_dir / name
    if not path.is_file():
        failures.append(Failure("missing-shard", f"listed in {MANIFEST_NAME} but not on disk", split, name))
        return False
    size = path.stat().st_size
    if "bytes" in entry and size != entry["bytes"]:
        failures.append(Failure("shard-size", f"{size} bytes on disk, manifest says {entry['bytes']}", split, name))
    digest = sha256_file(path)
    if "sha256" in entry and digest != entry["sha256"]:
        failures.append(Failure("shard-sha256", f"sha256 {digest[:16]}... differs from the manifest's {str(entry['sha256'])[:16]}...", split, name))
    return True


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


def compare_counts(split: str, declared: dict, found: dict, failures: list[Failure]) -> None:
    declared, found = _normalise_counts(declared), _normalise_counts(found)
    for kind in sorted(set(declared) | set(found)):
        ours, theirs = found.get(kind, {}), declared.get(kind, {})
        for bucket in sorted(set(ours) | set(theirs)):
            if ours.get(bucket, 0) != theirs.get(bucket, 0):
                failures.append(Failure(
                    "count-mismatch",
                    f"{kind} {bucket}: manifest says {theirs.get(bucket, 0)}, shards hold {ours.get(bucket, 0)}",
                    split,
                ))


@dataclass
class PartsLookup:
    """The objects of a parts folder by source id, through compose's offset index (only the `json`
    members are read up front); only crops of composites being checked are decoded."""

    reader: MemberReader
    refs: dict[str, PartsRef]
    _cache: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def build(cls, parts_dir: Path) -> "PartsLookup":
        parts_dir = Path(parts_dir)
        manifest = read_manifest(parts_dir)
        index, _ = index_parts(parts_dir, manifest, sorted(manifest.get("splits", {})))
        refs: dict[str, PartsRef] = {}
        for split in sorted(index):
            for ref in index[split]:
                refs.setdefault(ref.key, ref)
        return cls(MemberReader(parts_dir), refs)

    def crop_and_mask(self, source_id: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The crop and mask of `source_id`; None when the parts lack it; ValueError/OSError when
        its members do not read."""
        if source_id in self._cache:
            return self._cache[source_id]
        ref = self.refs.get(source_id)
        if ref is None:
            return None
        crop, mask = read_object(self.reader, ref)
        if len(self._cache) > 256:
            self._cache.clear()
        self._cache[source_id] = (crop, mask)
        return crop, mask

    def close(self) -> None:
        self.reader.close()


def placement_error(composite: np.ndarray, meta: dict, crop: np.ndarray, mask: np.ndarray,
                    resize_filter: str = "bicubic") -> float | None:
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


@dataclass
class _SampleChecker:
    split: str
    class_names: list | None
    parts: PartsLookup | None
    tolerance: float
    result: IntegrityResult
    resize_filter: str = "bicubic"

    def failure_recorder(self, shard: str, key: str):
        """`fail(check, detail)` for one sample: records a Failure naming its split, shard and key."""
        def fail(check: str, detail: str) -> None:
            self.result.failures.append(Failure(check, detail, self.split, shard, key))

        return fail

    def composite(self, shard: str, key: str, members: dict[str, bytes], counts: dict) -> None:
        fail = self.failure_recorder(shard, key)

        if sorted(members) != list(COMPOSITE_MEMBERS):
            fail("members", f"has {sorted(members)}, expected {list(COMPOSITE_MEMBERS)}")
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
            fail("own-class-background", f"random background {meta['background_source_id']} is of the object's own class {meta['wnid']}")
        try:
            image = decode_composite_pixels(members.get("jpg", b""))
        except (OSError, ValueError, SyntaxError) as exc:
            fail("jpg-decode", f"jpg member does not decode: {exc}")
            return
        geometry = check_geometry(meta, image)
        for problem in geometry:
            fail("placement-bounds", problem)
        if geometry or self.parts is None:
            return
        try:
            parts = self.parts.crop_and_mask(meta["source_id"])
        except (OSError, ValueError, KeyError) as exc:
            fail("placement-parts", f"the parts of source {meta['source_id']} do not read: {exc}")
            return
        if parts is None:
            fail("placement-parts", f"source {meta['source_id']} is not in the parts folder")
            return
        error = placement_error(image, meta, *parts, self.resize_filter)
        if error is None:
            return
        self.result.placements_compared += 1
        if error > self.tolerance:
            fail("placement", f"pixels in the declared box ({meta['box_x']},{meta['box_y']},{meta['box_w']}x{meta['box_h']}) "
                 f"differ from the object's crop by {error:.1f} on average (tolerance {self.tolerance})")

    def parts_sample(self, shard: str, key: str, members: dict[str, bytes], counts: dict) -> None:
        fail = self.failure_recorder(shard, key)

        if sorted(members) != sorted(PARTS_MEMBERS):
            fail("members", f"has {sorted(members)}, expected {sorted(PARTS_MEMBERS)}")
            return
        try:
            parts = decode_parts(key, members)
            decode_canvas(members["canvas.npy"])  # checks dtype and the 224 x 224 x 3 shape
        except (OSError, ValueError, SyntaxError) as exc:
            fail("decode", f"a member does not decode: {exc}")
            return
        meta = parts.meta
        x0, y0, x1, y1 = meta["object_box"]
        if parts.crop.shape[:2] != (y1 - y0 + 1, x1 - x0 + 1):
            fail("crop-size", f"crop is {parts.crop.shape[1]}x{parts.crop.shape[0]}, object box {meta['object_box']}")
        if parts.background.shape[:2] != (meta["height"], meta["width"]):
            fail("background-size", f"background does not have the declared {meta['width']}x{meta['height']}")
        counts.setdefault("class", {})
        counts["class"][meta["wnid"]] = counts["class"].get(meta["wnid"], 0) + 1


def check_dataset(dataset_dir: Path, parts_dir: Path | None = None,
                  tolerance: float = DEFAULT_PLACEMENT_TOLERANCE) -> IntegrityResult:
    """Every integrity check of a composed dataset or a parts folder (by its manifest's stage)."""
    dataset_dir = Path(dataset_dir)
    manifest_path = dataset_dir / MANIFEST_NAME
    try:
        manifest = json.loads(manifest_path.read_text("utf-8"))
    except FileNotFoundError:
        return IntegrityResult("unknown", failures=[Failure("manifest", f"{MANIFEST_NAME} does not exist (the dataset is unfinished)")])
    except ValueError as exc:
        return IntegrityResult("unknown", failures=[Failure("manifest", f"{MANIFEST_NAME} is not valid JSON: {exc}")])
    stage = manifest.get("stage", "unknown")
    result = IntegrityResult(stage)
    if stage not in ("compose", "extract"):
        result.failures.append(Failure("manifest", f"stage {stage!r} is neither compose nor extract"))
        return result
    parts = PartsLookup.build(parts_dir) if parts_dir is not None and stage == "compose" else None
    seen: dict[str, str] = {}
    try:
        for split, entry in sorted(manifest.get("splits", {}).items()):
            resize_filter = (manifest.get("spec") or {}).get("resize_filter", "bicubic")
            checker = _SampleChecker(split, manifest.get("class_names"), parts, tolerance, result, resize_filter)
            _check_split(dataset_dir, split, entry, stage, checker, seen)
    finally:
        if parts is not None:
            parts.close()
    return result


def _check_split(dataset_dir: Path, split: str, entry: dict, stage: str, checker: _SampleChecker,
                 seen: dict[str, str]) -> None:
    """The shards, samples and counts of one split; `seen` maps every key met so far to its shard."""
    result = checker.result
    check_sample = checker.composite if stage == "compose" else checker.parts_sample
    counts: dict = {}
    shards = entry.get("shards", [])
    if [s.get("filename") for s in shards] != entry.get("filenames", []):
        result.failures.append(Failure("manifest", "filenames and shards list different files", split))
    if [s.get("num_samples") for s in shards] != entry.get("shard_lengths", []):
        result.failures.append(Failure("manifest", "shard_lengths disagree with the shards' num_samples", split))
    total = 0
    for shard_entry in shards:
        name = shard_entry.get("filename", "?")
        if not check_shard_file(dataset_dir, split, shard_entry, result.failures):
            continue
        result.shards_checked += 1
        in_shard = 0
        for key, members in read_shard_members(dataset_dir / name, name, split, result.failures):
            in_shard += 1
            if key in seen:
                result.failures.append(Failure("duplicate-key", f"key also in {seen[key]}", split, name, key))
            seen.setdefault(key, name)
            check_sample(name, key, members, counts)
        result.samples_checked += in_shard
        total += in_shard
        if in_shard != shard_entry.get("num_samples"):
            result.failures.append(Failure("shard-count", f"holds {in_shard} samples, manifest says {shard_entry.get('num_samples')}", split, name))
    if total != entry.get("num_samples"):
        result.failures.append(Failure("split-count", f"shards hold {total} samples, manifest says {entry.get('num_samples')}", split))
    if stage == "compose":
        compare_counts(split, entry.get("counts", {}), counts, result.failures)
    result.counts[split] = {"num_samples": total, **counts}
