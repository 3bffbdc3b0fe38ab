"""Rank correlations of per-class accuracy with the scores (scipy.stats), with p-values, bootstrap
intervals and partial correlations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from validation.scores.boxes import ClassScore

# --- rank correlations (scipy.stats), with p-values and bootstrap intervals ------------------

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0  # the interval of the same classes is the same in every run


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks with ties given their average rank."""
    from scipy.stats import rankdata

    return rankdata(np.asarray(values, dtype=float), method="average")


def constant(values: Sequence[float]) -> bool:
    return len(set(values)) < 2


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (nan when a side is constant)."""
    from scipy.stats import spearmanr

    return float("nan") if constant(x) or constant(y) else float(spearmanr(x, y).statistic)


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b, which corrects for ties (nan when a side is constant)."""
    from scipy.stats import kendalltau

    return float("nan") if constant(x) or constant(y) else float(kendalltau(x, y, variant="b").statistic)


def vectorised_spearman(a, b, axis=-1):
    """Spearman's rho of each resample at once: Pearson's r of scipy's average ranks (NaN for a
    resample with a constant side, whose order says nothing)."""
    from scipy.stats import rankdata

    ra = rankdata(a, axis=axis)
    rb = rankdata(b, axis=axis)
    ra = ra - ra.mean(axis=axis, keepdims=True)
    rb = rb - rb.mean(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (ra * rb).sum(axis=axis) / np.sqrt((ra**2).sum(axis=axis) * (rb**2).sum(axis=axis))


def _kendall(a, b):
    from scipy.stats import kendalltau

    return float("nan") if constant(a) or constant(b) else kendalltau(a, b, variant="b").statistic


@dataclass(frozen=True)
class RankCorrelation:
    """A rank correlation with its two-sided p-value and a paired percentile bootstrap interval.
    Resamples in which a side is constant have no rank order: they are left out of the interval and
    counted (`undefined_resamples`), never scored as 0, which would pull the interval towards 0."""

    value: float
    p_value: float | None
    low: float | None
    high: float | None
    undefined_resamples: int | None


def rank_correlation(
    x: Sequence[float],
    y: Sequence[float],
    method: str = "spearman",
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = BOOTSTRAP_CONFIDENCE,
    rng: np.random.Generator | None = None,
) -> RankCorrelation:
    """The one bootstrap of a rank correlation (scipy.stats.bootstrap, paired, percentile), used by
    `hsi validate --scores` over classes and by the probes over models. NaN value and no interval
    when a side is constant."""
    import warnings

    from scipy.stats import bootstrap, kendalltau, spearmanr

    if constant(x) or constant(y):
        return RankCorrelation(float("nan"), None, None, None, None)
    result = spearmanr(x, y) if method == "spearman" else kendalltau(x, y, variant="b")
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore")  # scipy warns about the undefined resamples counted below
        boot = bootstrap(
            (np.asarray(x, float), np.asarray(y, float)),
            vectorised_spearman if method == "spearman" else _kendall,
            paired=True,
            vectorized=method == "spearman",
            n_resamples=resamples,
            confidence_level=level,
            method="percentile",
            rng=rng if rng is not None else np.random.default_rng(BOOTSTRAP_SEED),
        )
    distribution = np.asarray(boot.bootstrap_distribution, dtype=float)
    finite = distribution[np.isfinite(distribution)]
    low = high = None
    if len(finite):
        tail = (1 - level) / 2 * 100
        low, high = (float(v) for v in np.percentile(finite, [tail, 100 - tail]))
    return RankCorrelation(
        float(result.statistic), float(result.pvalue), low, high, int(len(distribution) - len(finite))
    )


def correlation_with_interval(x: Sequence[float], y: Sequence[float], method: str) -> dict:
    """The correlation, its two-sided p-value and a paired percentile bootstrap interval over
    classes (BOOTSTRAP_RESAMPLES resamples, seeded), as validation.json writes it."""
    found = rank_correlation(x, y, method)
    interval = None if found.low is None else [found.low, found.high]
    return {"value": found.value, "p_value": found.p_value, "ci": interval}


def partial_correlation(r_xy: float, r_xz: float, r_yz: float) -> float:
    """The correlation of x and y with z held fixed, from the three pairwise correlations
    (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2)); with rank correlations, partial Spearman."""
    denominator = math.sqrt((1 - r_xz**2) * (1 - r_yz**2))
    finite = all(map(math.isfinite, (r_xy, r_xz, r_yz)))
    return (r_xy - r_xz * r_yz) / denominator if denominator and finite else float("nan")


def correlate_with_accuracy(
    classes: Sequence[ClassScore], accuracy: dict[str, float], control: dict[str, float] | None = None
) -> dict:
    """Spearman and Kendall correlations of per-class accuracy with each score, over shared classes,
    each with its p-value and a bootstrap interval.

    With `control` (e.g. per-class accuracy on clean photos: hard classes may simply be hard), each
    score also gets its partial Spearman correlation with the accuracy, the control held fixed,
    over the classes that have all three."""
    shared = [c for c in classes if c.wnid in accuracy]
    acc = [accuracy[c.wnid] for c in shared]
    result: dict = {
        "classes": len(shared),
        "classes_without_accuracy": len(classes) - len(shared),
        "confidence": BOOTSTRAP_CONFIDENCE,
        "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
    }
    controlled = [c for c in shared if control is not None and c.wnid in control]
    for score in ("centre", "size"):
        values = [getattr(c, score) for c in shared]
        entry: dict = {"spearman": None, "kendall_tau_b": None}
        if len(shared) >= 3:
            for name, method in (("spearman", "spearman"), ("kendall_tau_b", "kendall")):
                stats = correlation_with_interval(values, acc, method)
                entry[name], entry[f"{name}_p"], entry[f"{name}_ci"] = stats["value"], stats["p_value"], stats["ci"]
        if control is not None:
            x = [getattr(c, score) for c in controlled]
            y = [accuracy[c.wnid] for c in controlled]
            z = [control[c.wnid] for c in controlled]
            entry["partial_spearman"] = (
                partial_correlation(spearman(x, y), spearman(x, z), spearman(y, z)) if len(controlled) >= 4 else None
            )
        result[score] = entry
    if control is not None:
        result["classes_with_control"] = len(controlled)
    return result


def correlate_models(
    classes: Sequence[ClassScore],
    accuracies: dict[str, dict[str, float]],
    controls: dict[str, dict[str, float]] | None = None,
) -> dict:
    """Correlations per model (several --accuracy files) and their mean over models. One model:
    exactly correlate_with_accuracy's result."""
    per_model = {
        name: correlate_with_accuracy(classes, acc, (controls or {}).get(name)) for name, acc in accuracies.items()
    }
    if len(per_model) == 1:
        return next(iter(per_model.values()))
    result: dict = {
        "models": per_model,
        "averaged_over": len(per_model),
        "classes": min(r["classes"] for r in per_model.values()),
    }
    for score in ("centre", "size"):
        result[score] = {}
        for statistic in ("spearman", "kendall_tau_b", "partial_spearman"):
            values = [r[score].get(statistic) for r in per_model.values()]
            if any(statistic in r[score] for r in per_model.values()):
                finite = [v for v in values if v is not None and math.isfinite(v)]
                result[score][statistic] = float(np.mean(finite)) if len(finite) == len(values) else None
    return result
