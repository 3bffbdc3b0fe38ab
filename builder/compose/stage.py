"""The compose stage: parts + a variant spec + a seed -> composites as deterministic WebDataset shards.

Two passes keep memory flat in the number of source images:
1. `builder.formats.parts_index` indexes the parts by tar offset (reading only their `json` members)
   and `builder.compose.planning` fixes every image's composites and background donors from (seed, key).
2. Shards of source images are built independently (`builder.compose.shard_builder`, in worker
   processes if asked): each job reads its own crop and the backgrounds it needs (its own, a
   donor's) by offset or from the background cache, resizes them, pastes, and encodes JPEGs, so the
   bytes of every shard are the same whatever the worker count or the order in which shards finish.

The manifest (`_info.json`) is written last, with per-split counts by group, size and tier.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from builder.compose.background_cache import (
    CACHE_DIR,
    fill_background_cache,
)
from builder.compose.backgrounds import DONOR_KINDS
from builder.compose.parts_input import index_checked_parts, read_parts_manifest_checked, verify_parts_shards
from builder.compose.planning import (
    check_has_work,
    coverage_report,
    images_per_shard,
    plan_with_fill_threshold,
    planned_composites,
)
from builder.compose.shard_builder import ComposeShardBuilder
from builder.compose.spec import VariantSpec, load_variant
from builder.compose.tables import format_table
from builder.core.classes import class_of, imagenet_classes
from builder.core.config import canonical_json, fingerprint
from builder.core.errors import InputError
from builder.core.manifest import COMPOSITES, Manifest, SplitEntry
from builder.core.records import Issue
from builder.core.runner import (
    ShardPlan,
    load_finished,
    plan_shards,
)
from builder.core.stage import RunOptions, Stage, StageOutcome, run_stage
from builder.core.taxonomy import sorted_groups
from builder.formats.composites import (
    SCHEMA_VERSION,
    iter_composite_json,
    merge_counts,
)
from builder.formats.fill_scores import summarise_fill_scores
from builder.formats.parts_index import PartsRef, resolve_parts_dir

TOOL_NAME = "hard-spurious-imagenet"
SPEC_NAME = "spec.yaml"


# --- the stage --------------------------------------------------------------------------------


def summary_table(manifest: dict) -> str:
    """Counts per group (rows) x size (columns), one block per split."""
    sizes = [str(s) for s in manifest["spec"]["sizes"]]
    lines = []
    for split, entry in manifest["splits"].items():
        by_pair = entry["counts"]["group_size"]
        groups = sorted_groups(entry["counts"]["group"])
        header = [f"{manifest['config']} / {split}", *sizes, "total"]
        rows = [
            [g, *[str(by_pair.get(f"{g}/{s}", 0)) for s in sizes], str(entry["counts"]["group"][g])] for g in groups
        ]
        rows.append(["total", *[str(entry["counts"]["size"].get(s, 0)) for s in sizes], str(entry["num_samples"])])
        lines += [*format_table(header, rows), ""]
    errors = manifest["errors"]
    lines.append(
        f"errors: {errors['total']}"
        + (f" ({', '.join(f'{k}: {v}' for k, v in errors['by_reason'].items())})" if errors["total"] else "")
    )
    return "\n".join(lines)


@dataclass(frozen=True)
class ComposeSummary:
    dataset_dir: Path
    manifest: dict
    table: str
    reused_shards: int = 0


def class_names(spec: VariantSpec) -> list[str]:
    if spec.subset:
        return [class_of(wnid).name for wnid in spec.subset.classes]
    return [c.name for c in imagenet_classes()]


def output_settings(spec: VariantSpec, parts_manifest: dict) -> dict:
    """What decides the output bytes; a folder made with other settings is never resumed."""
    return compose_settings(spec.to_json(), parts_manifest.get("fingerprint"), SCHEMA_VERSION)


def compose_settings(spec: dict, parts_fingerprint: str | None, schema_version: int) -> dict:
    """The settings a composed manifest's `fingerprint` is the fingerprint of, from the fields it also
    records (`spec`, `parts.fingerprint`, `schema_version`): so `hsi verify` can recompute it."""
    return {"stage": "compose", "spec": spec, "parts_fingerprint": parts_fingerprint, "schema_version": schema_version}


def build_notes(spec: VariantSpec, parts_manifest: dict) -> list[str]:
    """What a reader of this build should know that the spec alone does not say."""
    notes = []
    masker = ((parts_manifest.get("backends") or {}).get("masker") or {}).get("name")
    if spec.paste == "mask" and masker == "box":
        notes.append(
            "--paste mask on parts from the box masker: every mask is the whole box, so these composites "
            "are identical to --paste box; extract with a segmenting masker (sam) for object-shaped pastes"
        )
    return notes


def write_spec(dataset_dir: Path, spec: VariantSpec) -> None:
    """The resolved spec as YAML, reusable as `--variant` to rebuild the same dataset."""
    import yaml

    text = yaml.safe_dump(spec.to_json(), sort_keys=True, allow_unicode=True)
    (dataset_dir / SPEC_NAME).write_text(
        f"# resolved spec of {spec.name}; fingerprint {spec.fingerprint}\n{text}", "utf-8"
    )


class ComposeStage(Stage):
    """Parts + a variant spec -> one composed dataset folder, `OUT/<config>/`."""

    name: ClassVar[str] = "compose"
    holds: ClassVar[str] = COMPOSITES

    def __init__(
        self,
        parts_dir: Path,
        variant: str,
        out_root: Path,
        overrides: Mapping | None = None,
        allow_missing: bool = False,
    ) -> None:
        self.spec = load_variant(variant, dict(overrides or {}))
        self.parts_dir = resolve_parts_dir(Path(parts_dir))
        typed_parts = read_parts_manifest_checked(self.parts_dir, self.spec.splits)
        verify_parts_shards(self.parts_dir, typed_parts, self.spec.splits)
        self.parts_manifest = typed_parts.to_json()
        self.out_dir = Path(out_root) / self.spec.name
        self._settings = json.loads(canonical_json(output_settings(self.spec, self.parts_manifest)))
        self.index, self.index_issues = index_checked_parts(self.parts_dir, typed_parts, self.spec.splits)
        # --min-fill refused on parts without scores, and when it would empty a group (one line)
        self.jobs, self.fill_dropped = plan_with_fill_threshold(self.spec, self.index)
        check_has_work(self.spec, self.jobs)  # refused here, before the folder is touched
        self.notes = build_notes(self.spec, self.parts_manifest)
        self.coverage, self.missing = coverage_report(self.spec, self.jobs)
        if self.missing and not allow_missing:
            raise InputError(
                f"the parts cannot give what {self.spec.name} promises: "
                + "; ".join(self.missing)
                + f".\n{self.coverage}Extract the missing classes (e.g. add --splits train,val), or pass "
                "--allow-missing to build it anyway (the manifest then lists what is missing)."
            )
        self._plans: list[ShardPlan] = []
        for split in self.spec.output_splits:
            split_jobs = self.jobs.get(split, [])
            if split_jobs:
                self._plans.extend(plan_shards(split, split_jobs, images_per_shard(self.spec, split_jobs)))
        self.cache_dir = self.out_dir / f"{CACHE_DIR}.{os.getpid()}"  # per run: a cache is never shared
        self.cache_failures: tuple[tuple[str, str, str], ...] = ()

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.spec.output_splits)

    def settings(self) -> dict:
        return self._settings

    def plans(self) -> list[ShardPlan]:
        return self._plans

    def planning_issues(self) -> list[Issue]:
        return list(self.index_issues)

    progress_unit: ClassVar[str] = "composite"

    def progress_label(self) -> str:
        return f"compose {self.spec.name}"

    def progress_total(self, plan: ShardPlan) -> int:
        """The composites planned: the bar counts composites, as the builder reports them."""
        return sum(planned_composites(self.spec, job) for job in plan.items)

    def before_run(self, plans: Sequence[ShardPlan], options: RunOptions) -> None:
        for stale in self.out_dir.glob(f"{CACHE_DIR}.*"):  # left by a killed run of ours (the folder is locked)
            if re.fullmatch(rf"{re.escape(CACHE_DIR)}\.\d+", stale.name) and stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale)
        write_spec(self.out_dir, self.spec)
        # Backgrounds are decoded once into a disk cache, only for shards still to be built.
        unfinished = [job for plan in plans if load_finished(self.out_dir, plan) is None for job in plan.items]
        donors = [donor for job in unfinished for _, donor in job.donors if donor is not None]
        self.cache_failures = fill_background_cache(
            self.parts_dir,
            self.cache_dir,
            self.index,
            donors,
            self.spec.canvas,
            self.spec.resize_filter,
            options.workers,
            options.progress,
        )

    def after_run(self) -> None:
        shutil.rmtree(self.cache_dir, ignore_errors=True)

    def shard_builder(self) -> ComposeShardBuilder:
        return ComposeShardBuilder(
            self.spec, str(self.parts_dir), str(self.out_dir), str(self.cache_dir), self.cache_failures
        )

    def background_fill_rows(self, filenames: Sequence[str]) -> list[dict | None]:
        """The fill scores of the background of every composite of these shards that sits on an
        inpainted background (own, random or paired; None where that part has no scores)."""
        parts: dict[str, PartsRef] = {}
        for refs in self.index.values():
            for ref in refs:
                parts.setdefault(ref.key, ref)
        rows: list[dict | None] = []
        for filename in filenames:
            for meta in iter_composite_json(self.out_dir / filename):
                if meta.get("background") in DONOR_KINDS:
                    ref = parts.get(meta.get("background_source_id"))
                    rows.append(ref.fill_scores_json() if ref is not None else None)
        return rows

    def manifest(self, outcome: StageOutcome) -> Manifest:
        spec, parts_manifest = self.spec, self.parts_manifest
        splits: dict[str, SplitEntry] = {}
        for split in spec.output_splits:
            split_results = outcome.results_of(split)
            stats = [r.stats for r in split_results]
            splits[split] = SplitEntry(
                split,
                stats,
                counts=merge_counts([r.counts for r in split_results]),
                source_images=len(self.jobs.get(split, [])),
                fill_scores=summarise_fill_scores(self.background_fill_rows([s.filename for s in stats])),
                min_fill_dropped=None if self.fill_dropped is None else self.fill_dropped.get(split),
            )
        return Manifest(
            stage=self.name,
            config=spec.name,
            fingerprint=fingerprint(self._settings),
            spec_fingerprint=spec.fingerprint,
            spec=spec.to_json(),
            parts={
                "fingerprint": parts_manifest.get("fingerprint"),
                "backends": parts_manifest.get("backends"),
                "splits": {s: parts_manifest["splits"][s].get("num_samples") for s in spec.splits},
            },
            schema_version=SCHEMA_VERSION,
            splits=splits,
            errors=outcome.errors,
            class_names=class_names(spec),
            allowed_missing=list(self.missing) or None,
            notes=list(self.notes) or None,
        )


def compose_dataset(
    parts_dir: Path,
    variant: str,
    out_root: Path,
    *,
    options: RunOptions = RunOptions(),
    overrides: Mapping | None = None,
    allow_missing: bool = False,
) -> ComposeSummary:
    """Compose `variant` (a name or a YAML spec path, with `overrides`) from the parts in
    `parts_dir` into `out_root/<config>`; finished shards of an earlier run are reused. A variant
    that promises classes or groups the parts lack is refused unless `allow_missing`."""
    options.check()
    stage = ComposeStage(parts_dir, variant, out_root, overrides, allow_missing)
    run = run_stage(stage, options)
    manifest = run.manifest.to_json()
    missing = "".join(f"missing (--allow-missing): {line}\n" for line in stage.missing)
    notes = "".join(f"note: {line}\n" for line in stage.notes)
    return ComposeSummary(
        stage.out_dir, manifest, stage.coverage + missing + notes + summary_table(manifest), run.shards_reused
    )
