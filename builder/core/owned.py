"""The output folder of a model-half command (eval, train, probe, report, export's results): the same
rules as the build side's folders, for folders whose files are not shards.

- One run per folder: the folder is locked by its resolved path (`locks.exclusive_folder`), so a
  second run, or one reaching it through a link, is refused at once.
- Nothing through a link: the folder itself, and every folder or file on the way to what is
  written, must be a real entry inside it; a link planted there is refused, never followed.
- Only into its own folder: an empty folder, or one holding this command's record `_written.json`.
- Never a user's file: every file written is recorded with its sha256; a file is replaced or
  deleted only when the record lists it and its bytes still match (so a file the user put there or
  edited afterwards is refused, by name).

Files are written through a temporary beside them and renamed, so a killed run leaves whole files
and the record, written after each file, never lists a file that is not there.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from builder.core.errors import SettingsError, UsageError, printable, shown
from builder.core.interrupts import ctrl_c_deferred
from builder.core.locks import exclusive_folder
from builder.core.manifest import write_json_atomic

RECORD_NAME = "_written.json"
# One path component we write: starts with a letter, digit or '_', no '/', no '..', printable ASCII.
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+=,@-]{0,199}")
# Folders whose name a format outside this toolkit fixes with a leading dot (temporaries never end
# like these): the Hub's evaluation results of a model, `.eval_results/` (evaluation.ranking.hub_results).
_DOT_FOLDERS = frozenset({".eval_results"})


class OwnedFolderError(SettingsError):
    """A folder (or an entry in it) a command will not write: a link, a user's file, another command's."""


def _sha256(path: Path) -> str:
    from builder.core.hashing import sha256_file

    return sha256_file(path)


def owns_recorded(root: Path, files: dict[str, str], relative: str) -> bool:
    """Whether `relative` (below `root`) is a file the record `files` ({path: sha256}) lists: a plain
    file, not a link, its bytes unchanged since they were recorded."""
    target = root / relative
    return relative in files and target.is_file() and not target.is_symlink() and _sha256(target) == files[relative]


def _show(path: Path | str) -> str:
    return printable(str(path))


def check_relative(relative: str) -> list[str]:
    """The components of a path we write inside a folder, each one safe (see _COMPONENT)."""
    parts = relative.split("/")
    for n, part in enumerate(parts):
        if n < len(parts) - 1 and part in _DOT_FOLDERS:
            continue
        if not _COMPONENT.fullmatch(part) or part in (".", ".."):
            raise UsageError(f"{shown(relative)} is not a safe path to write inside an output folder")
    return parts


class OwnedFolder:
    """A model-half command's output folder, held for the length of a `with` block (see module doc)."""

    def __init__(self, root: Path, kind: str, flag: str = "--out") -> None:
        self.root = Path(root)
        self.kind = kind
        self.flag = flag
        self.files: dict[str, str] = {}
        self._stack: ExitStack | None = None

    # -- claiming --------------------------------------------------------------------------
    def __enter__(self) -> OwnedFolder:
        root = self.root
        if root.is_symlink():
            raise OwnedFolderError(
                f"{self.flag} {_show(root)} is a link (to {_show(os.readlink(root))}); this command never writes "
                "through a link: pass the folder it leads to, or another folder"
            )
        if root.exists() and not root.is_dir():
            raise OwnedFolderError(f"{self.flag} {_show(root)} is a file, not a folder: choose a folder to write into")
        self._stack = ExitStack()
        try:
            self._stack.enter_context(exclusive_folder(root.resolve()))
            self.files = self._read_record()  # the folder itself is made by the first write: a refusal leaves none
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._stack is not None:
            self._stack.close()

    def _read_record(self) -> dict[str, str]:
        record = self.root / RECORD_NAME
        if not self.root.is_dir() or _holds_nothing(self.root):
            return {}
        if record.is_symlink() or not record.is_file():
            raise OwnedFolderError(
                f"{_show(self.root)} is not empty and holds no {RECORD_NAME} of `hsi {self.kind}`: it only writes into "
                f"an empty folder or one it wrote itself: choose another {self.flag}"
            )
        try:
            data = json.loads(record.read_text("utf-8"))
        except (OSError, ValueError):
            data = None
        files = data.get("files") if isinstance(data, dict) else None
        if (
            not isinstance(data, dict)
            or not isinstance(files, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
        ):
            raise OwnedFolderError(
                f"{_show(record)} is not a record this toolkit wrote; "
                f"move the folder aside or choose another {self.flag}"
            )
        if data.get("kind") != self.kind:
            raise OwnedFolderError(
                f"{_show(self.root)} was written by `hsi {printable(str(data.get('kind')))}`, not `hsi {self.kind}`: "
                f"choose another {self.flag}"
            )
        return {k: v for k, v in files.items() if _is_safe(k)}

    def _save_record(self) -> None:
        write_json_atomic(self.root / RECORD_NAME, {"kind": self.kind, "files": dict(sorted(self.files.items()))})

    # -- paths -----------------------------------------------------------------------------
    def path(self, relative: str) -> Path:
        """Where `relative` is written: its folders are created here (refusing any link on the way), and
        an existing entry there must be a file of ours."""
        parts = check_relative(relative)
        folder = self.root
        folder.mkdir(parents=True, exist_ok=True)
        for part in parts[:-1]:
            folder = folder / part
            if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
                raise OwnedFolderError(
                    f"{_show(folder)} is a link or not a folder; nothing is written through it: remove it, or choose "
                    f"another {self.flag}"
                )
            folder.mkdir(exist_ok=True)
        target = folder / parts[-1]
        if target.is_symlink() or target.exists():
            self._check_ours(relative, target)
        return target

    def _check_ours(self, relative: str, target: Path) -> None:
        if target.is_symlink() or not target.is_file():
            raise OwnedFolderError(
                f"{_show(target)} is a link or a folder where this command writes a file; nothing is written through "
                f"it: remove it, or choose another {self.flag}"
            )
        if self.files.get(relative) != _sha256(target):
            raise OwnedFolderError(
                f"{_show(target)} was not written by this command (or was changed since): it is never overwritten; "
                f"move it out of {_show(self.root)}, or choose another {self.flag}"
            )

    def owns(self, relative: str) -> bool:
        """A file this command wrote here, unchanged since."""
        return owns_recorded(self.root, self.files, relative)

    def listed(self, prefix: str = "") -> list[str]:
        """The recorded files below `prefix` (a folder path ending in '/', or '' for all)."""
        return sorted(name for name in self.files if name.startswith(prefix))

    # -- writing ---------------------------------------------------------------------------
    @contextmanager
    def writing(self, relative: str) -> Iterator[Path]:
        """A temporary path to write `relative` to (with any library's writer); renamed into place and
        recorded when the block ends without an error, removed otherwise."""
        target = self.path(relative)
        suffix = "".join(target.suffixes[-1:])  # keep the suffix: matplotlib and pandas choose formats by it
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp{suffix}")
        try:
            yield tmp
            with ctrl_c_deferred():  # renamed and recorded together: a Ctrl-C between would orphan the file
                os.replace(tmp, target)
                self.files[relative] = _sha256(target)
                self._save_record()
        finally:
            if tmp.exists() or tmp.is_symlink():
                tmp.unlink()

    def write_bytes(self, relative: str, data: bytes) -> Path:
        with self.writing(relative) as tmp:
            tmp.write_bytes(data)
        return self.root / relative

    def write_text(self, relative: str, text: str) -> Path:
        return self.write_bytes(relative, text.encode("utf-8"))

    def write_json(self, relative: str, payload: Any) -> Path:
        text = json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        return self.write_text(relative, text)

    def remove(self, relative: str) -> None:
        """Delete a file this command wrote (refused, by name, for anything else)."""
        target = self.root / relative
        if target.is_symlink() or target.exists():
            self._check_ours(relative, target)
        with ctrl_c_deferred():  # deleted and struck off together
            target.unlink(missing_ok=True)
            self.files.pop(relative, None)
            self._save_record()

    def remove_listed(self, prefix: str, keep: frozenset[str] | set[str] = frozenset()) -> list[str]:
        """Delete the recorded files below `prefix` not in `keep` (a re-run's leftovers of an earlier run)."""
        removed = [name for name in self.listed(prefix) if name not in keep]
        for name in removed:
            self.remove(name)
        return removed


def _holds_nothing(folder: Path) -> bool:
    """No file and no link anywhere below `folder`: empty, or only the empty folders `path()` made for a
    run that was refused (or failed) before its first write, which must not make the folder foreign."""
    for where, folders, files in os.walk(folder):
        if files or any(os.path.islink(os.path.join(where, name)) for name in folders):
            return False
    return True


def _is_safe(relative: str) -> bool:
    try:
        check_relative(relative)
    except UsageError:
        return False
    return True


class FolderView:
    """The files below `prefix` inside an `OwnedFolder` (all of it for ""): one model's evaluation,
    one training run. Every write goes through the folder's own rules; `owned` is None where this
    process only reads (a torchrun rank other than 0), and a write then is a programming error."""

    def __init__(self, owned: OwnedFolder | None, root: Path | None = None, prefix: str = "") -> None:
        if root is None and owned is None:
            raise TypeError("a FolderView needs its OwnedFolder or its root")
        self.owned = owned
        self.root = Path(root) if root is not None else owned.root  # type: ignore[union-attr]
        self.prefix = prefix.strip("/")

    @property
    def path(self) -> Path:
        return self.root / self.prefix if self.prefix else self.root

    def relative(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def check_writable(self, *names: str) -> None:
        """Refuse now, before any work, what a later write of `names` would refuse (a link on the way,
        a user's file in the place of one of ours)."""
        if self.owned is not None:
            for name in names:
                self.owned.path(self.relative(name))

    def owner(self) -> OwnedFolder:
        if self.owned is None:
            raise RuntimeError("this process does not write the folder")  # a programming error, never a user's
        return self.owned

    @contextmanager
    def writing(self, name: str) -> Iterator[Path]:
        """A temporary path for any writer; renamed to `name` and recorded when the block succeeds."""
        with self.owner().writing(self.relative(name)) as tmp:
            yield tmp

    def write_text(self, name: str, text: str) -> Path:
        return self.owner().write_text(self.relative(name), text)

    def write_json(self, name: str, payload: Any) -> Path:
        return self.owner().write_json(self.relative(name), payload)

    def write_bytes(self, name: str, data: bytes) -> Path:
        return self.owner().write_bytes(self.relative(name), data)

    def owns(self, name: str) -> bool:
        return self.owned is not None and self.owned.owns(self.relative(name))
