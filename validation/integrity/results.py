"""Validation's error rows and the result of checking one dataset: one `Issue` per failure, its
reasons from the closed list, and the tolerance the pixel comparison allows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from PIL import Image

from builder.core.errors import InputError
from builder.core.manifest import MANIFEST_NAME
from builder.core.records import Issue, count_by_reason

# Mean absolute difference (0-255) allowed between the composite's pasted region and the resized
# crop. JPEG at the qualities compose uses stays well below this; a box moved off the object does not.
DEFAULT_PLACEMENT_TOLERANCE = 12.0
# What a member that does not decode raises: Pillow's decompression-bomb refusal is none of the others.
DECODE_ERRORS = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


def check_tolerance(tolerance: float) -> float:
    """The placement tolerance as a finite, non-negative float: NaN would make every comparison pass."""
    try:
        value = float(tolerance)
    except (TypeError, ValueError):
        raise InputError(
            f"--tolerance {tolerance!r} is not a number; pass a mean pixel difference 0-255 (default "
            f"{DEFAULT_PLACEMENT_TOLERANCE})"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise InputError(
            f"--tolerance {tolerance!r} must be a finite number >= 0 (a mean pixel difference 0-255, "
            f"default {DEFAULT_PLACEMENT_TOLERANCE}); NaN or infinity would disable the placement check"
        )
    return value


def describe_value(value) -> str:
    """A value with its type when it is not a plain int, so `'96'` never reads like 96."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{value!r} ({type(value).__name__})"


STAGE = "validate"  # the stage of every row validation writes


def failure(
    reason: str, detail: str, split: str | None = None, shard: str | None = None, key: str | None = None
) -> Issue:
    """An integrity failure as an error row: it names the sample key, else the shard, else the manifest."""
    return Issue(key or shard or MANIFEST_NAME, reason, detail, STAGE, split=split, shard=shard, key=key)


def failure_line(row: Issue) -> str:
    """`shard/key: reason: detail`, the line `hsi validate` prints for a failure."""
    where = "/".join(part for part in (row.shard, row.key) if part) or MANIFEST_NAME
    return f"{where}: {row.reason}: {row.detail}"


@dataclass
class IntegrityResult:
    stage: str
    samples_checked: int = 0
    shards_checked: int = 0
    placements_compared: int = 0
    backgrounds_compared: int = 0
    failures: list[Issue] = field(default_factory=list)
    counts: dict = field(default_factory=dict)
    tolerance: float = DEFAULT_PLACEMENT_TOLERANCE
    shard_sha256: dict[str, str] = field(default_factory=dict)  # every shard read: its sha256 on disk
    source_ids: list[str] = field(default_factory=list)  # composites: the source images they were cut from

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "stage": self.stage,
            "samples_checked": self.samples_checked,
            "shards_checked": self.shards_checked,
            "placements_compared": self.placements_compared,
            "backgrounds_compared": self.backgrounds_compared,
            "tolerance": self.tolerance,
            "failures_by_reason": count_by_reason(self.failures),
            "failures": [f.to_json() for f in self.failures],
            "counts": self.counts,
        }
