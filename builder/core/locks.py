"""One run per output folder: an exclusive `fcntl.flock` on a lock file beside the folder.

The lock file sits next to the folder (`.<name>.lock` in its parent, which is the user's --out or
inside it) rather than in it, so `--overwrite` can empty the folder without dropping the lock. The
kernel releases a flock when its holder dies, even on SIGKILL, so a crashed run never leaves a
stale lock; the file itself stays (deleting it would let a waiting run lock a different inode).
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from builder.core.errors import UsageError


class FolderLocked(UsageError):
    """Another run of the toolkit is writing the same folder."""


def lock_path(folder: Path) -> Path:
    """The lock of a folder by its resolved path, so the same folder reached through a link (or a
    linked parent) takes the same lock."""
    folder = Path(folder).resolve()
    return folder.parent / f".{folder.name}.lock"


def _open_lock(path: Path):
    """The lock file opened for reading and writing, never through a link: a `.<name>.lock` someone
    linked to their own file would otherwise be truncated and overwritten with a pid."""
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as error:
        if path.is_symlink():
            raise UsageError(f"{path} (this folder's lock file) is a link; remove it and run again") from None
        raise UsageError(f"{path}: cannot open this folder's lock file ({error.strerror})") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise UsageError(f"{path} (this folder's lock file) is not a regular file; remove it and run again")
    return os.fdopen(descriptor, "r+", encoding="utf-8")


@contextmanager
def exclusive_folder(folder: Path) -> Iterator[Path]:
    """Hold the folder's lock for the duration of the block; refuse at once if another run holds it."""
    path = lock_path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    busy = (
        f"{folder} is being written by another hsi run (pid {{holder}}); wait for it to finish, "
        "or stop it and run the same command again to resume"
    )
    with held_lock(path, busy):
        yield path


@contextmanager
def held_lock(path: Path, busy: str) -> Iterator[None]:
    """Hold the lock file at `path` (an existing folder's) for the block, its holder's pid written in
    it; refuse at once with FolderLocked(`busy`, its `{holder}` the holding run's pid) if another run
    holds it. Every lock of the toolkit is this one."""
    handle = _open_lock(path)
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read(64).strip() or "unknown"
            raise FolderLocked(busy.replace("{holder}", holder)) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()  # closing the descriptor releases the flock
