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

import io
import json
import tarfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
from PIL import Image

from builder.compose.geometry import resize_mask, resize_rgb
from builder.formats.parts import PARTS_MEMBERS, decode_canvas, decode_png
from builder.formats.composites import check_composite_json
from builder.core.shards import MANIFEST_NAME, ShardFormatError, sha256_file, split_member_name

COMPOSITE_MEMBERS = ("cls", "jpg", "json")
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
    current: str | None = None
    members: dict[str, bytes] = {}
    try:
        tar = tarfile.open(path, mode="r")
    except (tarfile.TarError, OSError) as exc:
        failures.append(Failure("unreadable-shard", f"not a readable tar: {exc}", split, shard))
        return
    with tar:
        try:
            for info in tar:
                try:
                    key, ext = split_member_name(info.name)
                except ShardFormatError as exc:
                    failures.append(Failure("unsafe-member", str(exc), split, shard, info.name))
                    continue
                if not info.isfile():
                    failures.append(Failure("unsafe-member", f"member {info.name!r} is not a regular file", split, shard, key))
                    continue
                if key != current:
                    if current is not None:
                        yield current, members
                    current, members = key, {}
                if ext in members:
                    failures.append(Failure("duplicate-member", f"member {info.name!r} appears twice", split, shard, key))
                    continue
                handle = tar.extractfile(info)
                members[ext] = handle.read() if handle else b""
        except (tarfile.TarError, OSError) as exc:
            failures.append(Failure("unreadable-shard", f"tar stream breaks off: {exc}", split, shard, current))
    if current is not None:
        yield current, members


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
    """Count a sample the way compose counts it (a null tier is counted as "none")."""
    names = {
        "group": meta["group"],
        "size": str(meta["size"]),
        "tier": meta["tier"] or "none",
        "group_size": f"{meta['group']}/{meta['size']}",
    }
    for kind, name in names.items():
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


def decode_jpeg(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        if image.format != "JPEG":
            raise ValueError(f"jpg member is a {image.format}, not a JPEG")
        return np.asarray(image.convert("RGB"))


@dataclass
class PartsIndex:
    """Parts samples by source id, decoded lazily: only crops of composites being checked are read."""

    parts_dir: Path
    locations: dict[str, tuple[Path, str]] = field(default_factory=dict)
    _cache: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def build(cls, parts_dir: Path) -> "PartsIndex":
        from builder.core.shards import manifest_shard_paths, read_manifest

        index = cls(Path(parts_dir))
        manifest = read_manifest(parts_dir)
        for path in manifest_shard_paths(parts_dir, manifest):
            with tarfile.open(path) as tar:
                for name in tar.getnames():
                    key = name.partition(".")[0]
                    index.locations.setdefault(key, (path, key))
        return index

    def crop_and_mask(self, source_id: str) -> tuple[np.ndarray, np.ndarray] | None:
        if source_id in self._cache:
            return self._cache[source_id]
        location = self.locations.get(source_id)
        if location is None:
            return None
        path, key = location
        with tarfile.open(path) as tar:
            crop = decode_png(tar.extractfile(f"{key}.crop.png").read())
            mask = decode_png(tar.extractfile(f"{key}.mask.png").read()) > 127
        if len(self._cache) > 256:
            self._cache.clear()
        self._cache[source_id] = (crop, mask)
        return crop, mask


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
    parts: PartsIndex | None
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
            meta = json.loads(members.get("json", b"").decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            fail("json-decode", f"json member does not parse: {exc}")
            return
        problems = check_composite_json(meta)
        if problems:
            fail("schema", "; ".join(problems))
            return
        _tally(counts, meta)
        try:
            label = int(members.get("cls", b"").decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
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
            image = decode_jpeg(members.get("jpg", b""))
        except (OSError, ValueError, SyntaxError) as exc:
            fail("jpg-decode", f"jpg member does not decode: {exc}")
            return
        geometry = check_geometry(meta, image)
        for problem in geometry:
            fail("placement-bounds", problem)
        if geometry or self.parts is None:
            return
        parts = self.parts.crop_and_mask(meta["source_id"])
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
            meta = json.loads(members["json"])
            arrays = {name: decode_png(members[name]) for name in PARTS_MEMBERS if name.endswith(".png")}
            decode_canvas(members["canvas.npy"])  # checks dtype and the 224 x 224 x 3 shape
        except (OSError, ValueError, SyntaxError) as exc:
            fail("decode", f"a member does not decode: {exc}")
            return
        x0, y0, x1, y1 = meta["object_box"]
        if arrays["crop.png"].shape[:2] != (y1 - y0 + 1, x1 - x0 + 1):
            fail("crop-size", f"crop is {arrays['crop.png'].shape[1]}x{arrays['crop.png'].shape[0]}, object box {meta['object_box']}")
        if arrays["background.png"].shape[:2] != (meta["height"], meta["width"]):
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
    parts = PartsIndex.build(parts_dir) if parts_dir is not None and stage == "compose" else None
    seen: dict[str, str] = {}
    for split, entry in sorted(manifest.get("splits", {}).items()):
        resize_filter = (manifest.get("spec") or {}).get("resize_filter", "bicubic")
        checker = _SampleChecker(split, manifest.get("class_names"), parts, tolerance, result, resize_filter)
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
    return result
