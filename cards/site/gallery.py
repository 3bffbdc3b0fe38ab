"""Failure galleries: for each group and size, a seeded sample of a model's errors and successes,
each labelled from its predictions row.

The sample depends only on (seed, cell, key) (`builder.core.rng.stable_rank`), never on the row
order, so the same seed shows the same images for the same predictions. Class names come from
the toolkit's ImageNet index (builder.core.classes) by the row's class indices, never from the
strings a predictions file carries. Each label: the true class with its probability
(prob_label), the predicted one with its (top5_prob[0]), the background's class with its
(prob_background_class), and on a paired config (-10) the paired background class with its.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from builder.core.classes import imagenet_classes
from builder.core.rng import stable_rank
from builder.core.taxonomy import group_sort_key
from evaluation.analysis.answer_shares import shown_answer


@dataclass(frozen=True)
class ClassLabel:
    """One class a thumbnail names: its role, the class (None where the sample has none) and the
    probability the model gave it (None where not recorded)."""

    role: str  # "true", "predicted", "background", "paired"
    index: int | None
    probability: float | None
    note: str = ""  # e.g. the background's kind

    @property
    def name(self) -> str:
        return imagenet_classes()[self.index].name if self.index is not None else "no class"

    @property
    def wnid(self) -> str:
        return imagenet_classes()[self.index].wnid if self.index is not None else ""


@dataclass(frozen=True)
class Thumbnail:
    key: str
    shard: str
    correct: bool
    labels: tuple[ClassLabel, ...]


@dataclass(frozen=True)
class GalleryCell:
    group: str | None  # None where the config has no group metadata (one cell of every sample)
    size: int | None
    errors: tuple[Thumbnail, ...]
    successes: tuple[Thumbnail, ...]
    error_count: int
    success_count: int

    @property
    def title(self) -> str:
        return "all samples" if self.group is None else f"{self.group}, {self.size} px"


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _index(value) -> int | None:
    return None if _missing(value) else int(value)


def _probability(value) -> float | None:
    return None if _missing(value) else float(value)


def _top_probability(values) -> float | None:
    if values is None or len(values) == 0:
        return None
    return _probability(values[0])


def _predicted(row: dict) -> tuple[int | None, float | None, str]:
    """(class, probability, note) of the prediction; an answer in words that named no single class
    (pred_class -1) is no class, its note the answer's status and the answer itself."""
    index = int(row["pred_class"])
    status = row.get("answer_status")
    if _missing(status):
        return index, _top_probability(row.get("top5_prob")), ""
    answer = shown_answer(row.get("pred_text")) or "no answer"
    return (index if index >= 0 else None), None, f"{status}: {answer}"


def thumbnail(row: dict) -> Thumbnail:
    """A predictions row as a labelled thumbnail."""
    background = "" if _missing(row.get("background")) else str(row["background"])
    labels = [
        ClassLabel("true", int(row["label_class"]), _probability(row.get("prob_label"))),
        ClassLabel("predicted", *_predicted(row)),
        ClassLabel(
            "background",
            _index(row.get("background_class_index")),
            _probability(row.get("prob_background_class")),
            background,
        ),
    ]
    paired = _index(row.get("paired_class_index"))
    if paired is not None:
        labels.append(ClassLabel("paired", paired, _probability(row.get("prob_paired_class"))))
    return Thumbnail(str(row["key"]), str(row["shard"]), bool(row["correct"]), tuple(labels))


def _chosen(rows: list[dict], count: int, seed: int, purpose: str) -> tuple[Thumbnail, ...]:
    ranked = sorted(rows, key=lambda r: stable_rank(seed, purpose, str(r["key"])))[:count]
    return tuple(thumbnail(r) for r in sorted(ranked, key=lambda r: str(r["key"])))


def sample_gallery(predictions, seed: int = 0, errors: int = 8, successes: int = 4) -> list[GalleryCell]:
    """The gallery cells of a predictions table: one per group and size (in the paper's order),
    or one of every sample when the rows carry no group and size."""
    ok = predictions[predictions["status"] == "ok"]
    records = ok.to_dict("records")
    grouped = "group" in ok and "size" in ok and len(ok) and ok["group"].notna().all() and ok["size"].notna().all()
    cells: dict[tuple, list[dict]] = {}
    for row in records:
        cell = (str(row["group"]), int(row["size"])) if grouped else (None, None)
        cells.setdefault(cell, []).append(row)
    gallery = []
    for group, size in sorted(cells, key=lambda c: (group_sort_key(c[0] or ""), c[1] or 0)):
        rows = cells[(group, size)]
        wrong = [r for r in rows if not r["correct"]]
        right = [r for r in rows if r["correct"]]
        purpose = f"gallery:{group}/{size}"
        gallery.append(
            GalleryCell(
                group,
                size,
                _chosen(wrong, errors, seed, f"{purpose}:errors"),
                _chosen(right, successes, seed, f"{purpose}:successes"),
                len(wrong),
                len(right),
            )
        )
    return gallery
