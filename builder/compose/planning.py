"""Compose planning: which composites each source image gives, and on whose backgrounds.

Donors are fixed here from (seed, key), before any shard is built, so the bytes of every shard are
the same whatever the worker count or the order in which shards finish.

`min_fill` (hsi compose --min-fill SCORE) keeps only inpainted backgrounds whose fill score
(builder.formats.fill_scores) is at least SCORE, in both roles: an image whose own background scores
lower gets no own-background (O) composites, and is no donor of random or paired (R) backgrounds;
its object is still pasted on the (kept) backgrounds of others. A part whose `fill_scores` is null
had nothing to score (nothing was filled) and is kept. Parts without fill scores (schema 1) and
parts whose scores are not four finite numbers are refused before planning (builder.compose.stage).
Without `min_fill` every background is kept and the plan is the one it always was.

A part with no background of its own (`background_status` "none": the erase mask covered the whole
photo, its background is a fill made from nothing) donates no random or paired background unless
the spec's `no_background_donors` says so (--paper-exact does, as the paper kept every part); its
own-background (O) composites are kept either way, and its object is pasted on others' backgrounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from builder.compose.backgrounds import DONOR_KINDS, assign_foreign_donors
from builder.compose.holdout import carve_holdout
from builder.compose.spec import VariantSpec, variant_planning
from builder.core.classes import class_of
from builder.core.config import ConfigError
from builder.core.errors import InputError
from builder.core.taxonomy import group_name
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
    dropped: tuple[str, ...] = ()  # kinds left out by min_fill (its own background scored lower)


def background_kept(spec: VariantSpec, ref: PartsRef) -> bool:
    """Whether `ref`'s inpainted background may be used (own or donor) under the spec's `min_fill`."""
    return spec.min_fill is None or ref.fill_score is None or ref.fill_score >= spec.min_fill


def donor_kept(spec: VariantSpec, ref: PartsRef) -> bool:
    """Whether `ref`'s background may be another image's random or paired background: kept under
    `min_fill`, and a background of its own unless the spec takes those without (`no_background_donors`)."""
    return background_kept(spec, ref) and (ref.has_background or spec.no_background_donors)


def own_background_kinds(spec: VariantSpec, ref: PartsRef, kinds: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """(kinds planned, kinds dropped) of an image: `original` is dropped when its background is not kept."""
    if background_kept(spec, ref):
        return list(kinds), ()
    return [k for k in kinds if k != "original"], tuple(k for k in kinds if k == "original")


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
        donors = [(r.class_index, r.key) for r in refs if donor_kept(spec, r)]
        kept = None if len(donors) == len(refs) else donors  # None: the donors are the receivers
        foreign = (
            assign_foreign_donors([(ref.class_index, ref.key) for ref in refs], spec.seed, spec.donors, kept)
            if "random" in spec.backgrounds
            else {}
        )
        split_jobs = []
        for ref in refs:
            donors = []
            kinds, dropped = own_background_kinds(spec, ref, spec.backgrounds)
            for kind in kinds:
                if kind == "original":
                    donors.append((kind, ref))
                elif kind == "random":
                    donor = foreign[ref.key]
                    donors.append((kind, by_key[donor[1]] if donor else None))
                else:
                    donors.append((kind, None))
            split_jobs.append(ImageJob(ref, split, ref.class_index, tuple(donors), dropped=dropped))
        jobs[split] = split_jobs
    return jobs


def plan_jobs(spec: VariantSpec, index: Mapping[str, list[PartsRef]]) -> dict[str, list[ImageJob]]:
    """The jobs of every output split: a variant with its own planning code plans them itself."""
    planning = variant_planning(spec)
    if planning is not None:
        return planning.plan_jobs(spec, index)
    return plan_standard_jobs(spec, index)


def fill_threshold_problems(spec: VariantSpec, index: Mapping[str, Sequence[PartsRef]]) -> None:
    """Refuse `min_fill` on parts that cannot be filtered: one without fill scores (extracted before
    them, parts schema 1) or whose scores are broken. One line each, before anything is written."""
    refs = [ref for split in spec.splits for ref in index.get(split, [])]
    broken = [ref for ref in refs if ref.fill_problem]
    if broken:
        raise InputError(
            f"parts shard {broken[0].fill_problem}; the parts were changed after "
            "hsi extract wrote them: restore them or re-extract (hsi extract --overwrite)"
        )
    if spec.min_fill is None:
        return
    unscored = [ref for ref in refs if not ref.fill_recorded]
    if unscored:
        raise InputError(
            f"--min-fill {spec.min_fill:g} needs fill scores, and {len(unscored)} of {len(refs)} parts have none "
            f"(e.g. {unscored[0].key} in {unscored[0].split}/{unscored[0].shard}: extracted before fill scores, "
            "parts schema 1); re-extract them with this hsi extract (--overwrite) to score their backgrounds, "
            "or compose without --min-fill"
        )


def apply_fill_threshold(
    spec: VariantSpec, jobs: Mapping[str, list[ImageJob]], unfiltered: Mapping[str, list[ImageJob]]
) -> tuple[dict[str, list[ImageJob]], dict[str, dict[str, int]]]:
    """(the jobs that still give composites, per split what `min_fill` left out): `own` images
    whose own background scored lower (no O composites), `donor` backgrounds of the split left out
    of its donor pool, `composites` planned without the threshold and not with it. A group that
    had composites of a class without the threshold and has none with it is refused (one line)."""
    uses_donors = any(kind in ("random", "paired") for kind in spec.backgrounds)
    dropped: dict[str, dict[str, int]] = {}
    kept_jobs: dict[str, list[ImageJob]] = {}
    for split, split_jobs in jobs.items():
        _refuse_emptied_group(spec, split, split_jobs, unfiltered.get(split, []))
        before = sum(planned_composites(spec, job) for job in unfiltered.get(split, []))
        kept_jobs[split] = [job for job in split_jobs if job.donors]
        dropped[split] = {
            "own": sum("original" in job.dropped for job in split_jobs),
            "donor": sum(not background_kept(spec, job.ref) for job in split_jobs) if uses_donors else 0,
            "composites": before - sum(planned_composites(spec, job) for job in kept_jobs[split]),
        }
    return kept_jobs, dropped


def _given(jobs: Sequence[ImageJob]) -> set[tuple[str, str]]:
    """(wnid, kind) of every background kind some image of a class gets (a donor exists)."""
    return {
        (job.ref.wnid, kind)
        for job in jobs
        for kind, donor in job.donors
        if donor is not None or kind not in DONOR_KINDS
    }


def _refuse_emptied_group(
    spec: VariantSpec, split: str, jobs: Sequence[ImageJob], unfiltered: Sequence[ImageJob]
) -> None:
    lost = sorted(_given(unfiltered) - _given(jobs), key=lambda item: (class_of(item[0]).index, item[1]))
    if not lost:
        return
    wnid, kind = lost[0]
    groups = ", ".join(group_name(position, kind, spec.margin) for position in spec.positions)
    if kind == "original":
        scores = [job.ref.fill_score for job in unfiltered if job.ref.wnid == wnid and job.ref.fill_score is not None]
        count = "its one background scores" if len(scores) == 1 else f"its {len(scores)} backgrounds score"
        best = f"{count} at most {max(scores):.3f}" if scores else "none is kept"
        what = f"no own background (groups {groups}) for class {wnid} ({class_of(wnid).name}): {best}"
    else:
        what = f"no {kind} background (groups {groups}) for class {wnid} ({class_of(wnid).name}): no donor is kept"
    more = f" (and {len(lost) - 1} more class/background pairs)" if len(lost) > 1 else ""
    raise InputError(
        f"--min-fill {spec.min_fill:g} leaves split {split} {what}{more}; lower --min-fill, or re-extract those "
        "images with a better inpainter"
    )


def plan_with_fill_threshold(
    spec: VariantSpec, index: Mapping[str, list[PartsRef]]
) -> tuple[dict[str, list[ImageJob]], dict[str, dict[str, int]] | None]:
    """`plan_jobs` with the spec's `min_fill` applied: (jobs, what it left out per split, or None
    without a threshold)."""
    fill_threshold_problems(spec, index)
    jobs = plan_jobs(spec, index)
    if spec.min_fill is None:
        return jobs, None
    return apply_fill_threshold(spec, jobs, plan_jobs(replace(spec, min_fill=None), index))


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
