"""The shard files against the manifest: each listed shard exists, has its recorded size, sha256 and
sample count, holds only safe members; and the totals per split, group, size and tier match."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from builder.core.hashing import sha256_file
from builder.core.manifest import MANIFEST_NAME, ShardStats
from builder.core.records import Issue
from builder.core.shard_read import ShardReadError, iter_shard
from builder.formats.composites import (
    count_buckets,
)
from validation.integrity.results import describe_value, failure


def read_shard_members(
    path: Path, shard: str, split: str, failures: list[Issue]
) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Samples of a shard, tolerating bad members: each becomes a failure and is skipped."""

    def record(error: ShardReadError) -> None:
        failures.append(failure(error.reason, error.detail, split, shard, error.key))

    return iter_shard(path, handler=record)


def safe_shard_name(name) -> bool:
    """A listed shard must be one plain file name inside the dataset folder."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and not name.startswith(".")
    )


def check_shard_file(dataset_dir: Path, split: str, entry: ShardStats, failures: list[Issue]) -> str | None:
    """Existence, byte size and sha256 of one listed shard: its sha256 on disk, None when missing."""
    name = entry.filename
    if not safe_shard_name(name):
        failures.append(
            failure(
                "unsafe-shard-name", f"{name!r} is not a plain file name inside the dataset folder", split, str(name)
            )
        )
        return None
    path = dataset_dir / name
    if not path.is_file() or path.is_symlink():
        failures.append(failure("missing-shard", f"listed in {MANIFEST_NAME} but not a file on disk", split, name))
        return None
    size = path.stat().st_size
    if size != entry.bytes:
        failures.append(
            failure("shard-size", f"{size} bytes on disk, manifest says {describe_value(entry.bytes)}", split, name)
        )
    digest = sha256_file(path)
    if digest != entry.sha256:
        failures.append(
            failure(
                "shard-sha256",
                f"sha256 {digest[:16]}... differs from the manifest's {entry.sha256[:16]}...",
                split,
                name,
            )
        )
    return digest


def tally(counts: dict, meta: dict) -> None:
    """Count a sample the way compose counts it (the composite format's buckets)."""
    for kind, name in count_buckets(meta).items():
        bucket = counts.setdefault(kind, {})
        bucket[name] = bucket.get(name, 0) + 1


def _normalise_counts(counts: dict) -> dict:
    """Counts with string keys and without empty buckets, so both sides compare alike."""
    return {
        kind: {str(k): int(v) for k, v in sorted(bucket.items()) if v}
        for kind, bucket in sorted(counts.items())
        if isinstance(bucket, dict)
    }


def compare_counts(split: str, declared: dict, found: dict, failures: list[Issue]) -> None:
    declared, found = _normalise_counts(declared), _normalise_counts(found)
    for kind in sorted(set(declared) | set(found)):
        ours, theirs = found.get(kind, {}), declared.get(kind, {})
        for bucket in sorted(set(ours) | set(theirs)):
            if ours.get(bucket, 0) != theirs.get(bucket, 0):
                failures.append(
                    failure(
                        "count-mismatch",
                        f"{kind} {bucket}: manifest says {theirs.get(bucket, 0)}, shards hold {ours.get(bucket, 0)}",
                        split,
                    )
                )
