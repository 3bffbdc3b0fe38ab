"""Held-out splits carved by source image: a photo's composites (and its background, as a donor)
stay on one side, so a validation split never shares a photo with the split it came from.

Per class, a seeded ranking of the source keys sends round(fraction * n) images to the holdout,
so the holdout has every class the source split has whenever a class has two or more images.
"""

from __future__ import annotations

from collections.abc import Sequence

from builder.compose.geometry import round_half_up
from builder.core.rng import stable_rank
from builder.formats.parts_index import PartsRef


def carve_holdout(refs: Sequence[PartsRef], fraction: float, seed: int) -> tuple[list[PartsRef], list[PartsRef]]:
    """(kept, held out): disjoint by source key, each sorted by key."""
    by_class: dict[str, list[PartsRef]] = {}
    for ref in refs:
        by_class.setdefault(ref.wnid, []).append(ref)
    kept: list[PartsRef] = []
    held: list[PartsRef] = []
    for wnid in sorted(by_class):
        ranked = sorted(by_class[wnid], key=lambda r: stable_rank(seed, "holdout", r.key))
        n_held = min(len(ranked) - 1, round_half_up(fraction * len(ranked))) if len(ranked) > 1 else 0
        held.extend(ranked[:n_held])
        kept.extend(ranked[n_held:])
    return sorted(kept, key=lambda r: r.key), sorted(held, key=lambda r: r.key)
