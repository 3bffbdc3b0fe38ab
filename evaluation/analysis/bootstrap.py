"""Bootstrap intervals over source images (scipy.stats.bootstrap, percentile method).

The composites of one photo share its object and are not independent, so the resampled unit is the
source image: every statistic is a function of per-source sums (correct, counted), resampled as
paired arrays. Each statistic draws from its own generator seeded by (seed, statistic name), so an
interval does not depend on which other statistics were computed, or in which order.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Estimate:
    value: float | None
    low: float | None
    high: float | None
    n: int  # samples behind the value
    sources: int  # source images (bootstrap units)

    def to_json(self) -> dict:
        def clean(x):
            return None if x is None or not np.isfinite(x) else round(float(x), 6)

        return {
            "value": clean(self.value),
            "low": clean(self.low),
            "high": clean(self.high),
            "n": int(self.n),
            "sources": int(self.sources),
        }


@dataclass(frozen=True)
class BootstrapSettings:
    resamples: int = 1000
    seed: int = 0
    level: float = 0.95

    def rng(self, name: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(name.encode("utf-8"))])

    def to_json(self) -> dict:
        return {
            "resamples": self.resamples,
            "seed": self.seed,
            "level": self.level,
            "unit": "source image",
            "method": "percentile (scipy.stats.bootstrap)",
        }


def interval(
    name: str, arrays: Sequence[np.ndarray], statistic: Callable, settings: BootstrapSettings, n: int
) -> Estimate:
    """Point value and percentile interval of `statistic(*arrays, axis=-1)` over sources."""
    arrays = [np.asarray(a, dtype=float) for a in arrays]
    sources = len(arrays[0]) if arrays else 0
    with np.errstate(divide="ignore", invalid="ignore"):
        value = float(statistic(*arrays, axis=-1)) if sources else None
    if sources < 2 or value is None or not np.isfinite(value):
        return Estimate(value, None, None, n, sources)
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore")
        result = stats.bootstrap(
            tuple(arrays),
            statistic,
            paired=True,
            vectorized=True,
            n_resamples=settings.resamples,
            confidence_level=settings.level,
            method="percentile",
            rng=settings.rng(name),
            batch=max(1, min(settings.resamples, 20_000_000 // max(sources, 1) // len(arrays))),
        )
    low, high = result.confidence_interval
    return Estimate(value, float(low), float(high), n, sources)


def ratio(correct, counted, axis=-1):
    return np.sum(correct, axis=axis) / np.sum(counted, axis=axis)


def difference(correct_a, counted_a, correct_b, counted_b, axis=-1):
    return ratio(correct_a, counted_a, axis) - ratio(correct_b, counted_b, axis)


def over_cells(reduce: Callable) -> Callable:
    """A statistic of (c1, n1, c2, n2, ...) that reduces the cells' rates (mean, min)."""

    def statistic(*arrays, axis=-1):
        rates = [ratio(arrays[i], arrays[i + 1], axis) for i in range(0, len(arrays), 2)]
        return reduce(np.stack(rates), axis=0)

    return statistic
