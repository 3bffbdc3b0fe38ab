"""The demo: `hsi build` on the embedded sample, then what each stage wrote and where, and the
release loaded back by its name."""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

from builder.core.errors import UsageError
from builder.core.stage import RunOptions
from builder.extract.shard_builder import ExtractConfig

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


DEMO_VERSION = "v1.0.0"


def run_demo(out: Path, workers: int = 2, progress: bool = True) -> int:
    """`hsi build` on the embedded sample (one line per stage), then what each stage wrote, and the
    release loaded back by its name."""
    from builder.core.manifest import Manifest
    from cards.parts_card import PartsSummary
    from hsi.build import BuildRequest, next_steps, run_build

    out = Path(out)
    clear_demo_output(out)
    request = BuildRequest(
        demo_source_root(),
        out,
        DEMO_VERSION,
        ExtractConfig(split="val", shard_size=2),
        release_name=DEMO_VARIANT,
        options=RunOptions(workers=workers, progress=progress),
    )
    print(
        f"hsi build --source <the embedded sample> --out {out} --version {DEMO_VERSION} --shard-size 2 "
        "(box masker + patchmatch)"
    )
    result = run_build(request)

    _heading("extract: cut out objects, erase boxes, inpaint")
    print(result.extract.format())
    (composed,) = result.composed
    _heading(f"compose: the paper's groups ({DEMO_VARIANT})")
    print(f"dataset: {composed.dataset_dir}")
    print(composed.table)
    _heading("validate: integrity, placement, scores, previews")
    (report,) = result.reports
    print(f"validation passed: {report.md_path}")
    for preview in report.preview_paths:
        print(f"preview: {preview}")
    _heading("release: card, configs, shards, and the parts as a config of their own")
    release_dir = result.release_dir
    print(f"release folder: {release_dir} (card: {release_dir / 'README.md'})")
    parts = PartsSummary(Manifest.read(release_dir / "data" / "parts").to_json())
    print(
        f"parts config: {parts.num_samples()} parts, {parts.mb_per_1000():.1f} MB per 1,000 parts "
        f"(`hsi compose --parts {release_dir}` composes new positions from them)"
    )

    _heading("load it back with datasets.load_dataset, by relative name")
    print(load_back(release_dir))
    print(next_steps(release_dir, DEMO_VERSION, "val"))
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
