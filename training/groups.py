"""Training groups from each sample's metadata, never hard-coded: (background) x (class), the background
`own` or `paired` on the -10 subset, the paper's group (CeO, CoR, ...) on the standard configs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from builder.core.errors import InputError

BACKGROUND_KIND = {"original": "own", "paired": "paired"}


class GroupMetadataError(InputError, ValueError):
    """Samples whose metadata cannot place them in a group, or a split lacking groups."""


def training_group(meta: Mapping) -> str:
    """The group of one sample from its json metadata, e.g. `own|n01443537` or `CoR|n01443537`."""
    wnid = meta.get("wnid")
    if meta.get("paired_wnid") and meta.get("background") in BACKGROUND_KIND and wnid:
        return f"{BACKGROUND_KIND[meta['background']]}|{wnid}"
    if meta.get("group") and wnid:
        return f"{meta['group']}|{wnid}"
    raise GroupMetadataError(
        f"sample {meta.get('source_id', '?')} has no group metadata (its json needs wnid and group, or background "
        "and paired_wnid, as `hsi compose` writes them); train with --method erm and --select mean on such data"
    )


def group_or_none(meta: Mapping) -> str | None:
    try:
        return training_group(meta)
    except GroupMetadataError:
        return None


def groups_of(metas: Iterable[Mapping]) -> list[str]:
    return [training_group(meta) for meta in metas]


def group_accuracies(groups: Sequence[str], correct: Sequence[bool]) -> dict[str, float]:
    """Accuracy per group, groups in sorted order."""
    totals: Counter = Counter(groups)
    hits: Counter = Counter(g for g, ok in zip(groups, correct) if ok)
    return {g: hits[g] / totals[g] for g in sorted(totals)}


def selection_scores(groups: Sequence[str], correct: Sequence[bool]) -> dict:
    """Mean (per-sample) and worst-group accuracy, with the worst group's name and the per-group table."""
    per_group = group_accuracies(groups, correct)
    worst = min(per_group, key=lambda g: (per_group[g], g))
    return {
        "mean": float(np.mean(np.asarray(correct, dtype=float))),
        "worst_group": per_group[worst],
        "worst_group_name": worst,
        "groups": per_group,
        "samples": len(groups),
    }


def check_groups_cover(split: str, present: Iterable[str], required: Iterable[str]) -> None:
    """Refuse a selection split that lacks a group the training split has: its worst group would lie."""
    missing = sorted(str(g) for g in set(required) - set(present))
    if missing:
        raise GroupMetadataError(
            f"the {split} split has no sample of the groups {missing[:6]}{' ...' if len(missing) > 6 else ''}; "
            f"compose a group-balanced held-out split (hsi compose --holdout train:0.1:val) and pass it with "
            f"--val-split, or select with --select mean"
        )


def balanced_indices(groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices of an equal-size random subsample of every group (the smallest group's size), sorted."""
    names = np.unique(groups)
    members = [np.flatnonzero(groups == g) for g in names]
    size = min(len(m) for m in members)
    chosen = [rng.permutation(m)[:size] for m in members]
    return np.sort(np.concatenate(chosen))
