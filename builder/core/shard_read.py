"""Reading shards someone else may have written: members listed without trusting the tar headers'
types, names checked, sizes bounded, and every problem a `ShardReadError` handed to the caller's
handler (webdataset's `handler=`), so one bad sample never ends a run."""

from __future__ import annotations

import io
import os
import re
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from builder.core.errors import shown
from builder.core.shards import (
    KEY_RULE,
    TAR_BLOCK,
    TAR_NAME_FIELD,
    TAR_ZEROS,
    Sample,
    ShardFormatError,
    key_problem,
    ustar_header,
)


@dataclass(frozen=True)
class TarMember:
    """What a reader needs of one tar member: its name, where its data starts, its size, and
    whether it is a regular file and a sparse one (`isfile`/`issparse` as on a `TarInfo`)."""

    name: str
    offset_data: int
    size: int
    regular: bool = True
    sparse: bool = False

    def isfile(self) -> bool:
        return self.regular

    def issparse(self) -> bool:
        return self.sparse


_SIZE_FIELD = re.compile(rb"[0-7]{11}\0")


def written_members(path: Path) -> list[TarMember] | None:
    """The members of a tar laid out exactly as `ShardWriter` writes one (every header equal to
    the header it writes for that name and size, the data inside the file, then a zero block),
    read from the 512-byte headers alone; None for any other tar, which tarfile must then read
    (it knows every other layout: pax and GNU headers, links, sparse files, broken ends)."""
    members: list[TarMember] = []
    offset = 0
    with open(path, "rb", buffering=0) as handle:
        fd, file_bytes = handle.fileno(), os.fstat(handle.fileno()).st_size
        while True:
            block = os.pread(fd, TAR_BLOCK, offset)
            if len(block) < TAR_BLOCK:
                return None
            if block == TAR_ZEROS:
                return members
            name_field, size_field = block[:TAR_NAME_FIELD], block[124:136]
            if not _SIZE_FIELD.fullmatch(size_field):
                return None
            size = int(size_field[:11], 8)
            name = name_field.split(b"\0", 1)[0].decode(tarfile.ENCODING, "surrogateescape")
            if block != ustar_header(name, size):
                return None
            data_end = offset + TAR_BLOCK + size + (-size % TAR_BLOCK)
            if data_end > file_bytes:
                return None
            members.append(TarMember(name, offset + TAR_BLOCK, size))
            offset = data_end


def tar_members(path: Path, mode: Literal["r", "r:"] = "r:") -> list[TarMember]:
    """Every member of the tar at `path`, in order, from one pass over its headers: directly for
    the shards this module writes, through tarfile (opened with `mode`) for any other tar.
    Raises tarfile's errors for a tar that cannot be read."""
    found = written_members(path)
    if found is not None:
        return found
    with tarfile.open(path, mode=mode) as tar:
        return [TarMember(i.name, i.offset_data, i.size, i.isfile(), i.issparse()) for i in tar]


def safe_member_name(name: str) -> str:
    """Reject tar member names that could escape the dataset folder."""
    if name.startswith("/") or name.startswith("\\") or ".." in Path(name).parts or "\\" in name:
        raise ShardFormatError(f"unsafe tar member name {shown(name)} (absolute path or '..')")
    return name


def split_member_name(name: str) -> tuple[str, str]:
    """`key.ext.more` -> (`key`, `ext.more`): the key is everything before the first dot."""
    base = safe_member_name(name)
    if "/" in base:
        raise ShardFormatError(f"tar member {shown(name)} is inside a folder; shards are flat")
    key, dot, ext = base.partition(".")
    if not dot or not key or not ext:
        raise ShardFormatError(f"tar member {shown(name)} is not of the form key.ext")
    problem = key_problem(key)
    if problem:
        raise ShardFormatError(f"tar member {shown(name)}: its key {shown(key)} {problem} (keys must be {KEY_RULE})")
    return key, ext


# A member larger than this is refused wherever a tar is read (a composite JPEG is ~20 KB, a parts
# background PNG of ImageNet's largest image well under 1 GiB): a tar bomb must not fill memory.
MAX_MEMBER_BYTES = 1 << 30


def member_problem(
    info: tarfile.TarInfo | TarMember, shard_bytes: int | None, max_bytes: int = MAX_MEMBER_BYTES
) -> str | None:
    """Why a tar member must not be read into memory, or None: a sparse member (its header claims
    more bytes than the tar stores: a tar bomb), or one larger than the shard holding it or than
    `max_bytes`. Every reader of shards (`iter_shard`, the parts index) applies this one rule."""
    if info.issparse():
        return f"member {shown(info.name)} is a sparse file (claims {info.size} bytes); shards hold no sparse members"
    if shard_bytes is not None and info.size > shard_bytes:
        return f"member {shown(info.name)} claims {info.size} bytes, more than the whole shard ({shard_bytes} bytes)"
    if info.size > max_bytes:
        return f"member {shown(info.name)} claims {info.size} bytes, over the {max_bytes}-byte limit per member"
    return None


def _source_bytes(source: Path | BinaryIO) -> int | None:
    """The shard's size in bytes when it is a file (a path or a seekable file object), else None."""
    try:
        if isinstance(source, (str, os.PathLike)):
            return os.stat(source).st_size
        return os.fstat(source.fileno()).st_size
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return None


class ShardReadError(ShardFormatError):
    """One problem met while reading a shard: `reason` (unreadable-shard, unsafe-member,
    oversized-member, duplicate-member), the shard's file name, the key or member name where known, and a `detail`
    that does not repeat the shard (the message does)."""

    def __init__(self, reason: str, detail: str, shard: str, key: str | None = None, *, fatal: bool = False) -> None:
        super().__init__(f"{shard}: {detail}")
        self.reason, self.detail, self.shard, self.key, self.fatal = reason, detail, shard, key, fatal


ReadErrorHandler = Callable[[ShardReadError], None]


def raise_read_error(error: ShardReadError) -> None:
    """The default policy: a shard that cannot be trusted stops the read."""
    raise error


def collect_read_errors(errors: list[ShardReadError]) -> ReadErrorHandler:
    """A policy that records each problem in `errors` and reads on: a bad member is skipped, and a
    tar that breaks off ends its shard (the samples read whole before the break are still yielded)."""
    return errors.append


def shard_label(source: Path | BinaryIO) -> str:
    """The shard's file name, as messages name it."""
    name = getattr(source, "name", "") if hasattr(source, "read") else source
    return Path(name or "shard").name


def iter_shard(source: Path | BinaryIO, handler: ReadErrorHandler = raise_read_error) -> Iterator[Sample]:
    """Yield (key, {ext: bytes}) from a shard (a path or an open binary stream) in one sequential
    pass, grouping consecutive members by key.

    Problems go to `handler` (as webdataset's `handler=`): the default raises a `ShardReadError`;
    a handler that returns skips the bad member, or ends the shard when the tar itself is broken.
    Sparse members and members larger than the shard (or `MAX_MEMBER_BYTES`) are refused unread."""
    label = shard_label(source)
    shard_bytes = _source_bytes(source)
    current_key: str | None = None
    members: dict[str, bytes] = {}
    handle: BinaryIO | None = None
    try:
        handle = open(source, "rb") if isinstance(source, (str, os.PathLike)) else source
        tar = tarfile.open(fileobj=handle, mode="r|")
    except (tarfile.TarError, OSError) as exc:
        if handle is not None and handle is not source:
            handle.close()
        handler(ShardReadError("unreadable-shard", f"not a readable tar: {exc}", label, fatal=True))
        return
    try:
        for info in tar:
            try:
                key, ext = split_member_name(info.name)
            except ShardFormatError as exc:
                handler(ShardReadError("unsafe-member", str(exc), label, info.name))
                continue
            if not info.isfile():
                handler(ShardReadError("unsafe-member", f"member {shown(info.name)} is not a regular file", label, key))
                continue
            too_big = member_problem(info, shard_bytes)
            if too_big:
                handler(ShardReadError("oversized-member", too_big, label, key))
                continue
            if key != current_key:
                if current_key is not None:
                    yield current_key, members
                current_key, members = key, {}
            if ext in members:
                handler(ShardReadError("duplicate-member", f"member {shown(info.name)} appears twice", label, key))
                continue
            data = tar.extractfile(info)
            members[ext] = data.read() if data else b""
    except (tarfile.TarError, OSError) as exc:
        handler(ShardReadError("unreadable-shard", f"tar stream breaks off: {exc}", label, current_key, fatal=True))
        current_key = None  # the sample being read at the break may lack members: it is not yielded
    finally:
        tar.close()
        if handle is not source:
            handle.close()
    if current_key is not None:
        yield current_key, members
