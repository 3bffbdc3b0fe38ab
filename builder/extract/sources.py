"""Reading ImageNet with its official boxes, in the layouts people actually have on disk.

Layouts (ROOT is what `--source` names):
  ILSVRC2012 as distributed   ROOT/train/<wnid>/<wnid>_<n>.JPEG, ROOT/val/ILSVRC2012_val_<8 digits>.JPEG
                              (or sorted into ROOT/val/<wnid>/), box XMLs in Pascal-VOC format
  Kaggle                      ROOT/ILSVRC/Data/CLS-LOC/{train,val}/..., ROOT/LOC_{train,val}_solution.csv,
                              ROOT/LOC_synset_mapping.txt, and ROOT/ILSVRC/Annotations/CLS-LOC/... XMLs
Boxes are 0-based inclusive corners (x0, y0, x1, y1) in both the XMLs and the solution files.

Every problem with an input becomes an `Issue`; only a root that cannot be read at all is an error.
"""

from __future__ import annotations

from builder.core.errors import InputError

import csv
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from builder.core.classes import classes_by_wnid, is_known_wnid
from builder.core.records import Box, Issue, SourceImage
from builder.formats.loc_csv import LocCsvError, LocSolution, parse_coordinate, read_loc_solution

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}


class SourceError(InputError, ValueError):
    """The source root or annotations cannot be used at all; the message says what to pass."""


@dataclass(frozen=True)
class Layout:
    kind: str  # "ilsvrc" or "kaggle"
    images_dir: Path


@dataclass
class SourceListing:
    layout: Layout
    annotations: Path
    records: list[SourceImage]
    issues: list[Issue]
    images_found: int


def detect_layout(root: Path, split: str) -> Layout:
    root = Path(root)
    if not root.is_dir():
        raise SourceError(f"--source {root} is not a folder; pass the folder that holds train/ and val/ (or Kaggle's ILSVRC/)")
    for kind, candidate in (
        ("kaggle", root / "ILSVRC" / "Data" / "CLS-LOC" / split),
        ("kaggle", root / "Data" / "CLS-LOC" / split),
        ("ilsvrc", root / split),
    ):
        if candidate.is_dir():
            return Layout(kind, candidate)
    raise SourceError(
        f"no {split}/ images under {root}: expected {root}/{split}/ (ILSVRC2012) or "
        f"{root}/ILSVRC/Data/CLS-LOC/{split}/ (Kaggle); check --source and --split"
    )


def annotation_candidates(root: Path, split: str) -> list[Path]:
    """The usual places of box annotations under a root, most specific first."""
    root = Path(root)
    parents = [root, root.parent] if root.name == "ILSVRC" else [root]
    places = []
    for base in parents:
        places.append(base / f"LOC_{split}_solution.csv")
    for base in (root / "ILSVRC", root):
        places.append(base / "Annotations" / "CLS-LOC" / split)
    for name in ("bbox", "bboxes", "boxes", "annotations", "Annotations"):
        places.append(root / name / split)
    places += [root / f"{split}_bbox", root / f"bbox_{split}", root / f"{split}_boxes"]
    if split == "train":
        places += [root / "bbox", root / "bboxes"]
    return places


def find_annotations(root: Path, split: str) -> Path:
    for candidate in annotation_candidates(root, split):
        if candidate.is_file() or (candidate.is_dir() and any(candidate.rglob("*.xml"))):
            return candidate
    looked = "\n  ".join(str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in annotation_candidates(root, split))
    raise SourceError(
        f"no box annotations for {split} found under {root}; looked for:\n  {looked}\n"
        "Pass them with --boxes (a folder of Pascal-VOC XMLs or a LOC_*_solution.csv)."
    )


def list_image_files(images_dir: Path) -> list[tuple[str, str | None, Path]]:
    """(image id, folder label or None for flat layouts, path), sorted by relative path."""
    found = []
    for folder, _, files in os.walk(images_dir):
        folder_path = Path(folder)
        label = None if folder_path == images_dir else folder_path.relative_to(images_dir).parts[0]
        for name in files:
            path = folder_path / name
            if path.suffix.lower() in IMAGE_SUFFIXES:
                found.append((path.stem, label, path))
    found.sort(key=lambda row: str(row[2].relative_to(images_dir)))
    return found


def parse_voc_xml(path: Path) -> list[Box]:
    """Boxes of one Pascal-VOC XML; raises ValueError with a readable reason when malformed."""
    try:
        tree = ET.parse(path)
    except ET.ParseError as exc:
        raise ValueError(f"not well-formed XML ({exc})") from None
    boxes = []
    for obj in tree.getroot().iter("object"):
        name = (obj.findtext("name") or "").strip()
        bndbox = obj.find("bndbox")
        if not name or bndbox is None:
            raise ValueError("an <object> lacks <name> or <bndbox>")
        boxes.append(Box(*(parse_coordinate(bndbox.findtext(f), f) for f in ("xmin", "ymin", "xmax", "ymax")), wnid=name))
    if not boxes:
        raise ValueError("no <object> elements")
    return boxes


class _XmlAnnotations:
    """Box XMLs indexed by file stem, wherever they sit below the annotation folder."""

    def __init__(self, folder: Path) -> None:
        self.by_id: dict[str, Path] = {}
        for path in sorted(folder.rglob("*.xml")):
            self.by_id.setdefault(path.stem, path)

    def ids(self) -> set[str]:
        return set(self.by_id)

    def boxes(self, image_id: str) -> list[Box] | None:
        path = self.by_id.get(image_id)
        return None if path is None else parse_voc_xml(path)


def _csv_annotations(path: Path, issues: list[Issue]) -> LocSolution:
    """Kaggle's `LOC_*_solution.csv`; a repeated image id is an issue, its first row is used."""
    try:
        solution = read_loc_solution(path)
    except LocCsvError as exc:
        raise SourceError(str(exc)) from None
    for image_id, _ in solution.duplicates:
        issues.append(Issue(image_id, "duplicate-id", f"a second row for {image_id} in {path.name} was ignored"))
    return solution


def check_synset_mapping(root: Path) -> None:
    """Kaggle ships LOC_synset_mapping.txt; it must list exactly the 1000 classes we index."""
    for base in (root, root.parent):
        mapping = base / "LOC_synset_mapping.txt"
        if mapping.is_file():
            wnids = {line.split()[0] for line in mapping.read_text("utf-8").splitlines() if line.strip()}
            if wnids != set(classes_by_wnid()):
                raise SourceError(
                    f"{mapping} lists {len(wnids)} classes that differ from ImageNet-1k's 1000 wnids; "
                    "this toolkit indexes classes by the standard ILSVRC2012 class list"
                )
            return


def _usable_boxes(image_id: str, label: str, boxes: list[Box], issues: list[Issue]) -> list[Box]:
    kept = []
    for box in boxes:
        if not is_known_wnid(box.wnid):
            issues.append(Issue(image_id, "box-unknown-wnid", f"box {box.as_list()} is labelled {box.wnid!r}, not an ImageNet-1k wnid"))
        elif box.is_empty:
            issues.append(Issue(image_id, "box-empty", f"box {box.as_list()} has zero area or inverted corners"))
        else:
            if box.wnid != label:
                issues.append(Issue(image_id, "box-label-mismatch", f"box {box.as_list()} is labelled {box.wnid} but the image is {label}"))
            kept.append(box)
    return kept


def load_sources(root: Path, split: str, boxes: Path | None = None, announce=print) -> SourceListing:
    """Every usable image of a split with its label and valid boxes, sorted by image id."""
    root = Path(root)
    layout = detect_layout(root, split)
    check_synset_mapping(root)
    if boxes is None:
        boxes = find_annotations(root, split)
        announce(f"boxes: using {boxes} (found under --source; pass --boxes to choose)")
    boxes = Path(boxes)
    issues: list[Issue] = []
    if boxes.is_file():
        annotations = _csv_annotations(boxes, issues)
    elif boxes.is_dir():
        nested = boxes / split
        annotations = _XmlAnnotations(nested if nested.is_dir() else boxes)
    else:
        raise SourceError(f"--boxes {boxes} does not exist; pass a folder of XMLs or a LOC_{split}_solution.csv")

    files = list_image_files(layout.images_dir)
    records: list[SourceImage] = []
    seen: dict[str, Path] = {}
    for image_id, folder_label, path in files:
        if image_id in seen:
            issues.append(Issue(image_id, "duplicate-id", f"{path.relative_to(layout.images_dir)} repeats {seen[image_id].relative_to(layout.images_dir)}; kept the first"))
            continue
        seen[image_id] = path
        if folder_label is not None and not is_known_wnid(folder_label):
            issues.append(Issue(image_id, "unknown-wnid", f"folder {folder_label!r} is not an ImageNet-1k wnid"))
            continue
        try:
            image_boxes = annotations.boxes(image_id)
        except ValueError as exc:
            issues.append(Issue(image_id, "malformed-annotation", str(exc)))
            continue
        if image_boxes is None:
            issues.append(Issue(image_id, "missing-annotation", "no boxes for this image in the annotations"))
            continue
        label = folder_label or image_boxes[0].wnid
        if not is_known_wnid(label):
            issues.append(Issue(image_id, "unknown-wnid", f"annotation labels the image {label!r}, not an ImageNet-1k wnid"))
            continue
        kept = _usable_boxes(image_id, label, image_boxes, issues)
        if not any(box.wnid == label for box in kept):
            issues.append(Issue(image_id, "no-valid-box", f"no valid box of the image's class {label}"))
            continue
        records.append(SourceImage(image_id, label, str(path), tuple(kept)))

    for orphan in sorted(annotations.ids() - set(seen)):
        issues.append(Issue(orphan, "annotation-without-image", "boxes are annotated but no image file has this id"))
    records.sort(key=lambda r: r.image_id)
    issues.sort(key=lambda i: i.sort_key)
    return SourceListing(layout, boxes, records, issues, len(files))
