"""Held-out splits carved by source image: a photo's composites (and its background, as a donor)
stay on one side, so a validation split never shares a photo with the split it came from.

Per class, a seeded ranking of the source keys sends round(fraction * n) images to the holdout,
so the holdout has every class the source split has whenever a class has two or more images. A
holdout that would come out empty (small data: one image per class, or a fraction that rounds to
none) is refused before anything is written: an empty validation split is never what was meant.
"""

from __future__ import annotations

from collections.abc import Sequence

from builder.compose.geometry import round_half_up
from builder.core.config import ConfigError
from builder.core.rng import stable_rank
from builder.formats.parts_index import PartsRef


def carve_holdout(
    refs: Sequence[PartsRef], fraction: float, seed: int, what: str = "the holdout"
) -> tuple[list[PartsRef], list[PartsRef]]:
    """(kept, held out): disjoint by source key, each sorted by key; refused when the holdout would be
    empty although there are images to carve it from (`what` names the holdout in the message)."""
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
    if refs and not held:
        most = max(len(members) for members in by_class.values())
        if most < 2:
            why = "and the holdout never takes a class's last image: extract and compose at least 2 images per class"
        else:
            why = (
                f"and round({fraction:g} x {most}) is 0: pass a fraction of at least {0.5 / most:.2g}, or extract "
                "and compose more images per class"
            )
        raise ConfigError(
            f"{what} would hold 0 source images: its split has {len(refs)} in {len(by_class)} classes, at most "
            f"{most} per class, {why}"
        )
    return sorted(kept, key=lambda r: r.key), sorted(held, key=lambda r: r.key)
