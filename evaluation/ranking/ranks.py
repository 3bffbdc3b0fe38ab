"""The order and the ranks of a leaderboard, one rule for leaderboard.md/.csv and the site.

Full runs are ordered by worst-group top-1 (top-1 when the data has no groups), then by top-1, best
first. Entries equal on both share a rank, and the next rank skips the places they fill
(competition ranking: 1, 2, 2, 4); their names only order them on the page. Partial runs (`--limit`)
come after every full run, unranked.

Entries whose preprocessing is unknown (predictions made elsewhere, with nothing declared) are
ranked among themselves, apart from the others: on this benchmark a centre crop alone moves the
figures (it cuts the canvas border, and with it part of every corner object), so a figure whose
preprocessing is unknown is not comparable with one whose preprocessing is known.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from evaluation.model_formats.models import UNKNOWN as UNKNOWN_STATUS  # the one vocabulary of statuses

UNKNOWN_TITLE = "Unknown preprocessing (ranked apart)"
UNKNOWN_REASON = (
    "These predictions were made outside the toolkit and do not declare how the images were preprocessed "
    "(resized, centre-cropped, normalised). On this benchmark that is not a detail: a centre crop cuts the "
    "canvas border, and with it part of every corner object. So they are ranked among themselves, not with "
    "the entries whose preprocessing is known."
)
TIES = "Entries with the same worst-group top-1 and top-1 share a rank."

Item = TypeVar("Item")


def ranked_figures(row: dict) -> tuple[float, float]:
    """(worst-group top-1, or top-1 without groups; top-1): what a rank compares."""
    worst = row.get("worst_group_top1")
    top1 = row.get("top1") or 0.0
    return (worst if worst is not None else top1, top1)


def is_partial_row(row: dict) -> bool:
    return row.get("partial") == "true"


def order_key(row: dict) -> tuple:
    """The leaderboard's order: full runs best first, then partial runs; the model's spec breaks ties."""
    best, top1 = ranked_figures(row)
    return (is_partial_row(row), -best, -top1, row["model"])


def competition_ranks(rows: Sequence[dict]) -> list[int | None]:
    """The rank of each row of `rows` (in `order_key` order): equal figures share a rank and the next
    skips their places (1, 2, 2, 4); a partial run has none."""
    ranks: list[int | None] = []
    place, previous, rank = 0, None, 0
    for row in rows:
        if is_partial_row(row):
            ranks.append(None)
            continue
        place += 1
        figures = ranked_figures(row)
        if figures != previous:
            rank, previous = place, figures
        ranks.append(rank)
    return ranks


def by_preprocessing(items: Sequence[Item], row_of: Callable[[Item], dict]) -> tuple[list[Item], list[Item]]:
    """(items whose preprocessing is known, items whose preprocessing is unknown), each in its order."""
    unknown = [item for item in items if row_of(item).get("preprocessing_status") == UNKNOWN_STATUS]
    return [item for item in items if row_of(item).get("preprocessing_status") != UNKNOWN_STATUS], unknown


__all__ = [
    "TIES",
    "UNKNOWN_REASON",
    "UNKNOWN_TITLE",
    "by_preprocessing",
    "competition_ranks",
    "order_key",
    "ranked_figures",
]
