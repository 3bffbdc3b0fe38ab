"""The demo pipeline: every stage on the embedded sample, printing what it wrote and where.

It reaches past builder/ into validation, cards and the Hub scripts on purpose: it is the one place
that shows the whole chain, like the command line itself.
"""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

from builder.core.errors import UsageError
from builder.core.stage import RunOptions
from builder.extract.shard_builder import ExtractConfig
from builder.extract.stage import run_extract

DEMO_VARIANT = "hard-spurious-imagenet"


def demo_source_root() -> Path:
    return Path(str(resources.files("builder").joinpath("demo_data/imagenet")))


DEMO_MARKER = ".hsi-demo-output"


class DemoOutputInUse(UsageError):
    """--out names a non-empty folder that an earlier demo did not write."""


def clear_demo_output(out: Path) -> None:
    """The demo starts from scratch, but only ever deletes a folder an earlier demo made."""
    if out.exists() and any(out.iterdir()):
        if not (out / DEMO_MARKER).is_file():
            raise DemoOutputInUse(
                f"{out} is not empty and was not written by `hsi demo`; choose another --out "
                "(the demo replaces its output folder and never deletes anything else)"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARKER).write_text("written by hsi demo; the next demo run replaces this folder\n")


def _heading(text: str) -> None:
    print(f"\n== {text}")


def run_demo(out: Path, workers: int = 2, progress: bool = True) -> int:
    from builder.compose.stage import compose_dataset
    from builder.core.manifest import Manifest
    from cards.parts_card import PartsSummary
    from cards.release import build_release
    from validation.report import validate_dataset

    options = RunOptions(workers=workers, progress=progress)
    out = Path(out)
    clear_demo_output(out)
    _heading("1/5 extract: cut out objects, erase boxes, inpaint (box masker + patchmatch)")
    summary = run_extract(demo_source_root(), out, ExtractConfig(split="val", shard_size=2), options=options)
    print(summary.format())

    _heading(f"2/5 compose: the paper's groups ({DEMO_VARIANT})")
    composed = compose_dataset(summary.parts_dir, DEMO_VARIANT, out / "datasets", options=options)
    print(f"dataset: {composed.dataset_dir}")
    print(composed.table)

    _heading("3/5 validate: integrity, placement, scores, previews")
    report = validate_dataset(composed.dataset_dir, parts_dir=summary.parts_dir)
    print(f"validation {'passed' if report.ok else 'FAILED'}: {report.md_path}")
    for preview in report.preview_paths:
        print(f"preview: {preview}")
    if not report.ok:
        return 1

    _heading("4/5 release: card, configs, shards, and the parts as a config of their own")
    release_dir = build_release(out / DEMO_VARIANT, [composed.dataset_dir], overwrite=True, parts_dir=summary.parts_dir)
    print(f"release folder: {release_dir} (card: {release_dir / 'README.md'})")
    parts = PartsSummary(Manifest.read(release_dir / "data" / "parts").to_json())
    print(
        f"parts config: {parts.num_samples()} parts, {parts.mb_per_1000():.1f} MB per 1,000 parts "
        f"(`hsi compose --parts {release_dir}` composes new positions from them)"
    )

    _heading("5/5 load it back with datasets.load_dataset, by relative name")
    print(load_back(release_dir))
    return 0


def load_back(release_dir: Path, rows: int = 4) -> str:
    """Load the release by its relative name from its parent folder, offline, and show a few rows."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from datasets import load_dataset

    here = Path.cwd()
    cache_dir = release_dir.parent.resolve() / ".hf-cache"  # resolved first: a relative --out would nest it
    os.chdir(release_dir.parent)
    try:
        dataset = load_dataset(release_dir.name, split="val", cache_dir=str(cache_dir))
    finally:
        os.chdir(here)
    lines = [
        f'load_dataset("{release_dir.name}", split="val"): {dataset.num_rows} rows, features {sorted(dataset.features)}'
    ]
    if (release_dir / "data" / "parts").is_dir():
        os.chdir(release_dir.parent)
        try:
            parts = load_dataset(release_dir.name, "parts", split="val", cache_dir=str(cache_dir))
        finally:
            os.chdir(here)
        lines.append(f'load_dataset("{release_dir.name}", "parts", split="val"): {parts.num_rows} parts')
    for row in dataset.select(range(min(rows, dataset.num_rows))):
        meta = row["json"]
        lines.append(
            f"  {meta['source_id']:<18} {meta['class_name']:<12} group {meta['group']:<4} size {meta['size']:>3} "
            f"tier {meta['tier']} at ({meta['box_x']},{meta['box_y']})"
        )
    return "\n".join(lines)
