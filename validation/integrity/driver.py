"""Checking a whole dataset: one task per listed shard, run in worker processes when asked, merged in
manifest order so the result is the same for any worker count."""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from builder.compose.spec import spec_from_json
from builder.core.config import ConfigError
from builder.core.errors import HsiError, InputError
from builder.core.manifest import COMPOSITES, MANIFEST_NAME, Manifest, ManifestError, ShardStats, SplitEntry, format_of
from builder.core.runner import init_worker, stop_pool
from validation.integrity.pixels import PartsLookup
from validation.integrity.results import (
    DEFAULT_PLACEMENT_TOLERANCE,
    IntegrityResult,
    check_tolerance,
    describe_value,
    failure,
)
from validation.integrity.samples import SampleChecker
from validation.integrity.shard_files import check_shard_file, compare_counts, read_shard_members


@dataclass(frozen=True)
class ShardTask:
    """One listed shard to check; picklable, so worker processes can run it."""

    dataset_dir: str
    split: str
    entry: ShardStats
    stage: str
    class_names: list | None
    spec: dict
    parts_dir: str | None
    tolerance: float


@dataclass
class ShardCheck:
    """What checking one shard found; merged in manifest order by `check_dataset`."""

    result: IntegrityResult
    counts: dict
    keys: list[str]
    read: bool


_LOOKUPS: dict[str, PartsLookup] = {}  # per process: the parts index is built once, not per shard


def _parts_lookup(parts_dir: str | None) -> PartsLookup | None:
    if parts_dir is None:
        return None
    if parts_dir not in _LOOKUPS:
        _LOOKUPS[parts_dir] = PartsLookup.build(Path(parts_dir))
    return _LOOKUPS[parts_dir]


def close_lookups() -> None:
    while _LOOKUPS:
        _LOOKUPS.popitem()[1].close()


def check_shard(task: ShardTask) -> ShardCheck:
    """Every check of one shard and its samples (cross-shard checks are left to the merge)."""
    result = IntegrityResult(task.stage, tolerance=task.tolerance)
    name = task.entry.filename
    digest = check_shard_file(Path(task.dataset_dir), task.split, task.entry, result.failures)
    if digest is None:
        return ShardCheck(result, {}, [], False)
    result.shard_sha256[name] = digest
    result.shards_checked = 1
    checker = SampleChecker(
        task.split,
        task.class_names,
        _parts_lookup(task.parts_dir),
        task.tolerance,
        result,
        task.spec.get("resize_filter"),
        task.spec,
    )
    check_sample = checker.composite if format_of(task.stage) == COMPOSITES else checker.parts_sample
    counts: dict = {}
    keys: list[str] = []
    in_shard: dict[str, int] = {}
    for key, members in read_shard_members(Path(task.dataset_dir) / name, name, task.split, result.failures):
        if key in in_shard:
            result.failures.append(failure("duplicate-key", f"key also in {name}", task.split, name, key))
        in_shard[key] = 1
        keys.append(key)
        check_sample(name, key, members, counts)
    result.samples_checked = len(keys)
    if len(keys) != task.entry.num_samples:
        declared = describe_value(task.entry.num_samples)
        result.failures.append(
            failure("shard-count", f"holds {len(keys)} samples, manifest says {declared}", task.split, name)
        )
    return ShardCheck(result, counts, keys, True)


def _add_counts(total: dict, counts: dict) -> None:
    for kind, bucket in counts.items():
        into = total.setdefault(kind, {})
        for name, value in bucket.items():
            into[name] = into.get(name, 0) + value


class ValidationInterrupted(HsiError):
    """Ctrl-C during the checks: the workers are stopped and no report is written."""

    exit_status = 130


def _map_shards(tasks: list[ShardTask], workers: int) -> list[ShardCheck]:
    """`check_shard` over the tasks, in worker processes when asked, results in task order."""
    done: list[ShardCheck] = []
    try:
        if workers <= 1 or len(tasks) <= 1:
            try:
                for task in tasks:
                    done.append(check_shard(task))
                return done
            finally:
                close_lookups()
        context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        pool = ProcessPoolExecutor(
            max_workers=min(workers, len(tasks)),
            mp_context=context,
            initializer=init_worker,
            initargs=(context.Value("q", 0),),
        )
        try:
            done.extend(pool.map(check_shard, tasks))
        except BaseException:
            stop_pool(pool)
            raise
        pool.shutdown(wait=True)
        return done
    except KeyboardInterrupt:
        raise ValidationInterrupted(
            f"interrupted after {len(done)} of {len(tasks)} shards; no report was written "
            "(an earlier one was removed): run the same command again"
        ) from None


def load_manifest(dataset_dir: Path) -> Manifest:
    """The typed manifest (a malformed one is refused with the field at fault), of a stage whose
    folders hold parts or composites."""
    manifest = Manifest.read(dataset_dir)
    if manifest.holds is None:
        raise InputError(
            f"{dataset_dir / MANIFEST_NAME}: stage {manifest.stage!r} is neither compose nor extract; "
            "validate a composed config folder or a parts folder"
        )
    return manifest


def resolved_spec(manifest: Manifest) -> dict:
    """Every field of a composed folder's spec, defaults from the spec type (`builder.compose.spec`),
    as a plain dict for the workers; {} for a folder without one (parts)."""
    if manifest.spec is None:
        return {}
    try:
        return asdict(spec_from_json(manifest.spec, MANIFEST_NAME))
    except ConfigError as exc:
        raise ManifestError(f"{exc}; the dataset was not composed by this tool, or its manifest was edited") from None


def check_dataset(
    dataset_dir: Path, parts_dir: Path | None = None, tolerance: float = DEFAULT_PLACEMENT_TOLERANCE, workers: int = 1
) -> IntegrityResult:
    """Every integrity check of a composed dataset or a parts folder (by its manifest's stage).

    A malformed manifest is refused (`ManifestError`); every problem below it is a failure row."""
    dataset_dir = Path(dataset_dir)
    tolerance = check_tolerance(tolerance)
    manifest = load_manifest(dataset_dir)
    stage = manifest.stage
    result = IntegrityResult(stage, tolerance=tolerance)
    parts = str(parts_dir) if parts_dir is not None and format_of(stage) == COMPOSITES else None
    spec = resolved_spec(manifest)  # refused here, once, rather than in every worker
    tasks, listed = [], Counter()
    for split in sorted(manifest.splits):
        for shard in manifest.splits[split].shards:
            listed[shard.filename] += 1
            if listed[shard.filename] == 1:
                tasks.append(
                    ShardTask(
                        str(dataset_dir),
                        split,
                        shard,
                        stage,
                        manifest.class_names,
                        spec,
                        parts,
                        tolerance,
                    )
                )
    for name, times in sorted(listed.items()):
        if times > 1:
            result.failures.append(failure("duplicate-shard", f"listed {times} times in {MANIFEST_NAME}", None, name))
    checks = _map_shards(tasks, workers)
    seen: dict[str, str] = {}
    for split in sorted(manifest.splits):
        _merge_split(
            split,
            manifest.splits[split],
            stage,
            [(t, c) for t, c in zip(tasks, checks) if t.split == split],
            result,
            seen,
        )
    return result


def _merge_split(
    split: str,
    entry: SplitEntry,
    stage: str,
    checked: list[tuple[ShardTask, ShardCheck]],
    result: IntegrityResult,
    seen: dict[str, str],
) -> None:
    """The shard results of one split, in manifest order, with the split's own checks: derived
    fields, keys across shards, totals and counts. `seen` maps every key met so far to its shard."""
    if entry.recorded_filenames is not None and list(entry.recorded_filenames) != entry.filenames:
        result.failures.append(failure("manifest", "filenames and shards list different files", split))
    if entry.recorded_lengths is not None and list(entry.recorded_lengths) != entry.shard_lengths:
        result.failures.append(failure("manifest", "shard_lengths disagree with the shards' num_samples", split))
    counts: dict = {}
    total = 0
    for task, check in checked:
        name = task.entry.filename
        part = check.result
        result.failures.extend(part.failures)
        for key in check.keys:
            if key in seen and seen[key] != name:
                result.failures.append(failure("duplicate-key", f"key also in {seen[key]}", split, name, key))
            seen.setdefault(key, name)
        result.shards_checked += part.shards_checked
        result.samples_checked += part.samples_checked
        result.placements_compared += part.placements_compared
        result.backgrounds_compared += part.backgrounds_compared
        result.shard_sha256.update(part.shard_sha256)
        result.source_ids.extend(part.source_ids)
        _add_counts(counts, check.counts)
        total += part.samples_checked
    if total != entry.num_samples:
        result.failures.append(
            failure(
                "split-count",
                f"shards hold {total} samples, manifest says {describe_value(entry.num_samples)}",
                split,
            )
        )
    if format_of(stage) == COMPOSITES:
        compare_counts(split, entry.counts or {}, counts, result.failures)
    result.counts[split] = {"num_samples": total, **{k: dict(sorted(v.items())) for k, v in sorted(counts.items())}}
