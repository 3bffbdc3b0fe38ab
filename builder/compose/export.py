"""`hsi export --imagefolder DIR`: a composed dataset as plain image folders, the layout the paper's
scripts wrote, for timm's `validate.py` and torchvision's `ImageFolder`.

Layouts (one folder per split of the dataset, `DIR/<split>/`, which is the paper's output folder,
e.g. its `Hard-Spurious-ImageNet/test/`):

  paper   <size>/Group_<n>/<wnid>/<source id>_<n>_<size>.JPEG, with the paper's group numbers
          (GROUP_NUMBERS): create_dataset.py saves the own-background centre and corner composites
          as groups 1 and 2 and the other-class-background ones as 3 and 4, so CeO=1, CoO=2,
          CeR=3, CoR=4. Only the paper's four groups have numbers: a dataset with other groups is
          refused (use `--layout groups`).
  groups  <size>/<group>/<wnid>/<sample key>.JPEG, our group names (a `/` in a name such as
          `left/original` becomes `_`), for any composed config.

Class numbers. Each `<size>/<group>/` folder is one ImageFolder root, and ImageFolder readers
number its class folders 0..K-1 in sorted order. A build without some of the classes (a partial
ImageNet copy, a skipped sample) would so give an ImageNet model wrong labels without a word. So
every root gets a folder for every class of the dataset's label space (the 1000 ImageNet wnids,
or the -10 subset's classes, whose labels are 0-9), empty placeholders for the missing ones, and
sorted folder order IS the dataset's label order: torchvision's `ImageFolder(root,
allow_empty=True)` then gives each image its `cls` (without `allow_empty` it refuses the empty
folders loudly instead of renumbering). timm's reader numbers only folders that hold images, so
`DIR/classes.txt` (one wnid per line, in label order, timm's `--class-map` format) and
`DIR/class_to_idx.json` are written too, and the command warns whenever placeholders were needed.

Every name that becomes part of a path (split, size, group, wnid, source id, key) goes through
`builder.core.names`; a sample whose metadata fails a check, or whose wnid, `label` and `cls`
disagree (its folder would give it another target), is skipped and recorded as an error row
(`skipped` and `errors` in `_export.json`); the rest of the export completes.

The JPEG bytes are copied as they are in the shards (byte-identical), every shard's sha256 is
checked against the dataset's manifest first, and `DIR/_export.json` lists every file written with
its sha256 (export_record). The folders are built under a fresh temporary sibling and renamed into
place at the end, so DIR never holds half an export; DIR is locked for the run (by its resolved
path), used only when it is new or empty, or replaced with `--overwrite` when every entry in it is
proven ours: a file its record lists with the same bytes, or a folder the record accounts for
(never a foreign folder, never a link, never a file someone put into or edited in an export:
that is refused, naming the files).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.compose.export_record import (
    EXPORT_MANIFEST,
    ExportRecord,
    owned_entries_check,
    read_export_record,
    remove_export,
)
from builder.core.classes import classes_by_wnid, imagenet_classes
from builder.core.errors import InputError, SettingsError
from builder.core.hashing import sha256_file
from builder.core.locks import exclusive_folder
from builder.core.manifest import MANIFEST_NAME, Manifest, write_json_atomic
from builder.core.names import (
    UnsafeNameError,
    check_path_component,
    check_shard_filename,
    check_size,
    check_split_name,
    check_wnid,
    inside,
)
from builder.core.shard_read import ShardReadError, collect_read_errors, iter_shard
from builder.core.taxonomy import PAPER_GROUPS, sorted_groups
from builder.core.untrusted import Fields
from builder.formats.composites import check_composite_json, decode_composite_json, decode_label

__all__ = ["EXPORT_MANIFEST", "export_imagefolder", "read_export_record"]

LAYOUTS = ("paper", "groups")
# The paper's Group_<n> folders (create_dataset.py and create_dataset_preserve_AR.py, save_img calls).
GROUP_NUMBERS = {"CeO": 1, "CoO": 2, "CeR": 3, "CoR": 4}
CLASSES_TXT = "classes.txt"
CLASS_TO_IDX = "class_to_idx.json"
# Why a sample is left out of an export (the `reason` of its row in `skipped`).
SKIP_REASONS = {
    "members": "the sample lacks its jpg, cls or json member",
    "json-decode": "its json member does not parse",
    "schema": "its json does not fit the composite schema",
    "unsafe-name": "a value that becomes part of its path is not a safe name",
    "label": "its wnid, label and cls disagree, so its class folder would give it another target",
    "group": "the paper's layout has no Group_<n> for its group",
    "duplicate-key": "its key was exported already",
}


@dataclass(frozen=True)
class ExportSummary:
    folder: Path
    files: int
    by_split: dict[str, int]
    classes: int = 0  # the label space's size
    classes_present: int = 0  # how many of them have images in the export
    placeholders: int = 0  # empty class folders written so folder order is label order
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> samples left out


class SkippedSample(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def exported_path(meta: dict, key: str, layout: str) -> str:
    """The path of one sample below its split's folder; SkippedSample when a part of it is not a safe name."""
    try:
        size, wnid = check_size(meta["size"]), check_wnid(meta["wnid"])
        if layout == "paper":
            if meta["group"] not in GROUP_NUMBERS:
                raise SkippedSample("group", f"group {meta['group']!r} has no Group_<n> in the paper's layout")
            number = GROUP_NUMBERS[meta["group"]]
            source = check_path_component(meta["source_id"], "source id")
            return f"{size}/Group_{number}/{wnid}/{check_path_component(f'{source}_{number}_{size}.JPEG')}"
        group = check_path_component(str(meta["group"]).replace("/", "_"), "group folder")
        return f"{size}/{group}/{wnid}/{check_path_component(f'{key}.JPEG', 'sample key')}"
    except UnsafeNameError as error:
        raise SkippedSample("unsafe-name", str(error)) from None


def label_space(manifest: Manifest, dataset_dir: Path) -> list[str]:
    """The wnids of the dataset's labels in label order: the -10 subset's (sorted, as it numbers
    them) when its spec has one, else the 1000 ImageNet classes (label = class index)."""
    if manifest.spec is None or (isinstance(manifest.spec, Mapping) and manifest.spec.get("subset") is None):
        return [c.wnid for c in imagenet_classes()]
    spec = Fields(manifest.spec, dataset_dir / MANIFEST_NAME, "spec")
    pairs = spec.object("subset").object("pairs")
    wnids = sorted(str(wnid) for wnid in pairs.data)
    for wnid in wnids:
        if not (isinstance(wnid, str) and wnid in classes_by_wnid()):
            raise pairs.error(f"{wnid!r} is not one of the 1000 ImageNet wnids")
    if not wnids:
        raise pairs.error("lists no classes")
    return wnids


def read_sample(members: Mapping[str, bytes]) -> dict:
    """The sample's metadata, once it has the composite members and schema."""
    if not all(name in members for name in ("jpg", "cls", "json")):
        raise SkippedSample("members", f"members {sorted(members)}, not cls, jpg and json")
    try:
        meta = decode_composite_json(members)
    except ValueError as error:
        raise SkippedSample("json-decode", f"json member does not parse ({error})") from None
    problems = check_composite_json(meta)
    if problems:
        raise SkippedSample("schema", "; ".join(problems[:3]))
    return meta


def check_label(meta: Mapping[str, Any], members: Mapping[str, bytes], labels: Mapping[str, int]) -> None:
    """Refuse a sample whose class folder would give it another target than its own label."""
    wnid = meta["wnid"]
    known = classes_by_wnid().get(wnid)
    if wnid not in labels or known is None or known.index != meta["class_index"]:
        raise SkippedSample(
            "label", f"wnid {wnid} with class_index {meta['class_index']} is not one of this dataset's classes"
        )
    try:
        cls: int | None = decode_label(members)
    except ValueError:
        cls = None
    if meta["label"] != labels[wnid] or cls != labels[wnid]:
        raise SkippedSample(
            "label", f"label {meta['label']} and cls {cls} of {wnid} are not its label {labels[wnid]} in this dataset"
        )


def check_layout(manifest: Manifest, splits: list[str], layout: str) -> None:
    if layout not in LAYOUTS:
        raise InputError(f"--layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if layout != "paper":
        return
    groups = {g for s in splits for g in (manifest.splits[s].counts or {}).get("group", {})}
    other = [g for g in sorted_groups(groups) if g not in PAPER_GROUPS]
    if other:
        raise InputError(
            f"the paper's layout numbers only its groups {', '.join(PAPER_GROUPS)} (Group_1-4); this "
            f"dataset also holds {', '.join(other)}: export it with --layout groups"
        )


def claim_folder(folder: Path, overwrite: bool) -> ExportRecord | None:
    """Refuse a non-empty folder unless it is an export of ours, every entry proven ours, and
    `overwrite` is given; then the record of what may be deleted (None for a new or empty folder)."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise InputError(f"{folder} exists and is not a folder; choose another --imagefolder")
    if not folder.is_dir() or not any(folder.iterdir()):
        return None
    if not ((folder / EXPORT_MANIFEST).is_file() or (folder / EXPORT_MANIFEST).is_symlink()):
        raise SettingsError(
            f"{folder} is not empty and holds no {EXPORT_MANIFEST}: it is not an export of this "
            "toolkit, so nothing is written there; choose an empty or new --imagefolder"
        )
    if not overwrite:
        raise SettingsError(f"{folder} already holds an export; pass --overwrite to replace it")
    return owned_entries_check(folder)


def export_imagefolder(
    dataset_dir: Path, folder: Path, *, layout: str = "paper", splits: list[str] | None = None, overwrite: bool = False
) -> ExportSummary:
    """Write the composites of `dataset_dir` as image folders under `folder` (see the module docstring)."""
    dataset_dir, folder = Path(dataset_dir), Path(folder)
    manifest = Manifest.read(dataset_dir)
    if manifest.stage != "compose":
        raise InputError(f"{dataset_dir} holds a {manifest.stage!r} manifest, not a composed dataset (hsi compose)")
    chosen = splits or sorted(manifest.splits)
    for split in chosen:
        manifest.split(split)
        check_split_name(split)
    check_layout(manifest, chosen, layout)
    classes = label_space(manifest, dataset_dir)
    with exclusive_folder(folder):
        earlier = claim_folder(folder, overwrite)
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
        try:
            staging.chmod(0o777 & ~_umask())  # as mkdir would make it; mkdtemp makes it private
            written = write_splits(dataset_dir, manifest, chosen, layout, staging, classes)
            write_json_atomic(staging / EXPORT_MANIFEST, written.record(manifest, dataset_dir, layout, chosen))
            if earlier is not None:
                remove_export(folder, earlier)
            elif folder.is_dir():
                folder.rmdir()
            os.replace(staging, folder)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    by_split = Counter(row["split"] for row in written.files)
    present = {row["path"].split("/")[-2] for row in written.files}
    return ExportSummary(
        folder,
        len(written.files),
        dict(by_split),
        classes=len(classes),
        classes_present=len(present),
        placeholders=written.placeholders,
        skipped=dict(Counter(row["reason"] for row in written.skipped)),
    )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@dataclass
class Written:
    files: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    classes: list[str]
    roots: list[str]
    index_files: list[dict[str, str]]
    placeholders: int

    def record(self, manifest: Manifest, dataset_dir: Path, layout: str, splits: list[str]) -> dict:
        by_reason = dict(sorted(Counter(row["reason"] for row in self.skipped).items()))
        return {
            "tool": dict(manifest.tool),
            "dataset": str(dataset_dir),
            "config": manifest.config,
            "fingerprint": manifest.fingerprint,
            "layout": layout,
            "group_numbers": GROUP_NUMBERS if layout == "paper" else None,
            "splits": splits,
            "files": self.files,
            "classes": self.classes,
            "imagefolder_roots": self.roots,
            "index_files": self.index_files,
            "errors": {"total": len(self.skipped), "by_reason": by_reason},
            "skipped": self.skipped,
        }


def write_splits(
    dataset_dir: Path, manifest: Manifest, splits: list[str], layout: str, staging: Path, classes: list[str]
) -> Written:
    labels = {wnid: n for n, wnid in enumerate(classes)}
    files: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    written: dict[str, str] = {}
    keys: set[tuple[str, str]] = set()
    for split in splits:
        for stats in manifest.split(split).shards:
            shard = dataset_dir / check_shard_filename(stats.filename, split)
            if not shard.is_file() or sha256_file(shard) != stats.sha256:
                raise InputError(
                    f"shard {stats.filename} of {dataset_dir} does not match its manifest; "
                    "validate the dataset (hsi validate) or rebuild it before exporting"
                )
            read_errors: list[ShardReadError] = []
            for key, members in iter_shard(shard, collect_read_errors(read_errors)):
                try:
                    if (split, key) in keys:
                        raise SkippedSample("duplicate-key", f"key {key} appears twice in split {split}")
                    meta = read_sample(members)
                    path = f"{split}/{exported_path(meta, key, layout)}"
                    check_label(meta, members, labels)
                except SkippedSample as skip:
                    skipped.append(_skip_row(split, stats.filename, key, skip.reason, skip.detail))
                    continue
                keys.add((split, key))
                if path in written:
                    raise InputError(
                        f"samples {written[path]} and {key} both map to {path} in the paper's layout "
                        "(two placements in one group); export with --layout groups"
                    )
                written[path] = key
                target = inside(staging, *path.split("/"))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(members["jpg"])
                files.append(
                    {
                        "path": path,
                        "sha256": hashlib.sha256(members["jpg"]).hexdigest(),
                        "shard": stats.filename,
                        "key": key,
                        "split": split,
                    }
                )
            skipped += [_skip_row(split, stats.filename, e.key, e.reason, e.detail) for e in read_errors]
    roots = sorted({path.rsplit("/", 2)[0] for path in written})
    placeholders = 0
    for root in roots:
        for wnid in classes:
            placeholder = inside(staging, *root.split("/"), wnid)
            if not placeholder.is_dir():
                placeholder.mkdir()
                placeholders += 1
    index_files = [
        _write_index(staging, CLASSES_TXT, "".join(f"{wnid}\n" for wnid in classes)),
        _write_index(staging, CLASS_TO_IDX, json_text({wnid: n for n, wnid in enumerate(classes)})),
    ]
    return Written(sorted(files, key=lambda row: row["path"]), skipped, classes, roots, index_files, placeholders)


def json_text(payload: Any) -> str:
    return json.dumps(payload, indent=2) + "\n"


def _write_index(staging: Path, name: str, text: str) -> dict[str, str]:
    data = text.encode("utf-8")
    (staging / name).write_bytes(data)
    return {"path": name, "sha256": hashlib.sha256(data).hexdigest()}


def _skip_row(split: str, shard: str, key: str | None, reason: str, detail: str) -> dict[str, Any]:
    return {"split": split, "shard": shard, "key": key, "reason": reason, "detail": detail[:300]}
