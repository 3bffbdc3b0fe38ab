"""The paper's groups and tiers (Corner Cases, TMLR 2025), and the order tables list them in.

A group names where the object sits and on whose background: Ce(ntre) or Co(rner), on its O(wn)
background or on a R(andom) other class's. Tiers grade difficulty by group and object size, and are
defined only at the paper's 224 px canvas. Any other placement or background is named
`position/background` and has no tier.
"""

from __future__ import annotations

from typing import Iterable

PAPER_POSITIONS = {"center": "Ce", "top-right": "Co", "random-corner": "Co"}
PAPER_BACKGROUNDS = {"original": "O", "random": "R"}
PAPER_GROUPS = ("CeO", "CoO", "CeR", "CoR")
PAPER_CANVAS = 224
TIER_ORDER = ("Easy", "Medium", "Hard")
TIERS: dict[tuple[str, int], str] = {
    **{(g, s): "Easy" for g in ("CeO", "CoO") for s in (84, 112)},
    **{(g, 56): "Medium" for g in ("CeO", "CoO")},
    **{(g, 112): "Medium" for g in ("CeR", "CoR")},
    **{(g, s): "Hard" for g in ("CeR", "CoR") for s in (56, 84)},
}


def group_name(position: str, background: str, margin: int = 0) -> str:
    """CeO/CoO/CeR/CoR for the paper's placements (flush, no margin), else `position/background`."""
    prefix, suffix = PAPER_POSITIONS.get(position), PAPER_BACKGROUNDS.get(background)
    if prefix and suffix and margin == 0:
        return prefix + suffix
    return f"{position}/{background}"


def tier_of(group: str, size: int, canvas: int) -> str | None:
    return TIERS.get((group, size)) if canvas == PAPER_CANVAS else None


def group_sort_key(group: str) -> tuple[int, str]:
    """The paper's groups first, in the paper's order, then any other group alphabetically."""
    return (PAPER_GROUPS.index(group), "") if group in PAPER_GROUPS else (len(PAPER_GROUPS), group)


def sorted_groups(groups: Iterable[str]) -> list[str]:
    return sorted(set(groups), key=group_sort_key)


def tier_sort_key(tier: str) -> tuple[int, str]:
    """Easy, Medium, Hard, then anything else (e.g. "none") alphabetically."""
    return (TIER_ORDER.index(tier), "") if tier in TIER_ORDER else (len(TIER_ORDER), tier)
