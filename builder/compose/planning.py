"""Compose planning: which composites each source image gives, and on whose backgrounds.

Donors are fixed here from (seed, key), before any shard is built, so the bytes of every shard are
the same whatever the worker count or the order in which shards finish.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from builder.compose.backgrounds import assign_foreign_donors
from builder.compose.holdout import carve_holdout
from builder.compose.spec import VariantSpec, variant_planning
from builder.core.classes import class_of
from builder.core.config import ConfigError
from builder.formats.parts_index import PartsRef


@dataclass(frozen=True)
class ImageJob:
    """One source image of one output split, with the donor of each background kind it gets.

    A donor of None for a kind that needs one (random, paired) means no donor exists; the builder
    reports it and drops those composites."""

    ref: PartsRef
    split: str
    label: int
    donors: tuple[tuple[str, PartsRef | None], ...]  # (background kind, donor) in spec order
    paired_wnid: str | None = None


def planned_composites(spec: VariantSpec, job: ImageJob) -> int:
    """The composites an image job is planned to give: a size x position grid per background kind."""
    return len(job.donors) * len(spec.sizes) * len(spec.positions)


def plan_standard_jobs(spec: VariantSpec, index: Mapping[str, list[PartsRef]]) -> dict[str, list[ImageJob]]:
    jobs: dict[str, list[ImageJob]] = {}
    splits = spec.splits
    if spec.holdout is not None:  # carved before donors are drawn: no background crosses the cut
        index = dict(index)
        index[spec.holdout.source], index[spec.holdout.name] = carve_holdout(
            index[spec.holdout.source], spec.holdout.fraction, spec.seed
        )
        splits = splits + (spec.holdout.name,)
    for split in splits:
        refs = index[split]
        by_key = {ref.key: ref for ref in refs}
        foreign = (
            assign_foreign_donors([(ref.class_index, ref.key) for ref in refs], spec.seed, spec.donors)
            if "random" in spec.backgrounds
            else {}
        )
        split_jobs = []
        for ref in refs:
            donors = []
            for kind in spec.backgrounds:
                if kind == "original":
                    donors.append((kind, ref))
                elif kind == "random":
                    donor = foreign[ref.key]
                    donors.append((kind, by_key[donor[1]] if donor else None))
                else:
                    donors.append((kind, None))
            split_jobs.append(ImageJob(ref, split, ref.class_index, tuple(donors)))
        jobs[split] = split_jobs
    return jobs


def plan_jobs(spec: VariantSpec, index: Mapping[str, list[PartsRef]]) -> dict[str, list[ImageJob]]:
    """The jobs of every output split: a variant with its own planning code plans them itself."""
    planning = variant_planning(spec)
    if planning is not None:
        return planning.plan_jobs(spec, index)
    return plan_standard_jobs(spec, index)


def coverage_report(spec: VariantSpec, jobs: Mapping[str, list[ImageJob]]) -> tuple[str, list[str]]:
    """A variant's own table of what the parts give (images per class and split) and the list of
    what it promises but cannot give; empty for variants without such promises."""
    planning = variant_planning(spec)
    if planning is None or not hasattr(planning, "coverage_problems"):
        return "", []
    return planning.coverage_table(spec, jobs), planning.coverage_problems(spec, jobs)


def check_has_work(spec: VariantSpec, jobs: Mapping[str, list[ImageJob]]) -> None:
    """An empty dataset is never what a user meant: say which images were looked for."""
    if any(jobs.get(split) for split in spec.output_splits):
        return
    if spec.subset:
        wanted = ", ".join(f"{w} ({class_of(w).name})" for w in spec.subset.classes)
        raise ConfigError(
            f"the parts splits {list(spec.splits)} hold no image of the {spec.name} classes: {wanted}. "
            "Extract a split that has them (e.g. hsi extract --split train) and list it with --splits."
        )
    raise ConfigError(f"the parts hold no usable image in the splits {list(spec.splits)}; nothing to compose")


def images_per_shard(spec: VariantSpec, jobs: Sequence[ImageJob]) -> int:
    """Whole images per shard so that a shard holds at most about `shard_size` composites."""
    per_image = max((len(job.donors) for job in jobs), default=1) * len(spec.sizes) * len(spec.positions)
    return max(1, spec.shard_size // per_image)
