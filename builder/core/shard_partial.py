"""The samples of a shard still being built, kept on disk as each finishes, so that Ctrl-C or a
kill loses no finished item and the same command continues the shard from its first missing one.

A builder appends one record per item (in the shard's item order, from some start) to a private
file of the folder's `_state/`, `<shard>.<start>.partial`, flushing each: the item's id, its sample
(the tar members exactly as `ShardWriter` writes them, or none) and the builder's own JSON about it
(its issue rows). Each record carries its sha256, and the file names its shard, start and the
run's settings fingerprint, so on resume only whole records of this shard under these settings are
reused: a torn or corrupted tail ends a file there, a file of other settings or another shard is
ignored. Several files of one shard cover disjoint item ranges (workers sharing a shard, or the
runs before an interrupt). The finished shard is assembled from them in item order, so its bytes are
those of an uninterrupted run; then the files are removed (`drop_partials`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tarfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from builder.core.names import SHARD_FILENAME
from builder.core.runner import STATE_DIR
from builder.core.shards import TAR_BLOCK, check_key, key_problem, ustar_header

MAGIC = b"hsi kept samples 1\n"
PARTIAL_NAME = re.compile(rf"(?P<shard>{SHARD_FILENAME.pattern})\.(?P<start>[0-9]{{6,9}})\.partial")
_FRAME = struct.Struct(">IQ")  # the JSON header's length, the sample's length
_DIGEST = 32
_MAX_HEADER = 4 << 20  # a record's JSON (an item's issue rows): far above any real one


def partial_name(shard: str, start: int) -> str:
    return f"{shard}.{start:06d}.partial"


@dataclass(frozen=True)
class KeptSample:
    """One finished item of a shard being built, as a partial file holds it."""

    index: int  # its place among the shard's items
    key: str | None  # its sample's key; None: the item gave no sample (its info says why)
    info: dict  # the builder's JSON about it
    path: Path
    offset: int  # where its sample's bytes start in `path`
    size: int

    def blocks(self) -> bytes:
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            return handle.read(self.size)


class PartialWriter:
    """Appends the finished items of a shard, from item `start` on, to a new partial file (one left
    there before, torn or of other settings, is replaced); each record is flushed as it is written."""

    def __init__(self, out_dir: Path, shard: str, start: int, fingerprint: str) -> None:
        self.path = Path(out_dir) / STATE_DIR / partial_name(shard, start)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)  # never written through: a link there is removed, not followed
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        self.handle: BinaryIO | None = os.fdopen(os.open(self.path, flags, 0o644), "wb")
        self.next_index = start
        self.handle.write(MAGIC)
        self._record({"shard": shard, "start": start, "fingerprint": fingerprint}, b"")

    def append(self, item: str, key: str | None, blocks: bytes, info: dict) -> KeptSample:
        """Keep the next item (`item` is its id, checked on resume against the shard's plan)."""
        if key is not None:
            check_key(key)
        index, self.next_index = self.next_index, self.next_index + 1
        offset = self._record({"index": index, "item": item, "key": key, "info": info}, blocks)
        return KeptSample(index, key, info, self.path, offset, len(blocks))

    def _record(self, header: dict, body: bytes) -> int:
        assert self.handle is not None, "the partial file is already closed"
        text = json.dumps(header, sort_keys=True).encode("utf-8")
        frame = _FRAME.pack(len(text), len(body))
        digest = hashlib.sha256(frame)
        digest.update(text)
        digest.update(body)
        start = self.handle.tell() + len(frame) + len(text)
        self.handle.write(b"".join((frame, text, body, digest.digest())))
        self.handle.flush()  # in the kernel now: a killed process keeps it
        return start

    def close(self) -> None:
        if self.handle is not None:
            os.fsync(self.handle.fileno())
            self.handle.close()
            self.handle = None

    def __enter__(self) -> PartialWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()  # an error or Ctrl-C inside: what was kept stays for the next run


def partial_files(out_dir: Path, shard: str) -> list[tuple[int, Path]]:
    """The partial files of `shard` in `out_dir`'s `_state/` (plain files only), by start."""
    folder = Path(out_dir) / STATE_DIR
    if not folder.is_dir() or folder.is_symlink():
        return []
    found = []
    for path in folder.iterdir():
        match = PARTIAL_NAME.fullmatch(path.name)
        if match and match["shard"] == shard and path.is_file() and not path.is_symlink():
            found.append((int(match["start"]), path))
    return sorted(found)


def shards_with_partials(out_dir: Path) -> set[str]:
    """The shards that have partial files in `out_dir`'s `_state/` (one listing for a whole run)."""
    folder = Path(out_dir) / STATE_DIR
    if not folder.is_dir() or folder.is_symlink():
        return set()
    return {match["shard"] for name in os.listdir(folder) if (match := PARTIAL_NAME.fullmatch(name))}


def kept_samples(
    out_dir: Path,
    shard: str,
    items: Sequence[str],
    fingerprint: str,
    valid_info: Callable[[dict], bool] = lambda info: True,
) -> dict[int, KeptSample]:
    """The items of `shard` (whose ids, in order, are `items`) that its partial files hold whole,
    under the settings `fingerprint`, by index. A file ends at its first record that is torn,
    corrupted or not the next item of the plan; the first file holding an item wins."""
    kept: dict[int, KeptSample] = {}
    for start, path in partial_files(out_dir, shard):
        for sample in read_partial(path, shard, start, items, fingerprint, valid_info):
            kept.setdefault(sample.index, sample)
    return kept


def read_partial(
    path: Path,
    shard: str,
    start: int,
    items: Sequence[str],
    fingerprint: str,
    valid_info: Callable[[dict], bool],
) -> Iterator[KeptSample]:
    """The whole records of one partial file, in order, while they are the shard's next items."""
    try:
        with open(path, "rb") as handle:
            if handle.read(len(MAGIC)) != MAGIC:
                return
            size = os.fstat(handle.fileno()).st_size
            head = _read_record(handle, size)
            if head is None or head[0] != {"shard": shard, "start": start, "fingerprint": fingerprint}:
                return
            index = start
            while index < len(items):
                record = _read_record(handle, size)
                if record is None:
                    return
                header, offset, body = record
                key, info = header.get("key"), header.get("info")
                if (
                    set(header) != {"index", "item", "key", "info"}
                    or header["index"] != index
                    or header["item"] != items[index]
                    or not isinstance(info, dict)
                    or not valid_info(info)
                    or not _sample_blocks_of(key, body)
                ):
                    return
                yield KeptSample(index, key, info, path, offset, len(body))
                index += 1
    except OSError:
        return


def _read_record(handle: BinaryIO, size: int) -> tuple[dict, int, bytes] | None:
    """The next record (its header, where its body starts, its body), or None when it is not whole."""
    frame = handle.read(_FRAME.size)
    if len(frame) < _FRAME.size:
        return None
    header_size, body_size = _FRAME.unpack(frame)
    if header_size > _MAX_HEADER or handle.tell() + header_size + body_size + _DIGEST > size:
        return None  # torn, or lengths no writer of ours gave
    text = handle.read(header_size)
    offset = handle.tell()
    body = handle.read(body_size)
    digest = hashlib.sha256(frame)
    digest.update(text)
    digest.update(body)
    if handle.read(_DIGEST) != digest.digest():
        return None
    try:
        header = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return (header, offset, body) if isinstance(header, dict) else None


def _sample_blocks_of(key: object, body: bytes) -> bool:
    """Whether `body` is a sample as `ShardWriter` writes it: no bytes for no key, else members
    `key.EXT`, in extension order, each with the exact header our writer makes."""
    if key is None:
        return body == b""
    if not isinstance(key, str) or key_problem(key) is not None or not body or len(body) % TAR_BLOCK:
        return False
    position, last_ext = 0, None
    while position < len(body):
        try:
            member = tarfile.TarInfo.frombuf(body[position : position + TAR_BLOCK], tarfile.ENCODING, "surrogateescape")
        except tarfile.TarError:
            return False
        stem, _, ext = member.name.partition(".")
        if stem != key or not ext or (last_ext is not None and ext <= last_ext):
            return False
        if body[position : position + TAR_BLOCK] != ustar_header(member.name, member.size):
            return False
        position += TAR_BLOCK + -(-member.size // TAR_BLOCK) * TAR_BLOCK
        last_ext = ext
    return position == len(body)


def drop_partials(out_dir: Path, shard: str) -> None:
    """Remove the partial files of `shard` (it is finished, or its kept items must not be reused)."""
    for _, path in partial_files(out_dir, shard):
        path.unlink(missing_ok=True)
