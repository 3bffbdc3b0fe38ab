"""What an interrupted extract run kept inside its unfinished shard, seen as the resuming run sees it
(builder.core.shard_partial), for the resume tests in tests/extract and tests/adversarial."""

from __future__ import annotations

from pathlib import Path

from flaky_backends import CountingMasker

from builder.core.config import fingerprint, load_settings
from builder.core.shard_partial import KeptSample, kept_samples, partial_files
from builder.extract.shard_builder import outcome_info_ok
from hsi.cli import main

SHARD = "val-00000.tar"


def kept_images(parts: Path, image_ids: list[str], shard: str = SHARD) -> dict[int, KeptSample]:
    """The images of `shard` (whose sorted ids are `image_ids`) that `parts` keeps under its saved settings."""
    settings = (load_settings(parts) or {})["val"]
    return kept_samples(parts, shard, sorted(image_ids), fingerprint(settings), valid_info=outcome_info_ok)


def partials(parts: Path, shard: str = SHARD) -> list[Path]:
    return [path for _, path in partial_files(parts, shard)]


def masked_lines(log: Path) -> list[str]:
    """The process ids that masked an image, one line per image (CountingMasker's log)."""
    return log.read_text().split() if log.exists() else []


def interrupted_extract(args: list, after: int, monkeypatch) -> int:
    """`hsi extract ARGS` in this process, Ctrl-C'd (KeyboardInterrupt) as the masker takes its
    image number `after` + 1; returns the exit status."""
    monkeypatch.setattr(CountingMasker, "interrupt_after", after)
    monkeypatch.setattr(CountingMasker, "masked", 0)
    try:
        return main(["extract", "--no-progress", *map(str, args)])
    finally:
        monkeypatch.setattr(CountingMasker, "interrupt_after", None)
