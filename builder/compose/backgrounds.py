"""Backgrounds of composites: which image's background an object sits on, and the neutral controls.

Kinds:
  original  the image's own inpainted background
  random    the inpainted background of an image of another class (a seeded choice, see below)
  paired    the -10 subset: a background of the foreground class's paired class
  gray      flat mid-gray (128)
  noise     uniform RGB noise from the sample's own RNG

The random assignment is made once per source image (so an image's CeR and CoR composites share a
background and differ only in placement and size), by one of three schemes (the spec's `donors`):

  balanced   every background of the split is used about equally (once each when no class holds
             more than half the images), never one of the receiver's own class: two seeded shuffles
             of the split's images are paired, and a pair of the same class swaps its donor with
             the first later pair that the swap fixes. The default for new variants.
  per-image  each image's donor is drawn uniformly, with replacement, from the images of other
             classes with an RNG seeded by (seed, image key): some backgrounds are never used and
             some are reused (about 38% unused when classes are many). The named variants keep it.
  per-class  the paper's scheme (create_dataset.py): each class draws one donor class, and its
             images get that class's images in a seeded order (each about equally often), but the
             donor class is never the class itself (the paper's per-slice draw let 17 of 1,300
             images receive their own class's background).

No scheme ever gives a class its own class's backgrounds, and none depends on the order in which
shards are built: every draw is seeded by (seed, key) or by a sort on such seeded ranks.

The donors may be fewer than the receivers (`hsi compose --min-fill` keeps only well-filled
backgrounds as donors, while every image still receives one): balanced then repeats its shuffled
donors in turn, so each kept background is used about equally often; the other schemes draw from
the kept backgrounds alone. Without such a filter donors and receivers are the same images.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from builder.core.rng import sample_rng, stable_rank

BACKGROUND_KINDS = ("original", "random", "paired", "gray", "noise")
DONOR_SCHEMES = ("balanced", "per-image", "per-class")
DONOR_KINDS = ("original", "random", "paired")  # kinds that read another (or the same) image
GRAY_LEVEL = 128


def gray_background(canvas: int) -> np.ndarray:
    return np.full((canvas, canvas, 3), GRAY_LEVEL, dtype=np.uint8)


def noise_background(canvas: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 256, size=(canvas, canvas, 3), dtype=np.uint8)


@dataclass(frozen=True)
class DonorPool:
    """Images of one split sorted by (class, key), so each class is one contiguous run and a donor
    of another class is one uniform draw that skips the run of the receiving class."""

    entries: tuple[tuple[int, str], ...]  # (class_index, key), sorted

    @classmethod
    def build(cls, items: Sequence[tuple[int, str]]) -> DonorPool:
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


def assign_foreign_donors(
    items: Sequence[tuple[int, str]],
    seed: int,
    scheme: str = "per-image",
    donors: Sequence[tuple[int, str]] | None = None,
) -> dict[str, tuple[int, str] | None]:
    """key -> (class, key) of its random-background donor, for every (class, key) in `items`, by
    `scheme` (see the module docstring), drawn from `donors` (default: `items` themselves); None
    where no donor of another class exists."""
    pool = DonorPool.build(items)
    donor_pool = pool if donors is None else DonorPool.build(donors)
    if scheme == "balanced":
        return balanced_donors(pool, seed, donor_pool)
    if scheme == "per-class":
        return per_class_donors(pool, seed, donor_pool)
    if scheme != "per-image":
        raise ValueError(f"unknown donor scheme {scheme!r}; use one of {', '.join(DONOR_SCHEMES)}")
    return {key: donor_pool.foreign_donor(key, class_index, seed) for class_index, key in pool.entries}


def balanced_donors(
    pool: DonorPool, seed: int, donor_pool: DonorPool | None = None
) -> dict[str, tuple[int, str] | None]:
    donor_pool = pool if donor_pool is None else donor_pool
    receivers = sorted(pool.entries, key=lambda e: stable_rank(seed, "balanced-receiver", e[1]))
    donors = sorted(donor_pool.entries, key=lambda e: stable_rank(seed, "balanced-donor", e[1]))
    n = len(receivers)
    if not donors:
        return {key: None for _, key in receivers}
    if len(donors) < n:  # fewer kept backgrounds than images: each is used in turn
        donors = [donors[i % len(donors)] for i in range(n)]
    for i in range(n):
        if donors[i][0] != receivers[i][0]:
            continue
        for j in (*range(i + 1, n), *range(i)):
            if donors[j][0] != receivers[i][0] and donors[i][0] != receivers[j][0]:
                donors[i], donors[j] = donors[j], donors[i]
                break
    assigned: dict[str, tuple[int, str] | None] = {}
    unfixed: dict[int, list[str]] = {}
    uses: dict[tuple[int, str], int] = {}
    for (class_index, key), donor in zip(receivers, donors, strict=True):
        if donor[0] != class_index:
            assigned[key] = donor
            uses[donor] = uses.get(donor, 0) + 1
        else:  # no swap fixes a pair when one class holds most images
            unfixed.setdefault(class_index, []).append(key)
    for class_index, keys in sorted(unfixed.items()):
        # those images take the least used backgrounds of other classes, in turn
        foreign = sorted(
            (e for e in donor_pool.entries if e[0] != class_index),
            key=lambda e: (uses.get(e, 0), stable_rank(seed, "balanced-donor", e[1])),
        )
        for n, key in enumerate(keys):
            assigned[key] = foreign[n % len(foreign)] if foreign else None
    return assigned


def per_class_donors(
    pool: DonorPool, seed: int, donor_pool: DonorPool | None = None
) -> dict[str, tuple[int, str] | None]:
    donor_pool = pool if donor_pool is None else donor_pool
    classes = sorted({class_index for class_index, _ in pool.entries})
    donor_classes = sorted({class_index for class_index, _ in donor_pool.entries})
    assigned: dict[str, tuple[int, str] | None] = {}
    for class_index in classes:
        lo, hi = pool.class_run(class_index)
        others = [c for c in donor_classes if c != class_index]
        if not others:
            assigned.update({key: None for _, key in pool.entries[lo:hi]})
            continue
        donor_class = others[int(sample_rng(seed, f"donor-class:{class_index}").integers(len(others)))]
        d_lo, d_hi = donor_pool.class_run(donor_class)
        donors = sorted(
            donor_pool.entries[d_lo:d_hi], key=lambda e: stable_rank(seed, f"per-class:{class_index}", e[1])
        )
        receivers = sorted(pool.entries[lo:hi], key=lambda e: stable_rank(seed, "per-class-receiver", e[1]))
        for n, (_, key) in enumerate(receivers):
            assigned[key] = donors[n % len(donors)]
    return assigned


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
