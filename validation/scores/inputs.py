"""Where the scores' inputs come from: image sizes from a folder or the parts, boxes from the parts
or a LOC csv, per-class accuracy from a CSV or JSON."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

from builder.core.errors import InputError
from builder.core.records import Box, Issue, SourceImage
from builder.formats.loc_csv import read_loc_boxes
from validation.scores.boxes import ImageBoxes

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")


def image_sizes_from_folder(root: Path, wanted: set[str] | None = None) -> dict[str, tuple[int, int]]:
    """(width, height) of every image under `root` whose file stem is in `wanted` (header reads only)."""
    from PIL import Image

    sizes: dict[str, tuple[int, int]] = {}
    for path in sorted(Path(root).rglob("*")):
        if path.suffix.lower() not in IMAGE_SUFFIXES or (wanted is not None and path.stem not in wanted):
            continue
        try:
            with Image.open(path) as image:
                sizes[path.stem] = image.size
        except OSError:
            continue  # an unreadable image has no size; its boxes are reported as unscored
    return sizes


def image_sizes_from_parts(parts_dir: Path) -> dict[str, tuple[int, int]]:
    return {item.image_id: (item.width, item.height) for item in boxes_from_parts(parts_dir)}


def boxes_from_parts(parts_dir: Path, split: str | None = None) -> list[ImageBoxes]:
    """Every parts sample's boxes and source size, read from its `json` member only."""
    from builder.formats.parts import decode_parts_json, iter_parts_samples

    items = []
    for key, members in iter_parts_samples(parts_dir, split):
        meta = decode_parts_json(members)
        boxes = tuple(Box(b["x0"], b["y0"], b["x1"], b["y1"], b["wnid"]) for b in meta["boxes"])
        items.append(ImageBoxes(key, meta["wnid"], int(meta["width"]), int(meta["height"]), boxes))
    return sorted(items, key=lambda item: item.image_id)


def boxes_from_loc_csv(
    csv_path: Path, sizes: dict[str, tuple[int, int]]
) -> tuple[list[ImageBoxes], list[Issue], list[Issue]]:
    """Join the CSV's boxes with image sizes; each image without a known size is returned as an
    `image-size-unknown` row (it is not scored).

    Boxes are clipped to their image as extract clips them (`box-outside-image`; a box empty
    inside the image is dropped, `box-empty`), and each repair is returned as an `Issue`. The
    image's class is its first box's wnid (ImageNet val images carry boxes of their label only).
    """
    from builder.extract.shard_builder import clip_boxes

    items, unsized, issues = [], [], []
    for image_id, boxes in sorted(read_loc_boxes(csv_path).items()):
        if image_id not in sizes:
            detail = f"{Path(csv_path).name} has {len(boxes)} boxes for it, but no readable image of it has a size"
            unsized.append(Issue(image_id, "image-size-unknown", detail, "validate", key=image_id))
            continue
        width, height = sizes[image_id]
        kept, clipped = clip_boxes(SourceImage(image_id, boxes[0].wnid, "", tuple(boxes)), width, height)
        issues.extend(replace(issue, stage="validate") for issue in clipped)
        items.append(ImageBoxes(image_id, boxes[0].wnid, width, height, tuple(kept)))
    return items, unsized, issues


def read_accuracy(path: Path) -> dict[str, float]:
    """Per-class accuracy: a CSV with a `wnid` (or `class_index`) column and an `accuracy` column,
    or a JSON object {wnid: accuracy}."""
    from builder.core.classes import imagenet_classes

    path = Path(path)
    if path.suffix.lower() == ".json":
        data = json.loads(path.read_text("utf-8"))
        if not isinstance(data, dict):
            raise InputError(f"{path} must hold a JSON object mapping wnid -> accuracy")
        return {str(k): float(v) for k, v in data.items()}
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        fields = set(reader.fieldnames or ())
        if "accuracy" not in fields or not fields & {"wnid", "class_index"}:
            raise InputError(f"{path} needs an 'accuracy' column and a 'wnid' or 'class_index' column")
        by_index = {c.index: c.wnid for c in imagenet_classes()}
        accuracy = {}
        for row in reader:
            wnid = row.get("wnid") or by_index[int(row["class_index"])]
            accuracy[wnid] = float(row["accuracy"])
    return accuracy
