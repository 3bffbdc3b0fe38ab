"""sha256 of files, read in one reused buffer, and copies checked against the digest they should
have (written through a temporary, replaced only when whole and right)."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path


def _blocks(handle: io.RawIOBase, chunk: int) -> Iterator[memoryview]:
    buffer = bytearray(chunk)  # one buffer read into again and again: no fresh pages per chunk
    view = memoryview(buffer)
    while size := handle.readinto(buffer):
        yield view[:size]


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        for block in _blocks(handle, chunk):
            digest.update(block)
    return digest.hexdigest()


def copy_with_sha256(source: Path, target: Path, chunk: int = 1 << 20) -> str:
    """Copy `source` into the new file `target` (never through an existing file or link) and return
    the sha256 of the bytes copied: one read where a copy and then a hash of the copy take two."""
    digest = hashlib.sha256()
    with open(source, "rb", buffering=0) as reader, open(target, "xb") as writer:
        for block in _blocks(reader, chunk):
            digest.update(block)
            writer.write(block)
    return digest.hexdigest()


def copy_checked(source: Path, target: Path, expected: str, mismatch: Callable[[str], Exception]) -> str:
    """Copy `source` to `target` only when the bytes copied have the sha256 `expected`, and return it.

    The bytes go to a temporary file beside `target` (this process's own: a leftover of that name is
    removed first), which replaces `target` once checked, so `target` is either the whole checked
    copy or as it was. Otherwise `mismatch(digest)` is raised: the caller's error, in its words."""
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    partial.unlink(missing_ok=True)
    try:
        digest = copy_with_sha256(source, partial)
        if digest != expected:
            raise mismatch(digest)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return digest
