"""Fake ImageNet trees in the real on-disk layouts, with every known kind of bad input.

`write_tree(root, layout=...)` writes small synthetic photos (seeded noise over gradients, so
inpainting and cropping have real pixels to work on), box annotations in the layout's format, and,
with `bad=True`, one file for each bad-input case. It returns what a correct reader must find.
"""

from __future__ import annotations

import csv
import io
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

WNIDS = ("n01440764", "n01443537", "n01484850", "n01491361")  # tench, goldfish, great white shark, tiger shark


@dataclass(frozen=True)
class FakeImage:
    image_id: str
    wnid: str
    size: tuple[int, int]  # (width, height)
    boxes: tuple[tuple[str, int, int, int, int], ...]  # (wnid, x0, y0, x1, y1), VOC inclusive


@dataclass
class FakeTree:
    root: Path
    split: str
    good: list[FakeImage] = field(default_factory=list)
    # image id -> the reason its row in errors.jsonl must carry
    expected_reasons: dict[str, set[str]] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)


def synthetic_photo(seed: int, width: int, height: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([xx * 255 // max(width - 1, 1), yy * 255 // max(height - 1, 1), (xx + yy) % 256], axis=-1)
    noise = rng.integers(0, 40, size=(height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def voc_xml(image_id: str, size: tuple[int, int], boxes) -> str:
    objects = "".join(
        f"<object><name>{wnid}</name><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin>"
        f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
        for wnid, x0, y0, x1, y1 in boxes
    )
    return (
        f"<annotation><filename>{image_id}</filename><size><width>{size[0]}</width>"
        f"<height>{size[1]}</height><depth>3</depth></size>{objects}</annotation>"
    )


def _jpeg_bytes(array: np.ndarray, mode: str | None = None) -> bytes:
    image = Image.fromarray(array)
    if mode:
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=92)
    return buffer.getvalue()


def good_images(split: str, count: int) -> list[FakeImage]:
    images = []
    for n in range(count):
        wnid = WNIDS[n % len(WNIDS)]
        image_id = f"ILSVRC2012_val_{n + 1:08d}" if split == "val" else f"{wnid}_{n + 1}"
        width, height = 48 + 8 * (n % 4), 40 + 6 * (n % 3)
        boxes = [(wnid, 4 + n % 5, 3 + n % 4, width // 2 + n % 7, height // 2 + 4)]
        if n % 3 == 0:  # a second, larger box of the same class: 'largest' must pick it
            boxes.append((wnid, width // 3, height // 3, width - 3, height - 2))
        images.append(FakeImage(image_id, wnid, (width, height), tuple(boxes)))
    return images


def write_tree(
    root: Path, layout: str = "ilsvrc", split: str = "val", count: int = 8, bad: bool = False, val_sorted: bool = False
) -> FakeTree:
    """Write a fake tree. layout: "ilsvrc" (XML boxes) or "kaggle" (LOC csv + XMLs, ILSVRC/ folder)."""
    root = Path(root)
    tree = FakeTree(root, split)
    if layout == "kaggle":
        images_dir = root / "ILSVRC" / "Data" / "CLS-LOC" / split
        xml_dir = root / "ILSVRC" / "Annotations" / "CLS-LOC" / split
    else:
        images_dir = root / split
        xml_dir = root / "bbox" / split
    folder_labels = split == "train" or val_sorted

    def image_path(image_id: str, wnid: str) -> Path:
        folder = images_dir / wnid if folder_labels else images_dir
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{image_id}.JPEG"

    annotations: dict[str, list] = {}

    def add(image: FakeImage, data: bytes | None = None, *, xml: str | None = None, write_boxes: bool = True) -> None:
        path = image_path(image.image_id, image.wnid)
        if data is None:
            data = _jpeg_bytes(synthetic_photo(zlib.crc32(image.image_id.encode()), *image.size))
        path.write_bytes(data)
        xml_path = xml_dir / (f"{image.wnid}/{image.image_id}.xml" if split == "train" else f"{image.image_id}.xml")
        xml_path.parent.mkdir(parents=True, exist_ok=True)
        if xml is not None:
            xml_path.write_text(xml)
        elif write_boxes:
            xml_path.write_text(voc_xml(image.image_id, image.size, image.boxes))
            annotations[image.image_id] = list(image.boxes)

    for image in good_images(split, count):
        add(image)
        tree.good.append(image)

    if bad:
        tree.expected_reasons, tree.skipped = _add_bad_inputs(split, add, image_path, xml_dir, tree)

    if layout == "kaggle":
        with open(root / f"LOC_{split}_solution.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["ImageId", "PredictionString"])
            for image_id in sorted(annotations):
                writer.writerow(
                    [
                        image_id,
                        " ".join(f"{w} {x0} {y0} {x1} {y1}" for w, x0, y0, x1, y1 in annotations[image_id]) + " ",
                    ]
                )
        from builder.core.classes import imagenet_classes

        (root / "LOC_synset_mapping.txt").write_text("".join(f"{c.wnid} {c.synonyms}\n" for c in imagenet_classes()))
    return tree


def _bad_id(split: str, n: int, wnid: str) -> str:
    return f"ILSVRC2012_val_{90_000_000 + n:08d}" if split == "val" else f"{wnid}_{90_000 + n}"


def _add_bad_inputs(split, add, image_path, xml_dir, tree):
    """One input per bad case; returns ({id: {reasons}}, {ids that must be skipped})."""
    w = WNIDS[0]
    reasons: dict[str, set[str]] = {}
    skipped: set[str] = set()

    def case(n: int, reason: set[str], skip: bool, size=(40, 32), boxes=None, **kwargs) -> FakeImage:
        image = FakeImage(_bad_id(split, n, w), w, size, tuple(boxes or [(w, 2, 2, 20, 20)]))
        add(image, **kwargs)
        reasons[image.image_id] = reason
        if skip:
            skipped.add(image.image_id)
        else:
            tree.good.append(image)
        return image

    photo = synthetic_photo(7, 40, 32)
    full = _jpeg_bytes(photo)
    case(1, {"truncated-image"}, True, data=full[: len(full) // 2])
    case(2, {"unreadable-image"}, True, data=b"this is not an image at all" * 10)
    case(3, {"cmyk-converted"}, False, data=_jpeg_bytes(photo, "CMYK"))
    png = io.BytesIO()
    Image.fromarray(photo).save(png, format="PNG")
    case(4, {"format-mismatch"}, False, data=png.getvalue())
    case(5, {"grayscale-converted"}, False, data=_jpeg_bytes(photo, "L"))
    case(6, {"missing-annotation"}, True, write_boxes=False)
    case(7, {"malformed-annotation"}, True, xml="<annotation><object><name>n01440764</name><bndbox><xmin>3</xmin>")
    case(8, {"box-outside-image"}, False, boxes=[(w, -5, 4, 60, 20)])
    case(9, {"box-empty"}, False, boxes=[(w, 10, 10, 5, 20), (w, 2, 2, 20, 20)])  # inverted box dropped, other kept
    case(10, {"box-empty", "no-valid-box"}, True, boxes=[(w, 10, 10, 9, 20)])  # inverted, nothing left
    case(11, {"too-many-pixels"}, True, size=(2000, 1500), data=_jpeg_bytes(np.full((1500, 2000, 3), 90, np.uint8)))
    case(12, {"box-label-mismatch"}, False, boxes=[(w, 2, 2, 20, 20), (WNIDS[1], 22, 2, 38, 30)])
    case(13, {"box-unknown-wnid"}, False, boxes=[(w, 2, 2, 20, 20), ("n99999999", 22, 2, 38, 30)])
    # an annotation whose image does not exist
    orphan = _bad_id(split, 14, w)
    orphan_xml = xml_dir / (f"{w}/{orphan}.xml" if split == "train" else f"{orphan}.xml")
    orphan_xml.parent.mkdir(parents=True, exist_ok=True)
    orphan_xml.write_text(voc_xml(orphan, (40, 32), [(w, 2, 2, 20, 20)]))
    reasons[orphan] = {"annotation-without-image"}
    # an image whose label is not an ImageNet-1k class
    unknown = FakeImage(_bad_id(split, 15, "n99999999"), "n99999999", (40, 32), (("n99999999", 2, 2, 20, 20),))
    add(unknown)
    reasons[unknown.image_id] = {"unknown-wnid"}
    skipped.add(unknown.image_id)
    return reasons, skipped


def add_duplicate(tree: FakeTree, other_wnid: str = WNIDS[1]) -> str:
    """Copy the first good image into another class folder (folder-labelled layouts only)."""
    first = tree.good[0]
    images_dir = tree.root / tree.split
    source = next(images_dir.rglob(f"{first.image_id}.JPEG"))
    target = images_dir / other_wnid / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(source.read_bytes())
    return first.image_id


def extract_args(source, out, *extra: str) -> list[str]:
    """`hsi extract --no-progress --source SOURCE --out OUT EXTRA...`, as the tests run it."""
    return ["extract", "--no-progress", "--source", str(source), "--out", str(out), *extra]


def shard_hashes(parts_dir: Path) -> dict[str, str]:
    """{shard filename: sha256} of a folder's shards, to compare two builds byte for byte."""
    from builder.core.hashing import sha256_file

    return {p.name: sha256_file(p) for p in sorted(Path(parts_dir).glob("*.tar"))}


def error_rows(parts_dir: Path) -> list[dict]:
    """The rows of a stage folder's errors.jsonl."""
    import json

    return [json.loads(line) for line in (Path(parts_dir) / "errors.jsonl").read_text().splitlines()]
