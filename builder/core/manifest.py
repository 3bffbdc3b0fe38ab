"""The typed manifest (`_info.json`) of every stage's output folder, written last.

One `Manifest` per folder: the stage that wrote it, the tool, a fingerprint of what decides the
bytes, the error counts, and one `SplitEntry` per split with its shards (filename, samples, bytes,
sha256) in the form timm's WebDataset reader accepts (`name`, `num_samples`, `filenames`,
`shard_lengths`). Stage-specific fields are typed and optional; a field a stage does not set is left
out of the JSON rather than written as null, so a manifest reads the same as the stage wrote it.

Validation, cards and publishing read only the manifest; they never rescan a folder to learn what
exists. `Manifest.read` refuses, with a message naming the field, anything that is not a manifest
of this toolkit.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from builder.core.errors import InputError, first_few, shown
from builder.core.names import UnsafeNameError, check_config_name, check_split_name

MANIFEST_NAME = "_info.json"
ERRORS_NAME = "errors.jsonl"
TOOL_NAME = "hard-spurious-imagenet"


# What each stage's folder holds. Validation, cards and publishing dispatch on this, never on a
# stage's name, so a new stage whose output is, say, composites is checked and released like
# compose's; a stage registers itself here (`builder.core.stage.Stage` does it for its subclasses).
PARTS, COMPOSITES = "parts", "composites"
# scgs (builder.augment.stage) is listed here too: `hsi validate` reads its folders without importing it.
STAGE_OUTPUTS: dict[str, str] = {"extract": PARTS, "compose": COMPOSITES, "scgs": COMPOSITES}


def register_stage_output(stage: str, holds: str) -> None:
    if STAGE_OUTPUTS.setdefault(stage, holds) != holds:
        raise ValueError(f"stage {stage!r} is registered as holding {STAGE_OUTPUTS[stage]}, not {holds}")


def format_of(stage: str | None) -> str | None:
    """What a folder written by `stage` holds (PARTS, COMPOSITES), or None for an unknown stage."""
    return STAGE_OUTPUTS.get(stage) if stage else None


class ManifestError(InputError):
    """A manifest that is missing, unreadable or not of the form this toolkit writes."""


class NotADataset(ManifestError, FileNotFoundError):
    """The folder holds no finished manifest (the manifest is written last)."""


@dataclass(frozen=True)
class ShardStats:
    filename: str
    num_samples: int
    bytes: int
    sha256: str

    def to_json(self) -> dict:
        return {"filename": self.filename, "num_samples": self.num_samples, "bytes": self.bytes, "sha256": self.sha256}

    def count_problem(self, found: int) -> str | None:
        """What is wrong when the shard, read, holds `found` samples: the count is taken from the
        shard, and a manifest that says otherwise is not the shard's (its sha256 can be true while
        its counts are not). None when they agree."""
        if found == self.num_samples:
            return None
        return f"{self.filename} holds {found} samples but its manifest says {self.num_samples}"


@dataclass(frozen=True)
class ErrorCounts:
    total: int = 0
    by_reason: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, by_reason: Mapping[str, int]) -> ErrorCounts:
        ordered = dict(sorted(by_reason.items()))
        return cls(sum(ordered.values()), ordered)

    def to_json(self) -> dict:
        return {"total": self.total, "by_reason": dict(self.by_reason)}


@dataclass
class SplitEntry:
    """One split: its shards, plus what the stage counted (compose) or listed (extract)."""

    name: str
    shards: list[ShardStats]
    fingerprint: str | None = None  # extract: each split has its own settings
    images_listed: int | None = None  # extract: images found in the source listing
    errors: ErrorCounts | None = None  # extract: issues of this split
    counts: dict[str, dict[str, int]] | None = None  # compose: by group, size, tier, group/size
    source_images: int | None = None  # compose: source images planned for this split
    # extract: summary of the parts' fill scores (builder.formats.fill_scores); compose: of the
    # backgrounds its composites use, one row per composite on an inpainted background
    fill_scores: dict | None = None
    # compose --min-fill: what the threshold left out, {own, donor, composites} (builder.compose.planning)
    min_fill_dropped: dict[str, int] | None = None
    # The derived lists as the file recorded them (None when built in memory): validation compares
    # them with the shards; they are never written back (to_json derives them).
    recorded_filenames: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    recorded_lengths: tuple[int, ...] | None = field(default=None, compare=False, repr=False)

    @property
    def num_samples(self) -> int:
        return sum(s.num_samples for s in self.shards)

    @property
    def filenames(self) -> list[str]:
        return [s.filename for s in self.shards]

    @property
    def shard_lengths(self) -> list[int]:
        return [s.num_samples for s in self.shards]

    def to_json(self) -> dict:
        data: dict[str, Any] = {
            "name": self.name,
            "num_samples": self.num_samples,
            "filenames": self.filenames,
            "shard_lengths": self.shard_lengths,
            "shards": [s.to_json() for s in self.shards],
        }
        for name in ("fingerprint", "images_listed", "counts", "source_images", "fill_scores", "min_fill_dropped"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        if self.errors is not None:
            data["errors"] = self.errors.to_json()
        return data

    @classmethod
    def from_json(cls, name: str, data: Any) -> SplitEntry:
        where = f"splits.{name}"
        _expect(isinstance(data, Mapping), where, f"must be an object, got {type(data).__name__}")
        raw_shards = data.get("shards")
        _expect(isinstance(raw_shards, list), f"{where}.shards", f"must be a list, got {type(raw_shards).__name__}")
        shards = [_shard_stats(s, f"{where}.shards[{i}]") for i, s in enumerate(raw_shards)]
        entry = cls(
            name=name,
            shards=shards,
            fingerprint=_optional(data, "fingerprint", str, where),
            images_listed=_optional(data, "images_listed", int, where),
            errors=_error_counts(data["errors"], f"{where}.errors") if "errors" in data else None,
            counts=_counts(data["counts"], f"{where}.counts") if data.get("counts") is not None else None,
            source_images=_optional(data, "source_images", int, where),
            fill_scores=_fill_summary(data["fill_scores"], f"{where}.fill_scores") if "fill_scores" in data else None,
            min_fill_dropped=(
                _tally(data["min_fill_dropped"], f"{where}.min_fill_dropped") if "min_fill_dropped" in data else None
            ),
        )
        if "num_samples" in data:
            _expect(
                _is_int(data["num_samples"]),
                f"{where}.num_samples",
                f"must be an integer, got {type(data['num_samples']).__name__} {shown(data['num_samples'])}",
            )
            _expect(
                data["num_samples"] == entry.num_samples,
                f"{where}.num_samples",
                f"says {shown(data['num_samples'])} but its shards hold {entry.num_samples}",
            )
        for key, kind in (("filenames", str), ("shard_lengths", int)):
            values = data.get(key, [])
            _expect(
                isinstance(values, list) and all(isinstance(v, kind) and not isinstance(v, bool) for v in values),
                f"{where}.{key}",
                f"must be a list of {'file names' if kind is str else 'integers'}",
            )
        entry.recorded_filenames = tuple(data.get("filenames", []))
        entry.recorded_lengths = tuple(data.get("shard_lengths", []))
        return entry


@dataclass
class Manifest:
    """What a stage wrote into one folder. `stage` names the stage (see `builder.core.stage`)."""

    stage: str
    splits: dict[str, SplitEntry]
    fingerprint: str
    schema_version: int
    errors: ErrorCounts
    tool: Mapping[str, str] = field(default_factory=lambda: {"name": TOOL_NAME, "version": _tool_version()})
    # extract
    backends: dict | None = None
    settings: dict | None = None
    # compose
    config: str | None = None
    spec: dict | None = None
    spec_fingerprint: str | None = None
    parts: dict | None = None
    class_names: list[str] | None = None
    # compose, built with --allow-missing: what the variant promises and this build lacks (cards say it)
    allowed_missing: list[str] | None = None
    # compose: facts about the build a reader should know (e.g. --paste mask on box-masker parts)
    notes: list[str] | None = None
    # scgs: what was regenerated and the label check (builder.augment.stage)
    augment: dict | None = None

    OPTIONAL = (
        "backends",
        "settings",
        "config",
        "spec",
        "spec_fingerprint",
        "parts",
        "class_names",
        "allowed_missing",
        "notes",
        "augment",
    )

    @property
    def num_samples(self) -> int:
        return sum(entry.num_samples for entry in self.splits.values())

    @property
    def holds(self) -> str | None:
        """PARTS or COMPOSITES: what this folder holds, by the stage that wrote it."""
        return format_of(self.stage)

    def split(self, name: str) -> SplitEntry:
        if name not in self.splits:
            raise ManifestError(
                f"split {shown(name)} is not in this folder; it holds "
                f"{first_few(sorted(self.splits), 10) or 'no split'}"
            )
        return self.splits[name]

    def shard_sha256(self) -> dict[str, str]:
        """{shard filename: sha256} of every split: what validation records as checked and release
        compares with the manifest, so a report never vouches for other bytes."""
        return {s.filename: s.sha256 for entry in self.splits.values() for s in entry.shards}

    def shard_paths(self, folder: Path, split: str | None = None) -> list[Path]:
        names = [split] if split else sorted(self.splits)
        return [Path(folder) / filename for name in names for filename in self.split(name).filenames]

    def to_json(self) -> dict:
        data: dict[str, Any] = {
            "stage": self.stage,
            "tool": dict(self.tool),
            "fingerprint": self.fingerprint,
            "schema_version": self.schema_version,
            "errors": self.errors.to_json(),
            "splits": {name: entry.to_json() for name, entry in self.splits.items()},
        }
        for name in self.OPTIONAL:
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return data

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        _expect(isinstance(data, Mapping), "manifest", "must be a JSON object")
        for key, kind in (("stage", str), ("splits", Mapping), ("errors", Mapping)):
            _expect(key in data, key, "is missing")
            _expect(
                isinstance(data[key], kind),
                key,
                f"must be {'an object' if kind is Mapping else 'a string'}, got {type(data[key]).__name__}",
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        listed = ", ".join(shown(k) for k in unknown[:5])
        _expect(not unknown, "manifest", f"has unknown fields [{listed}]{_more(unknown, 5)}")
        optional = {name: data[name] for name in cls.OPTIONAL if name in data}
        for name in ("allowed_missing", "notes"):
            lines = _optional(data, name, list, "manifest")
            _expect(all(isinstance(line, str) for line in lines or []), f"manifest.{name}", "must list strings")
        # the config and split names become paths and headings: the one name check, where they enter
        if data.get("config") is not None:
            _checked_name(check_config_name, data["config"], "manifest.config")
        for name in data["splits"]:
            _checked_name(check_split_name, name, "manifest.splits")
        return cls(
            stage=data["stage"],
            splits={str(name): SplitEntry.from_json(str(name), entry) for name, entry in data["splits"].items()},
            fingerprint=_optional(data, "fingerprint", str, "manifest") or "",
            schema_version=_optional(data, "schema_version", int, "manifest") or 0,
            errors=_error_counts(data["errors"], "errors"),
            tool=_optional(data, "tool", dict, "manifest") or {},
            **optional,
        )

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        path = Path(folder) / MANIFEST_NAME
        if not (Path(folder).exists() or Path(folder).is_symlink()):
            raise NotADataset(f"no such folder: {folder}")
        if not path.is_file():
            raise NotADataset(
                f"{path} does not exist: {folder} is not a finished dataset "
                "(the manifest is written last; re-run the command that builds it)"
            )
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ManifestError(
                f"{path} cannot be read as JSON ({exc}); rebuild the folder with the command that wrote it"
            ) from None
        try:
            return cls.from_json(data)
        except ManifestError as exc:
            raise ManifestError(
                f"{path}: {exc}; this is not a manifest the toolkit wrote: rebuild the folder "
                "with the command that made it"
            ) from None

    @classmethod
    def read_if_present(cls, folder: Path) -> Manifest | None:
        return cls.read(folder) if (Path(folder) / MANIFEST_NAME).is_file() else None

    def write(self, folder: Path) -> Path:
        path = Path(folder) / MANIFEST_NAME
        write_json_atomic(path, self.to_json())
        return path


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write `path` whole or not at all: a failed write (a full disk) leaves no temporary behind."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n", "utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_jsonl_atomic(path: Path, rows: Iterable[dict]) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def _tool_version() -> str:
    from builder import __version__

    return __version__


def _more(items: list, shown_count: int) -> str:
    return f" and {len(items) - shown_count} more" if len(items) > shown_count else ""


def _checked_name(check, name: object, where: str) -> None:
    try:
        check(name)
    except UnsafeNameError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def _expect(condition: bool, where: str, problem: str) -> None:
    if not condition:
        raise ManifestError(f"{where} {problem}")


def _optional(data: Mapping, key: str, kind: type, where: str) -> Any:
    value = data.get(key)
    if value is None:
        return None
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    _expect(
        ok, f"{where}.{key}", f"must be {'an integer' if kind is int else kind.__name__}, got {type(value).__name__}"
    )
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_QUANTILES = ("median", "p10", "p90")
_FILL_SUMMARY_KEYS = ("poor_score", "scored", "score", "seam", "share_below_poor_score", "step", "texture", "unscored")


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fill_summary(data: Any, where: str) -> dict:
    """An extract split's summary of fill scores: counts, the poor-score threshold, the share under
    it and, per score, its median and 10th/90th percentiles (null when no part was scored)."""
    _expect(isinstance(data, Mapping), where, f"must be an object, got {type(data).__name__}")
    _expect(sorted(data) == sorted(_FILL_SUMMARY_KEYS), where, f"must hold exactly {', '.join(_FILL_SUMMARY_KEYS)}")
    for key in ("scored", "unscored"):
        _expect(_is_int(data[key]) and data[key] >= 0, f"{where}.{key}", f"must be a count, got {shown(data[key])}")
    _expect(
        _finite_number(data["poor_score"]), f"{where}.poor_score", f"must be a number, got {shown(data['poor_score'])}"
    )
    share = data["share_below_poor_score"]
    _expect(
        share is None or (_finite_number(share) and 0 <= share <= 1),
        f"{where}.share_below_poor_score",
        f"must be null or a fraction, got {shown(share)}",
    )
    for name in ("texture", "seam", "step", "score"):
        value = data[name]
        _expect(
            value is None
            or (
                isinstance(value, Mapping)
                and sorted(value) == sorted(_QUANTILES)
                and all(_finite_number(value[q]) for q in _QUANTILES)
            ),
            f"{where}.{name}",
            "must be null or an object of finite median, p10, p90",
        )
    return dict(data)


def _tally(data: Any, where: str) -> dict[str, int]:
    """{name: non-negative integer}."""
    _expect(isinstance(data, Mapping), where, f"must be an object, got {type(data).__name__}")
    for key, value in data.items():
        _expect(isinstance(key, str), where, f"has a key that is not text: {shown(key)}")
        _expect(_is_int(value) and value >= 0, f"{where}.{key}", f"must be a count, got {shown(value)}")
    return dict(data)


def _counts(data: Any, where: str) -> dict[str, dict[str, int]]:
    """Compose's counts: {kind: {bucket: non-negative integer}}."""
    _expect(isinstance(data, Mapping), where, f"must be an object, got {type(data).__name__}")
    for kind, bucket in data.items():
        _expect(isinstance(bucket, Mapping), f"{where}.{kind}", f"must be an object, got {type(bucket).__name__}")
        for name, value in bucket.items():
            _expect(
                _is_int(value) and value >= 0,
                f"{where}.{kind}.{name}",
                f"must be a non-negative integer, got {type(value).__name__} {shown(value)}",
            )
    return {str(kind): dict(bucket) for kind, bucket in data.items()}


def _error_counts(data: Any, where: str) -> ErrorCounts:
    _expect(isinstance(data, Mapping), where, "must be an object")
    by_reason = data.get("by_reason", {})
    _expect(
        isinstance(by_reason, Mapping) and all(isinstance(v, int) for v in by_reason.values()),
        f"{where}.by_reason",
        "must map reasons to counts",
    )
    total = data.get("total", sum(by_reason.values()))
    _expect(isinstance(total, int), f"{where}.total", "must be an integer")
    return ErrorCounts(total, dict(by_reason))


def _shard_stats(data: Any, where: str) -> ShardStats:
    _expect(isinstance(data, Mapping), where, "must be an object")
    filename, count = data.get("filename"), data.get("num_samples")
    _expect(isinstance(filename, str) and filename != "", f"{where}.filename", "must be a file name")
    _expect(
        _is_int(count) and count >= 0,
        f"{where}.num_samples",
        f"must be a non-negative integer, got {type(count).__name__} {shown(count)}",
    )
    size, digest = data.get("bytes"), data.get("sha256")
    _expect(
        _is_int(size) and size >= 0,
        f"{where}.bytes",
        f"must be a non-negative integer, got {type(size).__name__} {shown(size)}",
    )
    _expect(isinstance(digest, str) and len(digest) == 64, f"{where}.sha256", "must be a sha256 hex digest")
    return ShardStats(filename, count, size, digest)
