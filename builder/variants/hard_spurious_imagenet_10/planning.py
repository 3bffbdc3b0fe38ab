"""How the -10 subset draws its splits and pairs its backgrounds (see README.md beside this file).

The compose planner hands every spec with a `subset` to `plan_jobs` here; the donors are still drawn
from the same seeded pools as elsewhere, so the bytes depend only on (seed, key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from builder.compose.backgrounds import DonorPool
from builder.compose.geometry import round_half_up
from builder.compose.holdout import carve_holdout
from builder.compose.planning import ImageJob, donor_kept, own_background_kinds
from builder.compose.spec import VariantSpec
from builder.compose.tables import format_table
from builder.core.classes import class_of
from builder.core.rng import stable_rank
from builder.formats.parts_index import PartsRef


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
        members = sorted(
            (r for r in pooled.values() if r.wnid == wnid), key=lambda r: stable_rank(spec.seed, "subset-split", r.key)
        )
        n_train = round_half_up(spec.subset.train_fraction * len(members))
        drawn["train"].extend(members[:n_train])
        drawn["test"].extend(members[n_train:])
    if spec.holdout is not None:  # planned like test: both backgrounds, so the holdout is group-balanced
        holdout = spec.holdout
        drawn[holdout.source], drawn[holdout.name] = carve_holdout(
            drawn[holdout.source],
            holdout.fraction,
            spec.seed,
            what=f"--holdout {holdout.source}:{holdout.fraction:g}:{holdout.name} (the {holdout.name} split)",
        )
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
        # --min-fill: only kept backgrounds are donors, and an image keeps its own only when kept;
        # a part with no background of its own donates none unless the spec says so (planning.py)
        pool = DonorPool.build([(ref.class_index, ref.key) for ref in refs if donor_kept(spec, ref)])
        kinds: dict[str, tuple[str, ...]] = {}
        if split == "train":
            for wnid in subset.classes:
                own = split_own_and_paired([r.key for r in refs if r.wnid == wnid], subset.majority, spec.seed)
                kinds.update({key: (kind,) for key, kind in own.items()})
        split_jobs = []
        for ref in refs:
            paired_wnid = subset.paired(ref.wnid)
            donors = []
            planned, dropped = own_background_kinds(spec, ref, kinds.get(ref.key, ("original", "paired")))
            for kind in planned:
                if kind == "original":
                    donors.append((kind, ref))
                else:
                    donor = pool.donor_of_class(ref.key, class_of(paired_wnid).index, spec.seed)
                    donors.append((kind, by_key[donor[1]] if donor else None))
            split_jobs.append(
                ImageJob(ref, split, subset.label_of(ref.wnid), tuple(donors), paired_wnid, dropped=dropped)
            )
        jobs[split] = split_jobs
    return jobs


def images_per_class(spec: VariantSpec, jobs: Mapping[str, Sequence[ImageJob]]) -> dict[str, dict[str, int]]:
    """wnid -> output split -> source images planned (0 where a class has none)."""
    assert spec.subset is not None
    counts = {wnid: {split: 0 for split in spec.output_splits} for wnid in spec.subset.classes}
    for split, split_jobs in jobs.items():
        for job in split_jobs:
            counts[job.ref.wnid][split] += 1
    return counts


def coverage_problems(spec: VariantSpec, jobs: Mapping[str, Sequence[ImageJob]]) -> list[str]:
    """What the subset promises and the parts cannot give: a class with no image in a split, or a
    group of a split with no composite (the test split promises every background kind; the train
    split every kind its majority rule assigns to some image)."""
    from builder.core.taxonomy import group_name

    problems = [
        f"class {wnid} ({class_of(wnid).name}) has no image in {split}"
        for wnid, by_split in images_per_class(spec, jobs).items()
        for split, n in by_split.items()
        if n == 0
    ]
    for split in spec.output_splits:
        split_jobs = jobs.get(split, [])
        promised = set(spec.backgrounds) if split == "test" else {kind for job in split_jobs for kind, _ in job.donors}
        present = {kind for job in split_jobs for kind, donor in job.donors if donor is not None}
        for kind in sorted(promised - present, key=spec.backgrounds.index):
            groups = ", ".join(group_name(position, kind, spec.margin) for position in spec.positions)
            problems.append(f"split {split} has no composite on a {kind} background (groups {groups})")
    return problems


def coverage_table(spec: VariantSpec, jobs: Mapping[str, Sequence[ImageJob]]) -> str:
    """Images per class and split, one row per class, as compose prints it."""
    counts = images_per_class(spec, jobs)
    header = ["class", *spec.output_splits]
    rows = [
        [f"{wnid} {class_of(wnid).name}", *[str(by_split[s]) for s in spec.output_splits]]
        for wnid, by_split in counts.items()
    ]
    return "\n".join(["images per class and split:", *format_table(header, rows), ""])
