"""`hsi leaderboard verify ENTRY --record`: verification.json beside the entry, written only when
asked and only after the verification held (evaluation.ranking.verification_record holds its
schema and its reader).

An entry inside an `hsi eval --out` folder (its model folder, or a `--from --out` folder) is
written through that folder's OwnedFolder, held for the write: nothing through a link, never over
a file the folder's record does not list, and a later run of `hsi eval` that rewrites the entry
removes the record with its other leftovers. Anywhere else (a submission's folder) the record is
written beside the entry through a temporary file and a rename; an existing verification.json is
replaced only when it reads as a record of this schema, never a link or another file.
"""

from __future__ import annotations

import os
from pathlib import Path

from builder.core.errors import HsiError, UsageError, printable
from builder.core.owned import RECORD_NAME, OwnedFolder
from builder.core.untrusted import Fields, read_json
from evaluation.ranking.verification_record import VERIFICATION_JSON, VERIFICATION_SCHEMA, record_text

from .eval_folder import EVAL_KIND


def _owner(folder: Path) -> tuple[Path, str] | None:
    """(the `hsi eval --out` folder holding `folder`, the record's path inside it), or None."""
    if (folder / RECORD_NAME).exists() or (folder / RECORD_NAME).is_symlink():
        return folder, VERIFICATION_JSON
    if (folder.parent / RECORD_NAME).exists() or (folder.parent / RECORD_NAME).is_symlink():
        return folder.parent, f"{folder.name}/{VERIFICATION_JSON}"
    return None


def _replaceable(path: Path) -> None:
    """Refuse to replace what is not an earlier verification record."""
    if not (path.exists() or path.is_symlink()):
        return
    shown = printable(str(path))
    try:
        Fields(read_json(path, "verification record"), path).string("schema", choices=(VERIFICATION_SCHEMA,))
    except HsiError:  # not JSON, a link, a folder, another schema
        raise UsageError(
            f"{shown} is not a verification record hsi leaderboard verify wrote: it is never replaced; move it aside"
        ) from None


def write_record(entry_file: Path, record: dict) -> Path:
    """verification.json beside `entry_file` (see the module's docstring); its path."""
    folder = Path(entry_file).parent
    owner = _owner(folder)
    if owner is not None:
        root, relative = owner
        with OwnedFolder(root, EVAL_KIND, flag="ENTRY's folder") as owned:
            owned.write_text(relative, record_text(record))
        return root / relative
    target = folder / VERIFICATION_JSON
    _replaceable(target)
    tmp = folder / f".{VERIFICATION_JSON}.{os.getpid()}.tmp"
    try:
        with open(tmp, "x", encoding="utf-8") as handle:  # never through a planted link
            handle.write(record_text(record))
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


__all__ = ["write_record"]
