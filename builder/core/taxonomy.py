"""The paper's groups and tiers (Corner Cases, TMLR 2025), and the order tables list them in.

A group names where the object sits and on whose background: Ce(ntre) or Co(rner), on its O(wn)
background or on a R(andom) other class's. Tiers grade difficulty by group and object size, and are
defined only at the paper's 224 px canvas.

The one rule (`group_name`), decided by the placement the spec *requested*, never by a random draw:
- `center` is Ce; a corner placement is Co: any of the four corners, or `random-corner` (which
  always lands in one of them). The paper's square set uses top-right, its AR set a random corner;
  both are its corner groups, and an explicit bottom-left is a corner just as well.
- Only flush placements (margin 0) and the `original`/`random` backgrounds get these names.
- Anything else is named `<requested placement>/<background>` (e.g. `left/original`,
  `random-corner/gray`) and has no tier. Where a random corner landed is recorded per sample in
  `position`, next to `requested_position`.
"""

from __future__ import annotations

from collections.abc import Iterable

CORNER_PLACEMENTS = ("top-left", "top-right", "bottom-left", "bottom-right", "random-corner")
PAPER_POSITIONS = {"center": "Ce", **{corner: "Co" for corner in CORNER_PLACEMENTS}}
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


def group_name(requested_position: str, background: str, margin: int = 0) -> str:
    """CeO/CoO/CeR/CoR for a flush centre or corner placement (see the module docstring), else
    `requested_position/background`."""
    prefix, suffix = PAPER_POSITIONS.get(requested_position), PAPER_BACKGROUNDS.get(background)
    if prefix and suffix and margin == 0:
        return prefix + suffix
    return f"{requested_position}/{background}"


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
