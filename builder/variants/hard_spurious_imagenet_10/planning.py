"""How the -10 subset draws its splits and pairs its backgrounds (see README.md beside this file).

The compose planner hands every spec with a `subset` to `plan_jobs` here; the donors are still drawn
from the same seeded pools as elsewhere, so the bytes depend only on (seed, key).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from builder.compose.backgrounds import DonorPool, stable_rank
from builder.compose.geometry import round_half_up
from builder.compose.holdout import carve_holdout
from builder.compose.planning import ImageJob
from builder.core.classes import class_of
from builder.formats.parts_index import PartsRef
from builder.variants.spec import VariantSpec


def draw_subset_splits(spec: VariantSpec, index: Mapping[str, list[PartsRef]]) -> dict[str, list[PartsRef]]:
    """Pool the subset's images from the spec's parts splits; per class, a seeded shuffle sends
    round(train_fraction * n) images to train and the rest to test."""
    assert spec.subset is not None
    classes = set(spec.subset.classes)
    pooled: dict[str, PartsRef] = {}
    for split in spec.splits:
        for ref in index[split]:
            if ref.wnid in classes:
                pooled.setdefault(ref.key, ref)
    drawn: dict[str, list[PartsRef]] = {"train": [], "test": []}
    for wnid in spec.subset.classes:
        members = sorted((r for r in pooled.values() if r.wnid == wnid), key=lambda r: stable_rank(spec.seed, "subset-split", r.key))
        n_train = round_half_up(spec.subset.train_fraction * len(members))
        drawn["train"].extend(members[:n_train])
        drawn["test"].extend(members[n_train:])
    if spec.holdout is not None:  # planned like test: both backgrounds, so the holdout is group-balanced
        drawn[spec.holdout.source], drawn[spec.holdout.name] = carve_holdout(
            drawn[spec.holdout.source], spec.holdout.fraction, spec.seed)
    return {split: sorted(refs, key=lambda r: r.key) for split, refs in drawn.items()}


def split_own_and_paired(keys: Sequence[str], majority: float, seed: int) -> dict[str, str]:
    """For the train split: key -> "original" for round(majority * n) of one class's images
    (chosen by a seeded shuffle) and "paired" for the rest."""
    ranked = sorted(keys, key=lambda key: stable_rank(seed, "majority", key))
    own = int(np.floor(majority * len(ranked) + 0.5))
    return {key: ("original" if n < own else "paired") for n, key in enumerate(ranked)}


def plan_jobs(spec: VariantSpec, index: Mapping[str, list[PartsRef]]) -> dict[str, list[ImageJob]]:
    """Train: each image on one background (own or paired, by `majority`); test (and a holdout): on both."""
    subset = spec.subset
    assert subset is not None
    jobs: dict[str, list[ImageJob]] = {}
    for split, refs in draw_subset_splits(spec, index).items():
        by_key = {ref.key: ref for ref in refs}
        pool = DonorPool.build([(ref.class_index, ref.key) for ref in refs])
        kinds: dict[str, tuple[str, ...]] = {}
        if split == "train":
            for wnid in subset.classes:
                own = split_own_and_paired([r.key for r in refs if r.wnid == wnid], subset.majority, spec.seed)
                kinds.update({key: (kind,) for key, kind in own.items()})
        split_jobs = []
        for ref in refs:
            paired_wnid = subset.paired(ref.wnid)
            donors = []
            for kind in kinds.get(ref.key, ("original", "paired")):
                if kind == "original":
                    donors.append((kind, ref))
                else:
                    donor = pool.donor_of_class(ref.key, class_of(paired_wnid).index, spec.seed)
                    donors.append((kind, by_key[donor[1]] if donor else None))
            split_jobs.append(ImageJob(ref, split, subset.label_of(ref.wnid), tuple(donors), paired_wnid))
        jobs[split] = split_jobs
    return jobs
