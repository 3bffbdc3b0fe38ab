"""TorchScript test models are code the tests wrote themselves: these say so to the loaders, by
sha256 (`--trust-file`), as a user trusting a file they checked does."""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

from builder.backends.code_trust import CodeTrust


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def trust_flags(specs) -> list[str]:
    """`--trust-file SHA256` for each existing `ts:FILE` of the comma-separated `specs`, or of the
    models.yaml `specs` names (a missing file, or any other spec, needs none)."""
    listing = Path(str(specs))
    if str(specs).endswith((".yaml", ".yml")) and listing.is_file():
        entries = yaml.safe_load(listing.read_text())
        listed = [entry.get("model") if isinstance(entry, dict) else entry for entry in entries or []]
        return trust_flags(",".join(_beside(listing, spec) for spec in listed if isinstance(spec, str)))
    flags: list[str] = []
    for spec in str(specs).split(","):
        path = Path(spec.strip()[3:]) if spec.strip().startswith("ts:") else None
        if path is not None and path.is_file():
            flags += ["--trust-file", sha256(path)]
    return flags


def _beside(listing: Path, spec: str) -> str:
    """A listing's `ts:FILE` with FILE relative to the listing's folder, as hsi eval reads it."""
    return f"ts:{listing.parent / spec[3:]}" if spec.startswith("ts:") else spec


def trusting(*paths) -> CodeTrust:
    """The trust of `ModelOptions(trust=...)` for the TorchScript files at `paths`."""
    return CodeTrust.of(sha256(path) for path in paths)
