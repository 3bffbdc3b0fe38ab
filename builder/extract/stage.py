"""`hsi extract` from start to finish: list sources, load backends, check the output folder's
settings, build the missing shards, then write errors.jsonl and, last, the manifest.

A parts folder can hold several splits (extract val, then train, into the same --out); each split
has its own settings and fingerprint, and the manifest lists every finished split.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import yaml

from builder import __version__
from builder.core.config import CONFIG_NAME, SettingsMismatch, canonical_json, differing_settings, fingerprint
from builder.extract.shard_builder import ExtractConfig, ExtractShardBuilder, describe_backends, listing_digest, load_backends, unload_backends
from builder.formats.parts import PARTS_SCHEMA_VERSION
from builder.core.records import Issue, count_by_reason
from builder.core.runner import STATE_DIR, Stopwatch, plan_shards, remove_stale_temporaries, run_shards
from builder.core.shards import ERRORS_NAME, MANIFEST_NAME, split_entry, write_json_atomic, write_jsonl_atomic
from builder.extract.sources import load_sources

PARTS_DIR_NAME = "parts"


@dataclass
class ExtractSummary:
    parts_dir: Path
    split: str
    images_listed: int
    samples: int
    issues_by_reason: dict[str, int]
    seconds: float
    shards_built: int
    shards_reused: int
    already_complete: bool = False
    notes: list[str] = field(default_factory=list)

    def format(self) -> str:
        lines = [f"parts: {self.parts_dir} (split {self.split})"]
        if self.already_complete:
            lines.append("  already complete with these settings: nothing to do (use --overwrite to rebuild)")
        lines.append(f"  images listed {self.images_listed}, parts written {self.samples}, "
                     f"shards built {self.shards_built}, reused {self.shards_reused}, {self.seconds:.1f} s")
        if self.issues_by_reason:
            lines.append("  issues by reason (see errors.jsonl):")
            lines += [f"    {reason:<24} {count}" for reason, count in self.issues_by_reason.items()]
        return "\n".join(lines)


def _load_yaml(path: Path) -> dict:
    return (yaml.safe_load(path.read_text("utf-8")) or {}) if path.is_file() else {}


def _check_split_settings(parts_dir: Path, split: str, settings: dict) -> None:
    previous = _load_yaml(parts_dir / CONFIG_NAME).get(split)
    normalised = json.loads(canonical_json(settings))
    if previous is not None and previous != normalised:
        diff = "\n  ".join(differing_settings(previous, normalised))
        raise SettingsMismatch(
            f"{parts_dir} holds split {split!r} made with other settings:\n  {diff}\n"
            "Use the same settings to resume, another --out, or --overwrite to rebuild it."
        )


def _save_split_settings(parts_dir: Path, split: str, settings: dict) -> None:
    path = parts_dir / CONFIG_NAME
    all_settings = _load_yaml(path)
    all_settings[split] = json.loads(canonical_json(settings))
    path.write_text(yaml.safe_dump(all_settings, sort_keys=True), "utf-8")


def _read_error_rows(parts_dir: Path) -> list[dict]:
    path = parts_dir / ERRORS_NAME
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line] if path.is_file() else []


def _drop_split(parts_dir: Path, split: str) -> None:
    """--overwrite: forget one split (its shards, state, settings, manifest entry, error rows)."""
    for path in [*parts_dir.glob(f"{split}-*.tar"), *(parts_dir / STATE_DIR).glob(f"{split}-*")]:
        path.unlink()
    settings = _load_yaml(parts_dir / CONFIG_NAME)
    if settings.pop(split, None) is not None:
        (parts_dir / CONFIG_NAME).write_text(yaml.safe_dump(settings, sort_keys=True), "utf-8")
    manifest_path = parts_dir / MANIFEST_NAME
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text("utf-8"))
        manifest["splits"].pop(split, None)
        manifest["settings"].pop(split, None)
        write_json_atomic(manifest_path, manifest)
    write_jsonl_atomic(parts_dir / ERRORS_NAME, [r for r in _read_error_rows(parts_dir) if r["split"] != split])


def _write_errors(parts_dir: Path, split: str, issues: list[Issue]) -> None:
    rows = [r for r in _read_error_rows(parts_dir) if r["split"] != split]
    rows += [{**issue.to_json(), "split": split} for issue in issues]
    rows.sort(key=lambda r: (r["split"], r["image_id"], r["reason"], r["detail"]))
    write_jsonl_atomic(parts_dir / ERRORS_NAME, rows)


def _write_manifest(parts_dir: Path, split: str, split_info: dict, backends: dict, settings: dict) -> dict:
    path = parts_dir / MANIFEST_NAME
    manifest = json.loads(path.read_text("utf-8")) if path.is_file() else {"splits": {}, "settings": {}}
    manifest["splits"][split] = split_info
    manifest["settings"][split] = settings
    totals: dict[str, int] = {}
    for info in manifest["splits"].values():
        for reason, count in info["errors"]["by_reason"].items():
            totals[reason] = totals.get(reason, 0) + count
    manifest.update({
        "stage": "extract",
        "tool": {"name": "hard-spurious-imagenet", "version": __version__},
        "schema_version": PARTS_SCHEMA_VERSION,
        "backends": backends,
        "fingerprint": fingerprint({s: i["fingerprint"] for s, i in sorted(manifest["splits"].items())}),
        "errors": {"total": sum(totals.values()), "by_reason": dict(sorted(totals.items()))},
    })
    write_json_atomic(path, manifest)
    return manifest


def run_extract(
    source: Path,
    out: Path,
    config: ExtractConfig,
    boxes: Path | None = None,
    *,
    workers: int = 1,
    overwrite: bool = False,
    progress: bool = True,
    runner: str = "local",
    ray_address: str | None = None,
    gpus: Sequence[int] = (),
    announce: Callable[[str], None] = print,
) -> ExtractSummary:
    clock = Stopwatch()
    listing = load_sources(Path(source), config.split, boxes, announce=announce)
    # Backends load before anything is written: a missing checkpoint leaves no partial output.
    masker, inpainter = load_backends(config)
    backends = describe_backends(masker, inpainter)
    settings = config.output_settings(backends, listing_digest(listing.records))
    split_fingerprint = fingerprint(settings)
    parts_dir = Path(out) / PARTS_DIR_NAME

    if parts_dir.is_dir() and overwrite:
        _drop_split(parts_dir, config.split)
    existing = json.loads((parts_dir / MANIFEST_NAME).read_text("utf-8")) if (parts_dir / MANIFEST_NAME).is_file() else None
    if existing and config.split in existing.get("splits", {}):
        done = existing["splits"][config.split]
        if done["fingerprint"] == split_fingerprint:
            return ExtractSummary(parts_dir, config.split, done["images_listed"], done["num_samples"],
                                  done["errors"]["by_reason"], clock.seconds, 0, len(done["filenames"]), already_complete=True)
    if parts_dir.is_dir():
        _check_split_settings(parts_dir, config.split, settings)
    parts_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(parts_dir)
    _save_split_settings(parts_dir, config.split, settings)

    plans = plan_shards(config.split, listing.records, config.shard_size)
    build = ExtractShardBuilder(config, str(parts_dir))
    if runner == "ray" or gpus:
        unload_backends()  # the models run in other processes; free this one's copy (and its GPU memory)
    if runner == "ray":
        from builder.core.ray_runner import run_shards_ray

        results, reused = run_shards_ray(plans, build, parts_dir, address=ray_address, num_gpus=len(gpus), progress=progress)
    else:
        results, reused = run_shards(plans, build, parts_dir, workers=workers, desc=f"extract {config.split}",
                                     progress=progress, worker_devices=[str(g) for g in gpus] or None)

    issues = sorted(listing.issues + [i for r in results for i in r.issues], key=lambda i: i.sort_key)
    by_reason = count_by_reason(issues)
    entry = split_entry(config.split, [r.stats for r in results])
    entry.update({
        "fingerprint": split_fingerprint,
        "images_listed": listing.images_found,
        "errors": {"total": len(issues), "by_reason": by_reason},
    })
    _write_errors(parts_dir, config.split, issues)
    _write_manifest(parts_dir, config.split, entry, backends, json.loads(canonical_json(settings)))
    return ExtractSummary(parts_dir, config.split, listing.images_found, entry["num_samples"], by_reason,
                          clock.seconds, len(plans) - reused, reused)
