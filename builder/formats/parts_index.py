"""Reading parts for compose without holding them in memory.

`index_parts` reads only the small `json` member of every parts sample and records where each of
its other members lies in its tar (offset and size), so any image can later be read by a seek.
Backgrounds that other images borrow are decoded once into a disk cache at canvas size.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tarfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
from tqdm import tqdm

from builder.compose.backgrounds import CanvasCache, canvas_background
from builder.core.classes import class_of
from builder.core.config import ConfigError
from builder.formats.parts import PARTS_CANVAS_FILTER, PARTS_CANVAS_SIZE, decode_canvas, decode_mask, decode_png
from builder.core.records import Issue
from builder.core.shards import MANIFEST_NAME, read_manifest

CACHE_DIR = "_cache"
NEEDED_MEMBERS = ("crop.png", "mask.png", "background.png")
OPTIONAL_MEMBERS = ("canvas.npy",)  # the background pre-resized by extract (see builder.parts)


@dataclass(frozen=True)
class PartsRef:
    """Where one parts sample lives: its tar, and (offset, size) of each needed member."""

    key: str
    split: str
    class_index: int
    wnid: str
    shard: str
    members: tuple[tuple[str, int, int], ...]  # (member name, data offset, size), sorted
    row: int = -1  # position in its split's sorted listing: its row in the background cache

    def has(self, member: str) -> bool:
        return any(name == member for name, _, _ in self.members)

    def location(self, member: str) -> tuple[int, int]:
        for name, offset, size in self.members:
            if name == member:
                return offset, size
        raise KeyError(member)


def resolve_parts_dir(path: Path) -> Path:
    """Accept the parts folder itself or the extract output folder that holds `parts/`."""
    path = Path(path)
    if not (path / MANIFEST_NAME).is_file() and (path / "parts" / MANIFEST_NAME).is_file():
        return path / "parts"
    return path


def read_parts_manifest(parts_dir: Path) -> dict:
    manifest = read_manifest(parts_dir)
    if manifest.get("stage") != "extract":
        raise ConfigError(f"{parts_dir} holds a {manifest.get('stage')!r} manifest, not the parts written by `hsi extract`")
    return manifest


def index_parts_shard(path: Path, split: str) -> tuple[list[PartsRef], list[Issue]]:
    """Read only the `json` members of one parts shard; note where the image members are."""
    found: dict[str, dict[str, tuple[int, int]]] = {}
    metas: dict[str, bytes] = {}
    with tarfile.open(path, mode="r") as tar:
        for info in tar:
            key, _, ext = info.name.partition(".")
            if ext == "json":
                handle = tar.extractfile(info)
                metas[key] = handle.read() if handle else b""
            elif ext in NEEDED_MEMBERS or ext in OPTIONAL_MEMBERS:
                found.setdefault(key, {})[ext] = (info.offset_data, info.size)
    refs, issues = [], []
    for key in sorted(set(found) | set(metas)):
        members = found.get(key, {})
        missing = [m for m in NEEDED_MEMBERS if m not in members] + ([] if key in metas else ["json"])
        if missing:
            issues.append(Issue(key, "unreadable-parts", f"{path.name}: lacks members {missing}", "compose"))
            continue
        try:
            meta = json.loads(metas[key])
            wnid, class_index = meta["wnid"], int(meta["class_index"])
            if class_of(wnid).index != class_index:
                raise ValueError(f"class_index {class_index} does not match {wnid}")
        except (ValueError, KeyError, TypeError) as exc:
            issues.append(Issue(key, "unreadable-parts", f"{path.name}: bad json member: {exc}", "compose"))
            continue
        located = tuple(sorted((name, offset, size) for name, (offset, size) in members.items()))
        refs.append(PartsRef(key, split, class_index, wnid, path.name, located))
    return refs, issues


def index_parts(parts_dir: Path, manifest: dict, splits: Sequence[str]) -> tuple[dict[str, list[PartsRef]], list[Issue]]:
    missing = [s for s in splits if s not in manifest.get("splits", {})]
    if missing:
        raise ConfigError(f"parts in {parts_dir} have no split {missing}; they have {sorted(manifest.get('splits', {}))} "
                          "(choose with --splits)")
    index: dict[str, list[PartsRef]] = {}
    issues: list[Issue] = []
    for split in splits:
        refs: list[PartsRef] = []
        for filename in manifest["splits"][split]["filenames"]:
            shard_refs, shard_issues = index_parts_shard(Path(parts_dir) / filename, split)
            refs.extend(shard_refs)
            issues.extend(shard_issues)
        index[split] = [replace(ref, row=row) for row, ref in enumerate(sorted(refs, key=lambda ref: ref.key))]
    return index, issues


@dataclass
class MemberReader:
    """Reads parts members by offset, keeping each parts shard open once per output shard."""

    parts_dir: Path
    handles: dict = field(default_factory=dict)

    def read(self, ref: PartsRef, member: str) -> bytes:
        handle = self.handles.get(ref.shard)
        if handle is None:
            handle = self.handles[ref.shard] = open(self.parts_dir / ref.shard, "rb")
        offset, size = ref.location(member)
        handle.seek(offset)
        data = handle.read(size)
        if len(data) != size:
            raise ValueError(f"{ref.shard}: member {ref.key}.{member} is truncated")
        return data

    def cached_background(self, cache_dir: Path, ref: PartsRef, canvas: int) -> np.ndarray:
        name = cache_file_name(ref.split)
        fd = self.handles.get(name)
        if fd is None:
            fd = self.handles[name] = os.open(cache_dir / name, os.O_RDONLY)
        return CanvasCache(cache_dir / name, canvas).read(ref.row, fd)

    def close(self) -> None:
        for handle in self.handles.values():
            os.close(handle) if isinstance(handle, int) else handle.close()


def read_object(reader: MemberReader, ref: PartsRef, with_mask: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """The object's crop (RGB) and, if asked, its mask (bool, crop-sized); ValueError when they do
    not fit together."""
    crop = decode_png(reader.read(ref, "crop.png"))
    if crop.ndim != 3:
        raise ValueError("crop.png is not RGB")
    if not with_mask:
        return crop, None
    mask = decode_mask(reader.read(ref, "mask.png"))
    if mask.shape != crop.shape[:2]:
        raise ValueError(f"mask.png is {mask.shape}, crop.png is {crop.shape[:2]}")
    return crop, mask


def read_canvas_background(reader: MemberReader, ref: PartsRef, canvas: int, resize_filter: str) -> np.ndarray:
    """A donor's background at canvas size: extract's pre-resized copy when it is the same resize
    (identical bytes, a fraction of the decoding), else the full-resolution one resized here."""
    if canvas == PARTS_CANVAS_SIZE and resize_filter == PARTS_CANVAS_FILTER and ref.has("canvas.npy"):
        return decode_canvas(reader.read(ref, "canvas.npy"))
    return canvas_background(decode_png(reader.read(ref, "background.png")), canvas, resize_filter)


def cache_file_name(split: str) -> str:
    return f"backgrounds-{split}.u8"


def cache_backgrounds(parts_dir: str, cache_dir: str, canvas: int, resize_filter: str,
                      refs: Sequence[PartsRef]) -> list[tuple[str, str, str]]:
    """Decode, resize and store the backgrounds of `refs` (one parts shard); return failures."""
    failures = []
    reader = MemberReader(Path(parts_dir))
    try:
        for ref in sorted(refs, key=lambda r: r.location("background.png")):
            try:
                background = read_canvas_background(reader, ref, canvas, resize_filter)
                if background.ndim != 3:
                    raise ValueError("not an RGB image")
            except (OSError, ValueError) as exc:
                failures.append((ref.split, ref.key, f"background: {exc}"))
                continue
            CanvasCache(Path(cache_dir) / cache_file_name(ref.split), canvas).write(ref.row, background)
    finally:
        reader.close()
    return failures


def fill_background_cache(parts_dir: Path, cache_dir: Path, index: Mapping[str, list[PartsRef]], donors: Iterable[PartsRef],
                          canvas: int, resize_filter: str, workers: int, progress: bool) -> tuple[tuple[str, str, str], ...]:
    """Cache the canvas-sized background of every donor, in parallel by parts shard (a cache file
    per parts split, sparse, one row per image); return (split, key, why) of those that failed."""
    needed = {(donor.split, donor.key): donor for donor in donors}
    if not needed:
        return ()
    cache_dir.mkdir(parents=True, exist_ok=True)
    for split in {split for split, _ in needed}:
        CanvasCache(cache_dir / cache_file_name(split), canvas).create(len(index[split]))
    by_shard: dict[tuple[str, str], list[PartsRef]] = {}
    for donor in needed.values():
        by_shard.setdefault((donor.split, donor.shard), []).append(donor)
    tasks = [by_shard[k] for k in sorted(by_shard)]
    args = (str(parts_dir), str(cache_dir), canvas, resize_filter)
    failures: list[tuple[str, str, str]] = []
    bar = tqdm(total=len(needed), desc="backgrounds", unit="img", disable=not progress)
    try:
        if workers <= 1 or len(tasks) <= 1:
            for refs in tasks:
                failures.extend(cache_backgrounds(*args, refs))
                bar.update(len(refs))
        else:
            context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
            with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                for refs, found in zip(tasks, pool.map(cache_backgrounds, *zip(*[(*args, refs) for refs in tasks]))):
                    failures.extend(found)
                    bar.update(len(refs))
    finally:
        bar.close()
    return tuple(sorted(failures))
