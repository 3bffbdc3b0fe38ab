"""Write small synthetic parts datasets in the exact format `hsi extract` writes (see builder.parts).

Crops and backgrounds are flat colours by default, so a test can find a pasted object by its colour.

    from parts_factory import FakeImage, fake_images, write_parts   # tests/ is on sys.path (conftest)
    images = fake_images(["n01443537", "n02437312"], per_class=2)   # flat, distinct colours
    manifest = write_parts(tmp_path / "parts", {"val": images}, shard_size=3)

`FakeImage.crop_color` / `background_color` tell a test what to look for; `textured=True` gives
photo-like content instead (for benchmarks: realistic PNG sizes and decode costs).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builder import __version__
from builder.core.config import fingerprint
from builder.core.imaging import canvas_background
from builder.core.manifest import ERRORS_NAME, ErrorCounts, Manifest, SplitEntry, write_jsonl_atomic
from builder.core.records import Box
from builder.core.shard_write import write_shard
from builder.formats.fill_scores import canvas_mask, score_fill, summarise_fill_scores
from builder.formats.parts import (
    PARTS_CANVAS_FILTER,
    PARTS_CANVAS_SIZE,
    PARTS_SCHEMA_VERSION,
    encode_parts_members,
    iter_parts_json,
    parts_metadata,
)

FAKE_BACKENDS = {
    "masker": {"name": "box", "params": {}, "checkpoint": None, "checkpoint_sha256": None},
    "inpainter": {"name": "fake-flat", "params": {}, "checkpoint": None, "checkpoint_sha256": None},
}


@dataclass(frozen=True)
class FakeImage:
    """One source image: its id, class, the object's box and the colours of object and background."""

    source_id: str
    wnid: str
    crop_color: tuple[int, int, int]
    background_color: tuple[int, int, int]
    image_size: tuple[int, int] = (160, 120)  # width, height of the full image (and background)
    box: tuple[int, int, int, int] = (40, 30, 99, 89)  # inclusive VOC corners: a 60 x 60 crop
    mask: str = "full"  # "full": the whole box is object; "ellipse": an inscribed ellipse
    textured: bool = False
    fill: str = "as-is"  # "as-is": the erased box keeps the background; "flat": a slab of its mean colour

    @property
    def crop_size(self) -> tuple[int, int]:
        x0, y0, x1, y1 = self.box
        return x1 - x0 + 1, y1 - y0 + 1


def _seeded(name: str) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little"))


def _texture(height: int, width: int, base: tuple[int, int, int], rng: np.random.Generator) -> np.ndarray:
    """Smooth colour gradients plus grain: compresses in PNG roughly like a photo."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.empty((height, width, 3), np.float32)
    for c in range(3):
        fx, fy = rng.uniform(0.01, 0.06, 2)
        image[..., c] = base[c] + 60 * np.sin(xx * fx + c) * np.cos(yy * fy)
    image += rng.normal(0, 12, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def render_image(image: FakeImage) -> dict[str, np.ndarray]:
    """The arrays of one parts sample: crop, mask (bool), background, erase (bool)."""
    width, height = image.image_size
    w, h = image.crop_size
    if image.textured:
        rng = _seeded(image.source_id)
        background = _texture(height, width, image.background_color, rng)
        crop = _texture(h, w, image.crop_color, rng)
    else:
        background = np.full((height, width, 3), image.background_color, np.uint8)
        crop = np.full((h, w, 3), image.crop_color, np.uint8)
    if image.mask == "ellipse":
        yy, xx = np.mgrid[0:h, 0:w]
        mask = ((xx - (w - 1) / 2) / (w / 2)) ** 2 + ((yy - (h - 1) / 2) / (h / 2)) ** 2 <= 1.0
    else:
        mask = np.ones((h, w), bool)
    x0, y0, x1, y1 = image.box
    erase = np.zeros((height, width), bool)
    erase[y0 : y1 + 1, x0 : x1 + 1] = True
    if image.fill == "flat":  # a poor fill: one colour where the ground is textured (fill scores see it)
        background[erase] = background[erase].mean(axis=0).astype(np.uint8)
    return {"crop": crop, "mask": mask, "background": background, "erase": erase}


def parts_sample(image: FakeImage) -> tuple[str, dict[str, bytes]]:
    arrays = render_image(image)
    width, height = image.image_size
    meta = parts_metadata(
        source_id=image.source_id,
        wnid=image.wnid,
        width=width,
        height=height,
        boxes=[Box(*image.box, wnid=image.wnid)],
        object_box_index=0,
        object_box_rule="largest",
        conversions=[],
        provenance={"backends": FAKE_BACKENDS, "dilation": 0, "tool_version": __version__},
    )
    canvas = canvas_background(arrays["background"], PARTS_CANVAS_SIZE, PARTS_CANVAS_FILTER)
    # scored as extract scores them, the erase mask being what a fake fill replaced
    scores = score_fill(canvas, canvas_mask(arrays["erase"], PARTS_CANVAS_SIZE))
    meta["fill_scores"] = None if scores is None else scores.to_json()
    members = encode_parts_members(
        arrays["crop"], arrays["mask"], arrays["background"], arrays["erase"], canvas, meta, arrays["erase"]
    )
    return image.source_id, members


def distinct_color(n: int, offset: int = 0) -> tuple[int, int, int]:
    """Dark, well-separated flat colours (channels 0, 45 or 90: 27 of them, luminance <= 90), so a
    bright object stands out by luminance and a background's colour tells its class."""
    n += offset
    return (45 * (n % 3), 45 * ((n // 3) % 3), 45 * ((n // 9) % 3))


def fake_images(
    wnids: Sequence[str],
    per_class: int = 2,
    *,
    prefix: str = "ILSVRC2012_val",
    textured: bool = False,
    image_size: tuple[int, int] = (160, 120),
    box: tuple[int, int, int, int] = (40, 30, 99, 89),
    mask: str = "full",
) -> list[FakeImage]:
    """`per_class` images of each wnid, ids `<prefix>_00000001`..., with a distinct crop colour per
    image (all bright: luminance >= 200) and a distinct dark background colour per class (so a
    random background reveals its class)."""
    images = []
    for c, wnid in enumerate(wnids):
        for i in range(per_class):
            n = c * per_class + i
            images.append(
                FakeImage(
                    f"{prefix}_{n + 1:08d}",
                    wnid,
                    crop_color=(255, 255 - 3 * (n % 20), 200 + (n // 20) % 18),
                    background_color=distinct_color(c),
                    image_size=image_size,
                    box=box,
                    mask=mask,
                    textured=textured,
                )
            )
    return images


def write_parts(
    parts_dir: Path,
    splits: Mapping[str, Sequence[FakeImage]],
    *,
    shard_size: int = 4,
    errors: Sequence[dict] = (),
    per_split_settings: bool = False,
) -> dict:
    """Write `<parts_dir>/<split>-%05d.tar`, errors.jsonl and `_info.json` (last); return the manifest.
    `per_split_settings`: record settings and fingerprints per split, as extract does (so `hsi verify`
    recomputes the fingerprint of released parts); off, the older flat record (pinned fingerprints)."""
    parts_dir = Path(parts_dir)
    parts_dir.mkdir(parents=True, exist_ok=True)
    split_entries = {}
    for split, images in sorted(splits.items()):
        ordered = sorted(images, key=lambda im: im.source_id)
        stats = []
        for index, start in enumerate(range(0, len(ordered), shard_size)):
            samples = [parts_sample(im) for im in ordered[start : start + shard_size]]
            stats.append(write_shard(parts_dir / f"{split}-{index:05d}.tar", samples))
        fill_rows = [iter_json for path in stats for iter_json in iter_parts_json(parts_dir / path.filename)]
        split_entries[split] = SplitEntry(
            split, stats, fill_scores=summarise_fill_scores(row.get("fill_scores") for row in fill_rows)
        )
    settings = {
        "stage": "extract",
        "fake": True,
        "images": {s: [im.source_id for im in ims] for s, ims in splits.items()},
    }
    manifest_fingerprint = fingerprint(settings)
    if per_split_settings:
        settings = {s: {**settings, "split": s} for s in sorted(split_entries)}
        for s, entry in split_entries.items():
            entry.fingerprint = fingerprint(settings[s])
        manifest_fingerprint = fingerprint({s: e.fingerprint for s, e in sorted(split_entries.items())})
    write_jsonl_atomic(parts_dir / ERRORS_NAME, list(errors))
    by_reason: dict[str, int] = {}
    for row in errors:
        by_reason[row["reason"]] = by_reason.get(row["reason"], 0) + 1
    manifest = Manifest(
        stage="extract",
        fingerprint=manifest_fingerprint,
        settings=settings,
        backends=FAKE_BACKENDS,
        splits=split_entries,
        errors=ErrorCounts.of(by_reason),
        schema_version=PARTS_SCHEMA_VERSION,
    )
    manifest.write(parts_dir)
    return manifest.to_json()


def rehash_parts(parts_dir: Path) -> None:
    """Make the parts manifest vouch for its shards as they are now: a test that damages members on
    purpose (to check they become rows) models parts whose manifest matches them, since compose
    refuses a shard whose sha256 differs from the manifest."""
    import json

    from builder.core.hashing import sha256_file

    path = Path(parts_dir) / "_info.json"
    data = json.loads(path.read_text("utf-8"))
    for entry in data["splits"].values():
        for shard in entry["shards"]:
            shard_path = Path(parts_dir) / shard["filename"]
            shard["bytes"], shard["sha256"] = shard_path.stat().st_size, sha256_file(shard_path)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", "utf-8")


def rewrite_parts(parts_dir: Path, change, *, summary: str = "recompute") -> None:
    """Rewrite every parts sample through `change(key, meta, members) -> (meta, members)` (meta: the
    decoded json), then make the manifest vouch for the shards (`rehash_parts`) and, per `summary`,
    record the fill-score summary extract would have written for the new scores (`recompute`: of the
    valid ones, a hostile value being a part tampered with after extract), keep the old one (`keep`)
    or drop it (`drop`)."""
    import json

    from builder.core.shard_read import iter_shard
    from builder.formats.fill_scores import check_fill_scores

    path = Path(parts_dir) / "_info.json"
    data = json.loads(path.read_text("utf-8"))
    for entry in data["splits"].values():
        rows = []
        for shard in entry["shards"]:
            samples = []
            for key, members in iter_shard(Path(parts_dir) / shard["filename"]):
                meta, members = change(key, json.loads(members["json"]), dict(members))
                members["json"] = json.dumps(meta, sort_keys=True).encode("utf-8")
                try:
                    rows.append(check_fill_scores(meta.get("fill_scores"), key))
                except ValueError:
                    pass
                samples.append((key, members))
            write_shard(Path(parts_dir) / shard["filename"], samples)
        if summary == "recompute":
            entry["fill_scores"] = summarise_fill_scores(rows)
        elif summary == "drop":
            entry.pop("fill_scores", None)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", "utf-8")
    rehash_parts(parts_dir)


def rewrite_fill_scores(parts_dir: Path, scores: Mapping[str, object], *, resummarise: bool = True) -> None:
    """Set the `fill_scores` of the parts named in `scores` (any value, a hostile one included);
    with `resummarise`, the manifest's summary follows the valid ones (`rewrite_parts`)."""

    def change(key: str, meta: dict, members: dict) -> tuple[dict, dict]:
        if key in scores:
            meta["fill_scores"] = scores[key]
        return meta, members

    rewrite_parts(parts_dir, change, summary="recompute" if resummarise else "keep")


def compose_quietly(parts_dir: Path, variant: str, out_root: Path, *, overrides: Mapping | None = None):
    """`compose_dataset` without progress output, as the tests compose: its `ComposeSummary`."""
    from builder.compose.stage import compose_dataset
    from builder.core.stage import RunOptions

    return compose_dataset(parts_dir, variant, out_root, options=RunOptions(progress=False), overrides=overrides)


def fresh_copy(dataset: Path, into: Path) -> Path:
    """A copy of a dataset folder in `into` (same name) without its validation report, for one test to break."""
    target = Path(into) / Path(dataset).name
    shutil.copytree(dataset, target, ignore=shutil.ignore_patterns("validation.*", "previews", "scores_*"))
    return target


def compose_args(parts, out, *extra: str) -> list[str]:
    """`hsi compose --parts PARTS --out OUT EXTRA...`, as the tests run it."""
    return ["compose", "--parts", str(parts), "--out", str(out), *extra]


def compose_images(root: Path, images, parts_shard_size: int, variant: str = "hard-spurious-imagenet", **overrides):
    """Parts of `images` (split val) in ROOT/parts, composed into ROOT/out: (dataset folder, parts folder)."""
    write_parts(root / "parts", {"val": images}, shard_size=parts_shard_size)
    return compose_quietly(root / "parts", variant, root / "out", overrides=overrides).dataset_dir, root / "parts"
