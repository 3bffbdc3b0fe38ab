"""A sweep's data, proved once before any model: every model of `hsi eval --models` reads the same
shards, so their sha256 are checked here, in the parent, and a changed shard refuses the whole run in
one line naming it, before any model loads. The proofs go to each model's worker, which then hashes
none of them again (evaluation.predicting.verified_shards)."""

from __future__ import annotations

from collections.abc import Callable

from builder.formats.stream import stream
from evaluation.predicting.data import SourceSplit, read_dataset_manifest
from evaluation.predicting.verified_shards import proofs, verify_stream

from .pipeline import RunSettings


def prove_sweep_data(source, settings: RunSettings, announce: Callable[[str], None]) -> tuple:
    """Check every shard the sweep's models will read (with `--limit`, the first ones) against the
    manifest; returns the proofs for the workers (verified_shards.proofs)."""
    manifest = read_dataset_manifest(SourceSplit(source, settings.config, settings.split))
    shards = stream(source, settings.config, settings.split)
    verify_stream(shards, manifest, settings.split, settings.limit, announce)
    return proofs()
