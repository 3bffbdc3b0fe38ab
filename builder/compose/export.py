"""`hsi export --imagefolder DIR`: a composed dataset as plain image folders, the layout the paper's
scripts wrote and that timm's `validate.py` and torchvision's `ImageFolder` read directly.

Layouts (one folder per split of the dataset, `DIR/<split>/`, which is the paper's output folder,
e.g. its `Hard-Spurious-ImageNet/test/`):

  paper   <size>/Group_<n>/<wnid>/<source id>_<n>_<size>.JPEG, with the paper's group numbers
          (GROUP_NUMBERS): create_dataset.py saves the own-background centre and corner composites
          as groups 1 and 2 and the other-class-background ones as 3 and 4, so CeO=1, CoO=2,
          CeR=3, CoR=4. Only the paper's four groups have numbers: a dataset with other groups is
          refused (use `--layout groups`).
  groups  <size>/<group>/<wnid>/<sample key>.JPEG, our group names (a `/` in a name such as
          `left/original` becomes `_`), for any composed config.

The JPEG bytes are copied as they are in the shards (byte-identical), every shard's sha256 is
checked against the dataset's manifest first, and `DIR/_export.json` lists every file written with
its sha256, shard and sample key. The folders are built under a temporary sibling and renamed into
place at the end, so DIR never holds half an export; an existing DIR is used only when it is empty,
or replaced with `--overwrite` when it holds an export of this toolkit and nothing else (never a
foreign folder, never a file someone put into an export: that is refused, naming the files).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import InputError, SettingsError
from builder.core.folders import refuse_foreign, stray_entries
from builder.core.manifest import Manifest, write_json_atomic
from builder.core.shards import iter_shard, sha256_file
from builder.core.taxonomy import PAPER_GROUPS, sorted_groups
from builder.formats.composites import decode_composite_json

EXPORT_MANIFEST = "_export.json"
LAYOUTS = ("paper", "groups")
# The paper's Group_<n> folders (create_dataset.py and create_dataset_preserve_AR.py, save_img calls).
GROUP_NUMBERS = {"CeO": 1, "CoO": 2, "CeR": 3, "CoR": 4}


@dataclass(frozen=True)
class ExportSummary:
    folder: Path
    files: int
    by_split: dict[str, int]


def exported_path(meta: dict, key: str, layout: str) -> str:
    """The path of one sample below its split's folder."""
    size, wnid = meta["size"], meta["wnid"]
    if layout == "paper":
        number = GROUP_NUMBERS[meta["group"]]
        return f"{size}/Group_{number}/{wnid}/{meta['source_id']}_{number}_{size}.JPEG"
    return f"{size}/{meta['group'].replace('/', '_')}/{wnid}/{key}.JPEG"


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


def claim_folder(folder: Path, overwrite: bool) -> None:
    """Refuse a non-empty folder unless it is an export of ours and `overwrite` is given."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise InputError(f"{folder} exists and is not a folder; choose another --imagefolder")
    if not folder.is_dir() or not any(folder.iterdir()):
        return
    if not (folder / EXPORT_MANIFEST).is_file():
        raise SettingsError(
            f"{folder} is not empty and holds no {EXPORT_MANIFEST}: it is not an export of this "
            "toolkit, so nothing is written there; choose an empty or new --imagefolder"
        )
    if not overwrite:
        raise SettingsError(f"{folder} already holds an export; pass --overwrite to replace it")
    refuse_foreign(folder, foreign_export_entries(folder), "--imagefolder", SettingsError)


def foreign_export_entries(folder: Path) -> list[str]:
    """The entries of an earlier export that it did not write (see stray_entries): anything but
    its `_export.json`, the files that lists and the folders holding them."""
    try:
        listed = {row["path"] for row in read_export_manifest(folder)["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        listed = set()  # an unreadable record claims nothing: everything in the folder is kept
    listed = {path for path in listed if isinstance(path, str)}  # a path that is not a string claims nothing
    parents = {"/".join(path.split("/")[:n]) for path in listed for n in range(1, path.count("/") + 1)}
    return stray_entries(folder, lambda path: path == EXPORT_MANIFEST or path in listed, parents.__contains__)


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
    check_layout(manifest, chosen, layout)
    claim_folder(folder, overwrite)
    staging = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        files = write_splits(dataset_dir, manifest, chosen, layout, staging)
        write_json_atomic(
            staging / EXPORT_MANIFEST,
            {
                "tool": dict(manifest.tool),
                "dataset": str(dataset_dir),
                "config": manifest.config,
                "fingerprint": manifest.fingerprint,
                "layout": layout,
                "group_numbers": GROUP_NUMBERS if layout == "paper" else None,
                "splits": chosen,
                "files": files,
            },
        )
        if folder.is_dir():
            shutil.rmtree(folder) if any(folder.iterdir()) else folder.rmdir()
        os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    by_split: dict[str, int] = {}
    for row in files:
        by_split[row["split"]] = by_split.get(row["split"], 0) + 1
    return ExportSummary(folder, len(files), by_split)


def write_splits(
    dataset_dir: Path, manifest: Manifest, splits: list[str], layout: str, staging: Path
) -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = []
    written: dict[str, str] = {}
    for split in splits:
        for stats in manifest.split(split).shards:
            shard = dataset_dir / stats.filename
            if Path(stats.filename).name != stats.filename or sha256_file(shard) != stats.sha256:
                raise InputError(
                    f"shard {stats.filename} of {dataset_dir} does not match its manifest; "
                    "validate the dataset (hsi validate) or rebuild it before exporting"
                )
            for key, members in iter_shard(shard):
                meta = decode_composite_json(members)
                path = f"{split}/{exported_path(meta, key, layout)}"
                if path in written:
                    raise InputError(
                        f"samples {written[path]} and {key} both map to {path} in the paper's layout "
                        "(two placements in one group); export with --layout groups"
                    )
                written[path] = key
                target = staging / path
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
    return sorted(files, key=lambda row: row["path"])


def read_export_manifest(folder: Path) -> dict:
    return json.loads((Path(folder) / EXPORT_MANIFEST).read_text("utf-8"))
