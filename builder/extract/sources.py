"""Reading ImageNet with its official boxes, in the layouts people actually have on disk.

Layouts (ROOT is what `--source` names):
  ILSVRC2012 as distributed   ROOT/train/<wnid>/<wnid>_<n>.JPEG, ROOT/val/ILSVRC2012_val_<8 digits>.JPEG
                              (or sorted into ROOT/val/<wnid>/), box XMLs in Pascal-VOC format
  Kaggle                      ROOT/ILSVRC/Data/CLS-LOC/{train,val}/..., ROOT/LOC_{train,val}_solution.csv,
                              ROOT/LOC_synset_mapping.txt, and ROOT/ILSVRC/Annotations/CLS-LOC/... XMLs
Boxes are 0-based inclusive corners (x0, y0, x1, y1) in both the XMLs and the solution files.

Every problem with an input becomes an `Issue`; only a root that cannot be read at all is an error.

Listing rules (each break of one is a row in errors.jsonl, never a crash):
- only regular files are read (a FIFO, a socket, a folder or a dangling link named `.JPEG` is a
  `not-a-regular-file` row); symlinked folders are followed, and a folder reached twice (a link
  loop, or two links to one folder) is a `folder-loop` row and is not listed again;
- image ids are the file stems and become sample keys: they must match `IMAGE_ID_PATTERN` and be at
  most `MAX_IMAGE_ID_LENGTH` characters (a dot, a leading '_', a backslash, spaces, non-ASCII or
  non-UTF-8 names are `unsafe-image-id` rows). 64 leaves room for compose's longest suffix
  (`_random-corner_112_original.json`, 32 characters) inside a ustar member name's 100;
  every ImageNet id has at most 24;
- box XMLs with one stem in several folders: the first by path is used, the others are
  `duplicate-id` rows, as repeated LOC csv rows are;
- when both a LOC csv and box XMLs are found, the XMLs are used (they hold the boxes as annotated,
  clipped to each image) and the choice is announced.
"""

from __future__ import annotations

import os
import re
import stat
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from builder.core.classes import classes_by_wnid, is_known_wnid
from builder.core.errors import InputError
from builder.core.object_store import is_object_url, stage_source
from builder.core.records import Box, Issue, SourceImage
from builder.core.shards import key_problem
from builder.formats.loc_csv import (
    LocCsvError,
    LocSolution,
    decode_annotation_text,
    parse_coordinate,
    read_loc_solution,
)

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
IMAGE_ID_PATTERN = re.compile(r"[A-Za-z0-9-][A-Za-z0-9_-]*")
MAX_IMAGE_ID_LENGTH = 64


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
        raise SourceError(
            f"--source {root} is not a folder; pass the folder that holds train/ and val/ (or Kaggle's ILSVRC/)"
        )
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
    # the official box tarballs unpack flat (bbox/*.xml, or val/*.xml beside the images) or, for
    # train, into one folder per class
    places += [root / "bbox", root / "bboxes", root / split]
    return places


def _holds_xmls(candidate: Path, root: Path, split: str) -> bool:
    if not candidate.is_dir():
        return False
    flat = candidate.parent == root and candidate.name in ("bbox", "bboxes") and split != "train"
    return any(candidate.glob("*.xml")) if flat else any(candidate.rglob("*.xml"))


def find_annotations(root: Path, split: str, announce=print) -> Path:
    """The box annotations under `root`: XMLs when there are any, else the LOC csv (announced)."""
    candidates = annotation_candidates(root, split)
    csv_file = next((c for c in candidates if c.is_file()), None)
    # the first folder only: searching train/ itself for XMLs walks every image
    xml_folder = next((c for c in candidates if _holds_xmls(c, Path(root), split)), None)
    if xml_folder is not None:
        also = (
            f"; also found {csv_file}, not used: the XMLs hold the boxes as annotated, clipped to each image"
            if csv_file
            else ""
        )
        announce(f"boxes: using the XMLs in {xml_folder} (found under --source{also}; pass --boxes to choose)")
        return xml_folder
    if csv_file is not None:
        announce(f"boxes: using {csv_file} (found under --source; pass --boxes to choose)")
        return csv_file
    looked = "\n  ".join(str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in candidates)
    raise SourceError(
        f"no box annotations for {split} found under {root}; looked for:\n  {looked}\n"
        "Pass them with --boxes (a folder of Pascal-VOC XMLs or a LOC_*_solution.csv)."
    )


def printable_name(name: str) -> str:
    """A file name as rows can hold it: bytes that are not UTF-8 shown as \\xNN escapes."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def image_id_problem(image_id: str) -> str | None:
    """Why a file stem cannot be an image id (and so a sample key), or None."""
    problem = key_problem(image_id)
    if problem is None and not IMAGE_ID_PATTERN.fullmatch(image_id):
        problem = "has characters other than A-Z, a-z, 0-9, '_' and '-'"
    if problem is None and len(image_id) > MAX_IMAGE_ID_LENGTH:
        problem = f"is {len(image_id)} characters long, more than {MAX_IMAGE_ID_LENGTH}"
    return problem


@dataclass
class _Found:
    """What a walk found: entries with a wanted suffix (path, first folder below the top or None)."""

    entries: list[tuple[Path, str | None]]
    issues: list[Issue]


def walk_entries(top: Path, suffixes: set[str]) -> _Found:
    """Every entry below `top` whose name ends in one of `suffixes`, sorted by relative path.
    Symlinked folders are followed; one reached a second time is reported and not entered."""
    top = Path(top)
    found = _Found([], [])
    seen = {_identity(top)}

    def unreadable(error: OSError) -> None:  # os.walk would skip such a folder silently
        where = printable_name(str(Path(error.filename).relative_to(top))) if error.filename else str(top)
        found.issues.append(Issue(where, "unreadable-folder", f"folder {where} cannot be listed ({error.strerror})"))

    for folder, dirs, files in os.walk(top, followlinks=True, onerror=unreadable):
        folder_path = Path(folder)
        parts = folder_path.relative_to(top).parts
        label = parts[0] if parts else None
        # real folders first, so that a link to one of them is the one reported, whatever the names
        ordered = sorted(dirs, key=lambda name: (os.path.islink(os.path.join(folder, name)), name))
        dirs[:] = []
        for name in ordered:
            child = folder_path / name
            identity = _identity(child)
            if identity in seen:
                where = printable_name(str(child.relative_to(top)))
                found.issues.append(
                    Issue(
                        where,
                        "folder-loop",
                        f"folder {where} leads to a folder listed already "
                        "(a symlink loop or a second link); not listed again",
                    )
                )
                continue
            seen.add(identity)
            dirs.append(name)
            if Path(name).suffix.lower() in suffixes:  # a folder named like a file: reported by the caller
                found.entries.append((child, label))
        for name in files:
            if Path(name).suffix.lower() in suffixes:
                found.entries.append((folder_path / name, label))
    found.entries.sort(key=lambda entry: str(entry[0].relative_to(top)))
    return found


def _identity(path: Path) -> tuple[int, int] | str:
    try:
        info = os.stat(path)
    except OSError:
        return str(path)
    return (info.st_dev, info.st_ino)


def is_regular_file(path: Path) -> bool:
    """True for a regular file (after links); False for FIFOs, folders, dangling links and loops."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def scan_image_files(images_dir: Path) -> tuple[list[tuple[str, str | None, Path]], list[Issue]]:
    """(image id, folder label or None for flat layouts, path) of every regular image file, sorted by
    relative path, and the rows of entries that cannot be read (see the module's listing rules)."""
    walked = walk_entries(images_dir, IMAGE_SUFFIXES)
    files, issues = [], list(walked.issues)
    for path, label in walked.entries:
        where = printable_name(str(path.relative_to(images_dir)))
        if not is_regular_file(path):
            issues.append(
                Issue(
                    printable_name(path.stem),
                    "not-a-regular-file",
                    f"{where} is not a regular file (a folder, FIFO, device, dangling link or link loop)",
                )
            )
            continue
        files.append((path.stem, label if path.parent != images_dir else None, path))
    return files, issues


def list_image_files(images_dir: Path) -> list[tuple[str, str | None, Path]]:
    """(image id, folder label or None for flat layouts, path), sorted by relative path."""
    return scan_image_files(images_dir)[0]


def parse_voc_xml(path: Path) -> list[Box]:
    """Boxes of one Pascal-VOC XML; raises ValueError with a readable reason when malformed."""
    if not is_regular_file(path):  # a folder, a dangling link, a loop or a FIFO (which would block)
        raise ValueError(f"{path.name} is not a regular file (a folder, FIFO, dangling link or link loop)")
    try:
        tree = ET.parse(path)
    except ET.ParseError as exc:
        raise ValueError(f"not well-formed XML ({exc})") from None
    except OSError as exc:
        raise ValueError(f"{path.name} cannot be read ({exc.strerror or exc})") from None
    boxes = []
    for obj in tree.getroot().iter("object"):
        name = (obj.findtext("name") or "").strip()
        bndbox = obj.find("bndbox")
        if not name or bndbox is None:
            raise ValueError("an <object> lacks <name> or <bndbox>")
        boxes.append(
            Box(*(parse_coordinate(bndbox.findtext(f), f) for f in ("xmin", "ymin", "xmax", "ymax")), wnid=name)
        )
    if not boxes:
        raise ValueError("no <object> elements")
    return boxes


class _XmlAnnotations:
    """Box XMLs indexed by file stem, wherever they sit below the annotation folder."""

    def __init__(self, folder: Path, issues: list[Issue]) -> None:
        self.by_id: dict[str, Path] = {}
        walked = walk_entries(folder, {".xml"})
        issues.extend(walked.issues)
        for path, _ in walked.entries:
            first = self.by_id.setdefault(path.stem, path)
            if first != path:
                issues.append(
                    Issue(
                        printable_name(path.stem),
                        "duplicate-id",
                        f"{printable_name(str(path.relative_to(folder)))} repeats the boxes file "
                        f"{printable_name(str(first.relative_to(folder)))}; used the first",
                    )
                )

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
    for image_id, line in solution.duplicates:
        issues.append(
            Issue(image_id, "duplicate-id", f"a second row for {image_id} in {path.name} (line {line}) was ignored")
        )
    for line, why in solution.bad_lines:
        issues.append(Issue(f"{path.name}:{line}", "malformed-annotation", f"{path.name} line {line}: {why}"))
    if solution.encoding != "utf-8":
        issues.append(Issue(path.name, "annotation-encoding", f"{path.name} is not UTF-8; read as {solution.encoding}"))
    return solution


def check_synset_mapping(root: Path) -> list[Issue]:
    """Kaggle ships LOC_synset_mapping.txt; it must list exactly the 1000 classes we index. Only its
    wnids are read, so an encoding other than UTF-8 (in the class names) is reported, not fatal."""
    for base in (root, root.parent):
        mapping = base / "LOC_synset_mapping.txt"
        if is_regular_file(mapping):
            text, encoding = decode_annotation_text(mapping.read_bytes())
            wnids = {line.split()[0] for line in text.splitlines() if line.strip()}
            if wnids != set(classes_by_wnid()):
                raise SourceError(
                    f"{mapping} lists {len(wnids)} classes that differ from ImageNet-1k's 1000 wnids; "
                    "this toolkit indexes classes by the standard ILSVRC2012 class list"
                )
            if encoding != "utf-8":
                return [Issue(mapping.name, "annotation-encoding", f"{mapping.name} is not UTF-8; read as {encoding}")]
            return []
    return []


def _usable_boxes(image_id: str, label: str, boxes: list[Box], issues: list[Issue]) -> list[Box]:
    kept = []
    for box in boxes:
        if not is_known_wnid(box.wnid):
            issues.append(
                Issue(
                    image_id,
                    "box-unknown-wnid",
                    f"box {box.as_list()} is labelled {box.wnid!r}, not an ImageNet-1k wnid",
                )
            )
        elif box.is_empty:
            issues.append(Issue(image_id, "box-empty", f"box {box.as_list()} has zero area or inverted corners"))
        else:
            if box.wnid != label:
                issues.append(
                    Issue(
                        image_id,
                        "box-label-mismatch",
                        f"box {box.as_list()} is labelled {box.wnid} but the image is {label}",
                    )
                )
            kept.append(box)
    return kept


SPLITS = ("train", "val", "test")


def split_objects(split: str) -> Callable[[str, bool], bool]:
    """Which entries of a store's ImageNet root a run of `split` reads: images, box XMLs, LOC csvs and
    the synset mapping, but none inside another split's folder nor another split's LOC csv. Entries
    that are not objects (links: a linked class folder) are all taken, to be reported."""
    others = set(SPLITS) - {split}
    wanted_suffixes = IMAGE_SUFFIXES | {".xml", ".csv", ".txt"}

    def wanted(name: str, is_object: bool) -> bool:
        *folders, leaf = name.split("/")
        if others & set(folders) or leaf in others:
            return False
        if not is_object:
            return True
        if PurePosixPath(leaf).suffix.lower() not in wanted_suffixes:
            return False
        return not any(leaf == f"LOC_{other}_solution.csv" for other in others)

    return wanted


def staged_source(url: str, split: str, announce=print) -> tuple[Path, list[Issue], int]:
    """An ImageNet root on an object store, copied where the listing reads it: the local root, a row
    for each object not copied (a name that cannot be a path, a link) and how many of them are images."""
    staged = stage_source(url, split_objects(split))
    announce(f"source: {staged.url} staged in {staged.root} ({staged.fetched} objects fetched)")
    issues = [Issue(printable_name(name), "unsafe-name", why) for name, why in staged.refused]
    images = sum(PurePosixPath(name).suffix.lower() in IMAGE_SUFFIXES for name, _ in staged.refused)
    return staged.root, issues, images


def load_sources(root: Path | str, split: str, boxes: Path | None = None, announce=print) -> SourceListing:
    """Every usable image of a split with its label and valid boxes, sorted by image id. `root` may be
    an object store URL (s3://, gs://, file://): its objects are staged first (`staged_source`)."""
    issues: list[Issue] = []
    refused_images = 0
    if is_object_url(root):
        root, issues, refused_images = staged_source(str(root), split, announce)
    root = Path(root)
    layout = detect_layout(root, split)
    issues += check_synset_mapping(root)
    if boxes is None:
        boxes = find_annotations(root, split, announce)
    boxes = Path(boxes)
    if boxes.is_file():
        annotations = _csv_annotations(boxes, issues)
    elif boxes.is_dir():
        nested = boxes / split
        annotations = _XmlAnnotations(nested if nested.is_dir() else boxes, issues)
    else:
        raise SourceError(f"--boxes {boxes} does not exist; pass a folder of XMLs or a LOC_{split}_solution.csv")

    files, file_issues = scan_image_files(layout.images_dir)
    issues += file_issues
    records: list[SourceImage] = []
    seen: dict[str, Path] = {}
    for image_id, folder_label, path in files:
        problem = image_id_problem(image_id)
        if problem:
            issues.append(
                Issue(
                    printable_name(image_id),
                    "unsafe-image-id",
                    f"{printable_name(str(path.relative_to(layout.images_dir)))}: the id {problem}; "
                    f"ids are sample keys: [A-Za-z0-9-][A-Za-z0-9_-]*, at most {MAX_IMAGE_ID_LENGTH} "
                    "characters (rename the file)",
                )
            )
            continue
        if image_id in seen:
            issues.append(
                Issue(
                    image_id,
                    "duplicate-id",
                    f"{path.relative_to(layout.images_dir)} repeats {seen[image_id].relative_to(layout.images_dir)}; "
                    "kept the first",
                )
            )
            continue
        seen[image_id] = path
        if folder_label is not None and not is_known_wnid(folder_label):
            issues.append(
                Issue(image_id, "unknown-wnid", f"folder {printable_name(folder_label)!r} is not an ImageNet-1k wnid")
            )
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
            issues.append(
                Issue(image_id, "unknown-wnid", f"annotation labels the image {label!r}, not an ImageNet-1k wnid")
            )
            continue
        kept = _usable_boxes(image_id, label, image_boxes, issues)
        if not any(box.wnid == label for box in kept):
            issues.append(Issue(image_id, "no-valid-box", f"no valid box of the image's class {label}"))
            continue
        records.append(SourceImage(image_id, label, str(path), tuple(kept)))

    listed = set(seen) | {image_id for image_id, _, _ in files}
    for orphan in sorted(annotations.ids() - listed):
        issues.append(
            Issue(
                printable_name(orphan), "annotation-without-image", "boxes are annotated but no image file has this id"
            )
        )
    records.sort(key=lambda r: r.image_id)
    issues.sort(key=lambda i: i.sort_key)
    unreadable = sum(issue.reason == "not-a-regular-file" for issue in file_issues)
    return SourceListing(layout, boxes, records, issues, len(files) + unreadable + refused_images)
