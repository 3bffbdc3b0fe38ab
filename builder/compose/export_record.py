"""`_export.json`: what `hsi export` wrote in its folder, and the only thing `--overwrite` deletes.

The record lists every file the export wrote with its sha256 (the images under `files`, the class
lists under `index_files`), and the ImageFolder roots whose class folders it made (`imagefolder_roots`,
one folder per class of `classes` in each, some of them empty placeholders). A record on disk is
untrusted input (anyone can write a file called `_export.json`), so it is read through the one
validation layer (`read_export_record`: one line naming the file and field), and `--overwrite`
deletes a file only when the record lists it and its bytes still match the recorded sha256, and a
folder only when it is one the record accounts for and is empty by then. Links are never followed:
a link anywhere in the folder is someone else's entry, and the deletion refuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.errors import SettingsError, first_few
from builder.core.folders import is_plain_file, is_plain_folder, refuse_foreign, stray_entries
from builder.core.hashing import sha256_file
from builder.core.names import UnsafeNameError, check_relative_path, check_wnid
from builder.core.untrusted import Fields, UntrustedInput, read_json

EXPORT_MANIFEST = "_export.json"
SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ExportRecord:
    """What an earlier export says it wrote: {relative path: sha256}, its ImageFolder roots and classes."""

    files: dict[str, str] = field(default_factory=dict)
    roots: frozenset[str] = frozenset()
    classes: frozenset[str] = frozenset()

    def folders(self) -> set[str]:
        """Every folder the record accounts for: those holding its files and its class folders."""
        parents = {"/".join(path.split("/")[:n]) for path in self.files for n in range(1, path.count("/") + 1)}
        placeholders = {f"{root}/{wnid}" for root in self.roots for wnid in self.classes}
        roots = {"/".join(root.split("/")[:n]) for root in self.roots for n in range(1, root.count("/") + 2)}
        return parents | placeholders | roots


def read_export_record(folder: Path) -> ExportRecord:
    """The validated record of the export in `folder`; UntrustedInput (one line) when it is not one."""
    path = Path(folder) / EXPORT_MANIFEST
    record = Fields(read_json(path, "export record"), path)
    files: dict[str, str] = {}
    for key in ("files", "index_files"):
        for row in record.objects(key, []):
            relative = _relative(row, "path")
            if relative in files:
                raise row.error(f"{relative!r} is listed twice", "path")
            files[relative] = row.string("sha256", pattern=SHA256)
    roots = record.list("imagefolder_roots", [])
    for n, root in enumerate(roots):
        _checked(lambda root=root: check_relative_path(root, "folder name"), record, f"imagefolder_roots[{n}]")
    classes = record.list("classes", [])
    for n, wnid in enumerate(classes):
        _checked(lambda wnid=wnid: check_wnid(wnid), record, f"classes[{n}]")
    return ExportRecord(files, frozenset(roots), frozenset(classes))


def _relative(row: Fields, key: str) -> str:
    value = row.string(key)
    _checked(lambda: check_relative_path(value, "path component"), row, key)
    return value


def _checked(check, fields: Fields, key: str) -> None:
    try:
        check()
    except UnsafeNameError as error:
        raise fields.error(str(error), key) from None


def owned_entries_check(folder: Path) -> ExportRecord:
    """The record of the export in `folder`, once every entry there is proven ours: listed with its
    bytes unchanged, or a folder the record accounts for. Refuses (naming them) otherwise, and when
    the record itself cannot be read (it then claims nothing, not even itself)."""
    try:
        record = read_export_record(folder)
    except UntrustedInput as error:
        foreign = stray_entries(folder, lambda path: False, lambda path: False) or [EXPORT_MANIFEST]
        try:
            refuse_foreign(folder, foreign, "--imagefolder", SettingsError)
        except SettingsError as refusal:
            raise SettingsError(f"{refusal} (its {EXPORT_MANIFEST} is not a record of ours: {error})") from None
    refuse_foreign(folder, foreign_export_entries(folder, record), "--imagefolder", SettingsError)
    return record


def foreign_export_entries(folder: Path, record: ExportRecord) -> list[str]:
    """The entries of an export folder it cannot prove it wrote (see stray_entries): anything but its
    record, the files that lists whose bytes still match, and the folders it accounts for."""
    folders = record.folders()

    def own_file(path: str) -> bool:
        return path == EXPORT_MANIFEST or (path in record.files and sha256_file(folder / path) == record.files[path])

    return stray_entries(folder, own_file, folders.__contains__)


def remove_export(folder: Path, record: ExportRecord) -> None:
    """Delete the export in `folder` that `owned_entries_check` accepted: each listed file (checked
    again: a plain file on a path without links, bytes unchanged), the folders the record accounts
    for once empty, its record, and the folder. Whatever else turned up since is refused, by name."""
    folder = Path(folder)
    changed = []
    for relative, sha256 in sorted(record.files.items()):
        target = _plain_path(folder, relative)
        if target is None:
            continue
        if not is_plain_file(target) or sha256_file(target) != sha256:
            changed.append(relative)
            continue
        target.unlink()
    for relative in sorted(record.folders(), key=lambda path: (-path.count("/"), path)):
        target = _plain_path(folder, relative)
        if target is not None and is_plain_folder(target) and not any(target.iterdir()):
            target.rmdir()
    manifest = folder / EXPORT_MANIFEST
    if is_plain_file(manifest):
        manifest.unlink()
    left = changed or stray_entries(folder, lambda path: False, lambda path: False)
    if left:
        raise SettingsError(
            f"--overwrite kept {first_few(left)} in {folder}, which changed while the export was replaced; "
            "the new export was not moved into place: move them out of the folder and run again"
        )
    folder.rmdir()


def _plain_path(folder: Path, relative: str) -> Path | None:
    """`folder/relative` when every folder on the way is a real folder (no link), else None."""
    path = folder
    for part in relative.split("/")[:-1]:
        path = path / part
        if not is_plain_folder(path):
            return None
    target = path / relative.split("/")[-1]
    return target if target.exists() or target.is_symlink() else None
