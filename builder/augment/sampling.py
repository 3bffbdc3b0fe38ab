"""Which misclassified training images SCGS regenerates: per true class, k-means on the ERM model's
pooled features, then a fraction of the class spread over its clusters.

SCGS (arXiv 2412.19457) clusters each class's misclassified samples and samples from the clusters
around their centres; it does not state the exact rule. Ours, stated here and in the card:

1. Per true class with n misclassified samples: k = min(--clusters, n) clusters, scikit-learn
   KMeans(n_init=10, random_state from (seed, class)) on the features; clusters are numbered by
   size, largest first (ties: the cluster holding the smallest key first), so ids do not depend on
   KMeans' arbitrary labels.
2. The class's quota q = round-half-up(--fraction * n), at least 1 when n >= 1.
3. q is spread over the clusters in proportion to their size by largest-remainder rounding: each
   cluster gets floor(q * size / n); the remaining units go to the largest fractional parts (ties:
   the lower cluster id), so the quotas sum to q exactly and never exceed a cluster's size.
4. Within a cluster, samples are drawn without replacement with weights of a Gaussian density
   around the centre, w = exp(-d^2 / (2 s^2)) with d the Euclidean distance to the centre and s^2
   the cluster's mean squared distance (numpy's Generator.choice(replace=False, p=w/sum w), seeded
   from (seed, class, cluster)): samples near the centre, typical of the cluster, are favoured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from builder.core.errors import UsageError
from builder.core.rng import sample_rng


@dataclass(frozen=True)
class Misclassified:
    """A train sample the ERM model got wrong."""

    key: str
    shard: str  # the source shard's filename
    label: int  # true label
    predicted: int  # the wrong top-1 label


@dataclass(frozen=True)
class SampledImage:
    source: Misclassified
    cluster: int


@dataclass(frozen=True)
class ClusterPlan:
    label: int
    cluster: int
    size: int
    quota: int

    def to_json(self) -> dict:
        return {"label": self.label, "cluster": self.cluster, "size": self.size, "sampled": self.quota}


def check_sampling(clusters: int, fraction: float, per_image: int) -> None:
    if clusters < 1:
        raise UsageError(f"--clusters must be at least 1, got {clusters}")
    if not 0.0 < fraction <= 1.0:
        raise UsageError(f"--fraction must be in (0, 1], got {fraction}")
    if per_image < 1:
        raise UsageError(f"--per-image must be at least 1, got {per_image}")


def class_quota(n: int, fraction: float) -> int:
    if n == 0:
        return 0
    return min(n, max(1, math.floor(fraction * n + 0.5)))


def largest_remainder(quota: int, sizes: Sequence[int]) -> list[int]:
    """`quota` units split in proportion to `sizes`: floors, then the largest remainders (ties: lower index)."""
    total = sum(sizes)
    if total == 0:
        return [0] * len(sizes)
    exact = [quota * s / total for s in sizes]
    shares = [math.floor(e) for e in exact]
    order = sorted(range(len(sizes)), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in order[: quota - sum(shares)]:
        shares[i] += 1
    return shares


def cluster_members(features: np.ndarray, keys: Sequence[str], clusters: int, seed: int, label: int):
    """(members per cluster id, centres): KMeans labels renumbered by size (largest first)."""
    from sklearn.cluster import KMeans

    k = min(clusters, len(keys))
    if k == 1:
        return [list(range(len(keys)))], features.mean(axis=0, keepdims=True)
    state = int(sample_rng(seed, f"scgs-kmeans:{label}").integers(0, 2**31 - 1))
    model = KMeans(n_clusters=k, n_init=10, random_state=state).fit(features.astype(np.float64))
    groups = [list(np.flatnonzero(model.labels_ == c)) for c in range(k)]
    order = sorted(range(k), key=lambda c: (-len(groups[c]), min((keys[i] for i in groups[c]), default="")))
    return [groups[c] for c in order if groups[c]], model.cluster_centers_[[c for c in order if groups[c]]]


def gaussian_draw(features: np.ndarray, centre: np.ndarray, quota: int, rng: np.random.Generator) -> list[int]:
    """`quota` row indices drawn without replacement, weighted by a Gaussian density around `centre`."""
    d2 = ((features.astype(np.float64) - centre) ** 2).sum(axis=1)
    scale = d2.mean() if d2.mean() > 0 else 1.0
    weights = np.exp(-(d2 - d2.min()) / (2 * scale))  # shifted by the minimum: no underflow to all zeros
    return sorted(int(i) for i in rng.choice(len(d2), size=quota, replace=False, p=weights / weights.sum()))


def sample_class(
    items: Sequence[Misclassified], features: np.ndarray, clusters: int, fraction: float, seed: int
) -> tuple[list[SampledImage], list[ClusterPlan]]:
    """The sampled images of one class (its items in key order) and the per-cluster plan."""
    if not items:
        return [], []
    label = items[0].label
    keys = [item.key for item in items]
    members, centres = cluster_members(features, keys, clusters, seed, label)
    quotas = largest_remainder(class_quota(len(items), fraction), [len(m) for m in members])
    sampled, plans = [], []
    for cluster, (rows, centre, quota) in enumerate(zip(members, centres, quotas)):
        plans.append(ClusterPlan(label, cluster, len(rows), quota))
        if quota == 0:
            continue
        rng = sample_rng(seed, f"scgs-draw:{label}:{cluster}")
        for pick in gaussian_draw(features[rows], centre, quota, rng):
            sampled.append(SampledImage(items[rows[pick]], cluster))
    return sorted(sampled, key=lambda s: s.source.key), plans


def sample_misclassified(
    items: Sequence[Misclassified], features: np.ndarray, clusters: int, fraction: float, seed: int
) -> tuple[list[SampledImage], list[ClusterPlan]]:
    """Every class's sampled images (ordered by label, then key) and cluster plans; `features[i]`
    belongs to `items[i]`."""
    if len(items) != len(features):
        raise ValueError(f"{len(items)} misclassified samples but {len(features)} feature rows")
    sampled: list[SampledImage] = []
    plans: list[ClusterPlan] = []
    for label in sorted({item.label for item in items}):
        rows = sorted((i for i, item in enumerate(items) if item.label == label), key=lambda i: items[i].key)
        got, plan = sample_class([items[i] for i in rows], features[rows], clusters, fraction, seed)
        sampled += got
        plans += plan
    return sampled, plans
