"""Backgrounds of composites: which image's background an object sits on, and the neutral controls.

Kinds:
  original  the image's own inpainted background
  random    the inpainted background of an image of another class (a seeded choice, see below)
  paired    the -10 subset: a background of the foreground class's paired class
  gray      flat mid-gray (128)
  noise     uniform RGB noise from the sample's own RNG

The random assignment is made once per source image (so an image's CeR and CoR composites share a
background and differ only in placement and size). For each image the background donor is drawn
uniformly from all images of *other* classes in the same split, with an RNG seeded by (seed, image
key); no class can ever receive its own class's backgrounds, and the choice of one image does not
depend on the order in which shards are built.
"""

from __future__ import annotations

import bisect
import os
import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from builder.compose.geometry import resize_rgb

BACKGROUND_KINDS = ("original", "random", "paired", "gray", "noise")
DONOR_KINDS = ("original", "random", "paired")  # kinds that read another (or the same) image
GRAY_LEVEL = 128


def sample_rng(seed: int, key: str) -> np.random.Generator:
    """A generator that depends only on (seed, key): the same sample gets the same draws anywhere."""
    digest = hashlib.sha256(f"{seed}:{key}".encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def stable_rank(seed: int, purpose: str, key: str) -> str:
    """A sort key that shuffles items reproducibly and independently of their listing order."""
    return hashlib.sha256(f"{seed}:{purpose}:{key}".encode("utf-8")).hexdigest()


def gray_background(canvas: int) -> np.ndarray:
    return np.full((canvas, canvas, 3), GRAY_LEVEL, dtype=np.uint8)


def noise_background(canvas: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 256, size=(canvas, canvas, 3), dtype=np.uint8)


def canvas_background(background: np.ndarray, canvas: int, resize_filter: str = "bicubic") -> np.ndarray:
    """A donor background stretched to the canvas (the paper resizes backgrounds to 224 x 224)."""
    return np.ascontiguousarray(resize_rgb(background, canvas, canvas, resize_filter))


@dataclass(frozen=True)
class DonorPool:
    """Images of one split sorted by (class, key), so each class is one contiguous run and a donor
    of another class is one uniform draw that skips the run of the receiving class."""

    entries: tuple[tuple[int, str], ...]  # (class_index, key), sorted

    @classmethod
    def build(cls, items: Sequence[tuple[int, str]]) -> "DonorPool":
        return cls(tuple(sorted(items)))

    def class_run(self, class_index: int) -> tuple[int, int]:
        lo = bisect.bisect_left(self.entries, (class_index, ""))
        hi = bisect.bisect_left(self.entries, (class_index + 1, ""))
        return lo, hi

    def foreign_donor(self, key: str, class_index: int, seed: int) -> tuple[int, str] | None:
        """(class, key) of a donor of another class for image `key`, or None if there is none."""
        lo, hi = self.class_run(class_index)
        others = len(self.entries) - (hi - lo)
        if others == 0:
            return None
        draw = int(sample_rng(seed, f"random-background:{key}").integers(others))
        return self.entries[draw if draw < lo else draw + (hi - lo)]

    def donor_of_class(self, key: str, class_index: int, seed: int) -> tuple[int, str] | None:
        """(class, key) of a donor of exactly `class_index` (the -10 subset's paired class)."""
        lo, hi = self.class_run(class_index)
        if hi == lo:
            return None
        draw = int(sample_rng(seed, f"paired-background:{key}").integers(hi - lo))
        return self.entries[lo + draw]


def assign_foreign_donors(items: Sequence[tuple[int, str]], seed: int) -> dict[str, tuple[int, str] | None]:
    """key -> (class, key) of its random-background donor, for every (class, key) in `items`."""
    pool = DonorPool.build(items)
    return {key: pool.foreign_donor(key, class_index, seed) for class_index, key in items}


class CanvasCache:
    """Canvas-sized backgrounds in a flat file of fixed-size rows, read and written by offset.

    Each background is decoded and resized once, although it is needed twice (its own O composites
    and a receiver's R composites, usually in another shard). Rows are read with pread rather than
    mapped, so a process's memory does not grow with the number of images it has touched."""

    def __init__(self, path, canvas: int) -> None:
        self.path = path
        self.canvas = canvas
        self.row_bytes = canvas * canvas * 3

    def create(self, rows: int) -> None:
        with open(self.path, "wb") as handle:
            handle.truncate(rows * self.row_bytes)  # sparse: rows never written take no disk

    def write(self, row: int, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array, dtype=np.uint8)
        assert data.shape == (self.canvas, self.canvas, 3)
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(fd, data.tobytes(), row * self.row_bytes)
        finally:
            os.close(fd)

    def read(self, row: int, fd: int) -> np.ndarray:
        data = os.pread(fd, self.row_bytes, row * self.row_bytes)
        if len(data) != self.row_bytes:
            raise ValueError(f"background cache row {row} is truncated")
        return np.frombuffer(data, np.uint8).reshape(self.canvas, self.canvas, 3).copy()
