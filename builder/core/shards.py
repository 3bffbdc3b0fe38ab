"""Deterministic WebDataset shards and the `_info.json` manifest.

A shard is written to a private temporary name and renamed when complete, so a shard file that
exists is always whole. Members are sorted by key, then by extension; every tar header is fixed
(mtime 0, uid/gid 0, no user names), so the same samples give byte-identical shards.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from builder.core.errors import InputError
from builder.core.manifest import (  # noqa: F401 - re-exported for the readers of raw manifests
    ERRORS_NAME,
    MANIFEST_NAME,
    NotADataset,
    ShardStats,
    write_json_atomic,
    write_jsonl_atomic,
)

Sample = tuple[str, dict[str, bytes]]


class ShardFormatError(InputError, ValueError):
    """A shard that cannot be trusted: unsafe member names, keys with dots, a mixed-up order."""


def shard_filename(split: str, index: int) -> str:
    return f"{split}-{index:05d}.tar"


KEY_RULE = "non-empty, without '.', '/', '\\', whitespace or control characters, and not starting with '_'"


_PLAIN_KEY = re.compile(r"[A-Za-z0-9-][A-Za-z0-9_-]*")


def key_problem(key: str) -> str | None:
    """What makes `key` unusable as a sample key, or None. The one rule that writers (`check_key`)
    and readers (`split_member_name`) share, so a key that is written can always be read back:
    a dot would end the key early, '/' and '\\' make paths, '_' starts WebDataset's own names."""
    if not key:
        return "is empty"
    if key.startswith("_"):
        return "starts with '_'"
    if _PLAIN_KEY.fullmatch(key):  # the usual case, decided in one regex match
        return None
    bad = sorted({c for c in key if c in "./\\" or c.isspace() or not c.isprintable()})
    return f"contains {''.join(bad)!r}" if bad else None


def check_key(key: str) -> None:
    problem = key_problem(key)
    if problem:
        raise ShardFormatError(f"sample key {key!r} {problem}: keys must be {KEY_RULE}")


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o444
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


# The ustar header of a member is fixed but for its name, size and checksum, so it is written
# directly: building TarInfo objects through tarfile was a quarter of compose time. The bytes are
# those of tarfile's USTAR_FORMAT with the fields of `_tar_info` (tests/formats/test_jpeg_and_ustar_bytes.py).
_BLOCK = tarfile.BLOCKSIZE
_RECORD = tarfile.RECORDSIZE
_NAME_FIELD = 100
_ZEROS = bytes(_BLOCK)
_SIZE_LIMIT = 8**11  # 11 octal digits: tarfile's USTAR_FORMAT refuses larger sizes
_MODE_IDS = b"0000444\0" + b"0000000\0" * 2  # mode 0o444, uid 0, gid 0
_AFTER_SIZE = b"00000000000\0"  # mtime 0
_AFTER_CHECKSUM = (
    tarfile.REGTYPE
    + b"\0" * 100  # typeflag, empty linkname
    + tarfile.POSIX_MAGIC  # "ustar\0" and version "00"
    + b"\0" * (32 + 32 + 8 + 8 + 155 + 12)  # uname, gname, devmajor, devminor, prefix, padding
)
# The checksum is the byte sum of the header with its own field read as 8 spaces.
_FIXED_SUM = sum(_MODE_IDS) + sum(_AFTER_SIZE) + 8 * ord(" ") + sum(_AFTER_CHECKSUM)


def _ustar_header(name: str, size: int) -> bytes:
    encoded = name.encode(tarfile.ENCODING, "surrogateescape")  # what tarfile.open(mode="w") uses
    if len(encoded) > _NAME_FIELD:
        # tarfile moves a long name's leading folders into the prefix field, or raises ValueError;
        # our names never need it, so leave that rare case to tarfile itself.
        return _tar_info(name, size).tobuf(tarfile.USTAR_FORMAT, tarfile.ENCODING, "surrogateescape")
    if not 0 <= size < _SIZE_LIMIT:
        raise ValueError("overflow in number field")  # tarfile's error for this case
    size_field = b"%011o\0" % size
    checksum = _FIXED_SUM + sum(encoded) + sum(size_field)
    return b"".join(
        (
            encoded,
            b"\0" * (_NAME_FIELD - len(encoded)),
            _MODE_IDS,
            size_field,
            _AFTER_SIZE,
            b"%06o\0 " % checksum,
            _AFTER_CHECKSUM,
        )
    )


def _member_blocks(name: str, data: bytes) -> tuple[bytes, bytes, bytes]:
    """One member as written: its header, its data, and zero padding to a whole block."""
    return _ustar_header(name, len(data)), data, _ZEROS[: -len(data) % _BLOCK]


class ShardWriter:
    """Writes one shard member by member, in key order, to a private temporary file that `close()`
    renames into place (`abort()` removes it): a shard holds at most one sample in memory here.

    Keys must arrive sorted and once each (a sample out of order is refused, never reordered), so
    the bytes equal `write_shard`'s for the same samples."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        self.digest = hashlib.sha256()  # of the bytes as written: reading the shard back cost ~1% of compose
        self.offset = 0
        self.count = 0
        self.last_key: str | None = None
        self.handle: BinaryIO | None = open(self.tmp, "wb")

    def write(self, key: str, members: dict[str, bytes]) -> None:
        check_key(key)
        if self.last_key is not None and key <= self.last_key:
            problem = "appears twice" if key == self.last_key else f"comes after {self.last_key!r}"
            raise ShardFormatError(f"{self.path.name}: sample {key!r} {problem}; samples must come in key order")
        assert self.handle is not None, "the shard is already closed"
        # A sample's members in one write and one hash update: three calls per member were ~5% of compose.
        blocks = b"".join(block for ext in sorted(members) for block in _member_blocks(f"{key}.{ext}", members[ext]))
        self.handle.write(blocks)
        self.digest.update(blocks)
        self.offset += len(blocks)
        self.last_key, self.count = key, self.count + 1

    def close(self) -> ShardStats:
        assert self.handle is not None, "the shard is already closed"
        # As tarfile closes an archive: two zero blocks, then zeros up to a whole record.
        end = b"\0" * (2 * _BLOCK + -(self.offset + 2 * _BLOCK) % _RECORD)
        self.handle.write(end)
        self.digest.update(end)
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        self.handle = None
        os.replace(self.tmp, self.path)
        return ShardStats(self.path.name, self.count, self.path.stat().st_size, self.digest.hexdigest())

    def abort(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if self.handle is not None:
            self.abort()  # an error inside the block: no half shard is left behind


def write_shard(path: Path, samples: Iterable[Sample]) -> ShardStats:
    """Write samples (sorted here by key) to `path` atomically and return its stats."""
    ordered = sorted(samples, key=lambda sample: sample[0])
    keys = [key for key, _ in ordered]
    if len(set(keys)) != len(keys):
        raise ShardFormatError(f"duplicate sample keys in {path.name}")
    with ShardWriter(path) as writer:
        for key, members in ordered:
            writer.write(key, members)
        return writer.close()


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
            block = os.pread(fd, _BLOCK, offset)
            if len(block) < _BLOCK:
                return None
            if block == _ZEROS:
                return members
            name_field, size_field = block[:_NAME_FIELD], block[124:136]
            if not _SIZE_FIELD.fullmatch(size_field):
                return None
            size = int(size_field[:11], 8)
            name = name_field.split(b"\0", 1)[0].decode(tarfile.ENCODING, "surrogateescape")
            if block != _ustar_header(name, size):
                return None
            data_end = offset + _BLOCK + size + (-size % _BLOCK)
            if data_end > file_bytes:
                return None
            members.append(TarMember(name, offset + _BLOCK, size))
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
        raise ShardFormatError(f"unsafe tar member name {name!r} (absolute path or '..')")
    return name


def split_member_name(name: str) -> tuple[str, str]:
    """`key.ext.more` -> (`key`, `ext.more`): the key is everything before the first dot."""
    base = safe_member_name(name)
    if "/" in base:
        raise ShardFormatError(f"tar member {name!r} is inside a folder; shards are flat")
    key, dot, ext = base.partition(".")
    if not dot or not key or not ext:
        raise ShardFormatError(f"tar member {name!r} is not of the form key.ext")
    problem = key_problem(key)
    if problem:
        raise ShardFormatError(f"tar member {name!r}: its key {key!r} {problem} (keys must be {KEY_RULE})")
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
        return f"member {info.name!r} is a sparse file (claims {info.size} bytes); shards hold no sparse members"
    if shard_bytes is not None and info.size > shard_bytes:
        return f"member {info.name!r} claims {info.size} bytes, more than the whole shard ({shard_bytes} bytes)"
    if info.size > max_bytes:
        return f"member {info.name!r} claims {info.size} bytes, over the {max_bytes}-byte limit per member"
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
                handler(ShardReadError("unsafe-member", f"member {info.name!r} is not a regular file", label, key))
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
                handler(ShardReadError("duplicate-member", f"member {info.name!r} appears twice", label, key))
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


def read_manifest(dataset_dir: Path) -> dict:
    path = Path(dataset_dir) / MANIFEST_NAME
    if not path.is_file():
        raise NotADataset(
            f"{path} does not exist: {dataset_dir} is not a finished dataset "
            "(the manifest is written last; re-run the command that builds it)"
        )
    return json.loads(path.read_text("utf-8"))


def manifest_shard_paths(dataset_dir: Path, manifest: dict, split: str | None = None) -> list[Path]:
    splits = [split] if split else sorted(manifest["splits"])
    return [Path(dataset_dir) / name for s in splits for name in manifest["splits"][s]["filenames"]]
