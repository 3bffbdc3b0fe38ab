"""Backgrounds that other images borrow, decoded once per compose run into a disk cache at canvas
size (`CanvasCache`, one sparse file per parts split, one row per image), read back by offset.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from builder.compose.backgrounds import CanvasCache
from builder.core.imaging import canvas_background
from builder.formats.parts import PARTS_CANVAS_FILTER, PARTS_CANVAS_SIZE, decode_canvas, decode_png
from builder.formats.parts_index import MemberReader, PartsRef

CACHE_DIR = "_cache"


def read_cached_background(reader: MemberReader, cache_dir: Path, ref: PartsRef, canvas: int) -> np.ndarray:
    path = cache_dir / cache_file_name(ref.split)
    return CanvasCache(path, canvas).read(ref.row, reader.open_fd(path))


def has_stored_canvas(ref: PartsRef, canvas: int, resize_filter: str) -> bool:
    """Whether extract stored this background resized as compose would resize it: then reading it
    costs one read, the same as reading it back from the cache, and it is never cached."""
    return canvas == PARTS_CANVAS_SIZE and resize_filter == PARTS_CANVAS_FILTER and ref.has("canvas.npy")


def read_canvas_background(reader: MemberReader, ref: PartsRef, canvas: int, resize_filter: str) -> np.ndarray:
    """A donor's background at canvas size: extract's pre-resized copy when it is the same resize
    (identical bytes, a fraction of the decoding), else the full-resolution one resized here."""
    if has_stored_canvas(ref, canvas, resize_filter):
        return decode_canvas(reader.read(ref, "canvas.npy"))
    return canvas_background(decode_png(reader.read(ref, "background.png")), canvas, resize_filter)


def cache_file_name(split: str) -> str:
    return f"backgrounds-{split}.u8"


def cache_backgrounds(
    parts_dir: str, cache_dir: str, canvas: int, resize_filter: str, refs: Sequence[PartsRef]
) -> list[tuple[str, str, str]]:
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


def fill_background_cache(
    parts_dir: Path,
    cache_dir: Path,
    index: Mapping[str, list[PartsRef]],
    donors: Iterable[PartsRef],
    canvas: int,
    resize_filter: str,
    workers: int,
    progress: bool,
) -> tuple[tuple[str, str, str], ...]:
    """Cache the canvas-sized background of every donor that must be decoded (not those with a
    stored canvas), in parallel by parts shard (a cache file per parts split, sparse, one row per
    image); return (split, key, why) of those that failed."""
    needed = {
        (donor.split, donor.key): donor for donor in donors if not has_stored_canvas(donor, canvas, resize_filter)
    }
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
