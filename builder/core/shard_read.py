"""Reading shards someone else may have written: members listed without trusting the tar headers'
types, names checked, sizes bounded, and every problem a `ShardReadError` handed to the caller's
handler (webdataset's `handler=`), so one bad sample never ends a run.

Every reader of shards goes through here (`iter_shard`, or `tar_members` for readers that seek), and
each refuses the same things, naming the shard and the member: a member name present twice (which
copy a reader takes would decide the sample), a json member nested deeper than `MAX_JSON_DEPTH`
(`load_json_member`; Python's parser recurses), and a `.npy` member whose header declares more
bytes than the member holds (`npy_problem`, checked before numpy allocates the array)."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
from numpy.lib import format as npy_format

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
    Raises tarfile's errors for a tar that cannot be read, and a `ShardReadError` for a member name
    present twice."""
    found = written_members(path)
    if found is None:
        with tarfile.open(path, mode=mode) as tar:
            found = [TarMember(i.name, i.offset_data, i.size, i.isfile(), i.issparse()) for i in tar]
    seen: set[str] = set()
    for member in found:
        if member.name in seen:
            raise duplicate_member(shard_label(path), member.name)
        seen.add(member.name)
    return found


def member_key(name: str) -> str:
    """The sample a member belongs to: its base name up to the first dot (a member with a folder
    or `..` in its name is still its sample's, and becomes that sample's row)."""
    return name.replace("\\", "/").split("/")[-1].partition(".")[0] or name


def sample_count(members: Iterable[TarMember]) -> int:
    """How many samples a shard's members make (their distinct keys): the count a manifest's
    `num_samples` must equal, taken from the shard, not from the manifest."""
    return len({member_key(member.name) for member in members})


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


# A sample json of ours nests 4 deep (composite: meta.boxes[i][j]); Python's json parser recurses
# once per level, so a json nested 100,000 deep is refused before it is parsed.
MAX_JSON_DEPTH = 64
_JSON_STRUCTURE = re.compile(rb'[][{}"\\]')


def nests_deeper(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the arrays and objects of the JSON text `data` nest deeper than `limit` (brackets
    inside strings do not count). Text with no more than `limit` brackets in all is answered from
    two byte counts, so the usual small sample json costs next to nothing."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    depth, in_string, skip_to = 0, False, -1
    for found in _JSON_STRUCTURE.finditer(data):
        at, char = found.start(), found.group()
        if at < skip_to:
            continue
        if in_string:
            if char == b"\\":
                skip_to = at + 2  # the escaped character is not a quote
            elif char == b'"':
                in_string = False
        elif char == b'"':
            in_string = True
        elif char in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif char in (b"]", b"}"):
            depth -= 1
    return False


def load_json_member(data: bytes, shard: str, member: str) -> Any:
    """A json member parsed, after its nesting is bounded: a `ShardReadError` (deep-json) naming
    the shard and member for one nested past `MAX_JSON_DEPTH`; the parser's own errors otherwise
    (a reader that turns bad json into an error row keeps doing so)."""
    problem = json_member_problem(data, member)
    if problem:
        raise ShardReadError("deep-json", problem, shard, member.partition(".")[0])
    return json.loads(data)


def json_member_problem(data: bytes, member: str) -> str | None:
    if nests_deeper(data):
        return (
            f"member {shown(member)} nests deeper than {MAX_JSON_DEPTH} levels; no sample json of this "
            "toolkit does (it was not written by it); restore the shard or rebuild it"
        )
    return None


# The header numpy writes is 128 bytes for our arrays (a few hundred for any shape); a longer one
# is refused unparsed.
NPY_MAX_HEADER = 4096
_NPY_MAGIC = b"\x93NUMPY"


def npy_problem(head: bytes, member_bytes: int, member: str) -> str | None:
    """Why a `.npy` member must not be handed to np.load, from its first bytes `head` (its header:
    `NPY_MAX_HEADER` + 12 bytes are enough) and its size: a header longer than `NPY_MAX_HEADER`, or
    a shape needing more bytes than the member holds after its header (np.load allocates the
    declared shape before reading: a header declaring 100000 x 100000 x 3 asks for 28 GiB). None
    otherwise; a member that is not an npy at all, or a malformed header, is left to np.load, which
    refuses it with a ValueError within the member's own size (readers make that a row)."""
    if not head.startswith(_NPY_MAGIC) or len(head) < 10 or head[6] not in (1, 2, 3):
        return None
    fixed = 10 if head[6] == 1 else 12
    if len(head) < fixed:
        return None
    header_bytes = int.from_bytes(head[8:fixed], "little")
    if header_bytes > NPY_MAX_HEADER:
        return f"member {shown(member)} has a {header_bytes}-byte npy header, over the {NPY_MAX_HEADER}-byte limit"
    # version 3 differs from 2 only in allowing utf-8 in the header, which these parsers need not read
    reader = npy_format.read_array_header_1_0 if head[6] == 1 else npy_format.read_array_header_2_0
    try:
        shape, _, dtype = reader(io.BytesIO(head[8 : fixed + header_bytes]), max_header_size=NPY_MAX_HEADER)
    except (ValueError, SyntaxError, TypeError, UnicodeDecodeError):
        return None
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    present = member_bytes - fixed - header_bytes
    if declared > present:
        return (
            f"member {shown(member)} declares shape {shown(tuple(shape))} of {dtype} ({declared} bytes) but holds "
            f"{present} bytes of data (it was not written by this toolkit); restore the shard or rebuild it"
        )
    return None


def npy_member_problem(data: bytes, member: str) -> str | None:
    return npy_problem(data[: NPY_MAX_HEADER + 12], len(data), member)


_DECODED_KINDS = ("json", ".npy")


def content_problem(name: str, data: bytes) -> tuple[str, str] | None:
    """(reason, detail) when a member's bytes must not be decoded: a json nested too deep, an npy
    whose header declares more than it holds; None otherwise (and for every other kind of member)."""
    if name.endswith("json"):
        problem = json_member_problem(data, name)
        return ("deep-json", problem) if problem else None
    if name.endswith(".npy"):
        problem = npy_member_problem(data, name)
        return ("oversized-array", problem) if problem else None
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
    oversized-member, duplicate-member, deep-json, oversized-array), the shard's file name, the key or
    member name where known, and a `detail` that does not repeat the shard (the message does)."""

    def __init__(self, reason: str, detail: str, shard: str, key: str | None = None, *, fatal: bool = False) -> None:
        super().__init__(f"{shard}: {detail}")
        self.reason, self.detail, self.shard, self.key, self.fatal = reason, detail, shard, key, fatal


ReadErrorHandler = Callable[[ShardReadError], None]


def duplicate_member(shard: str, name: str) -> ShardReadError:
    """A member name present twice in a shard: readers would disagree on which copy is the sample's
    (tarfile's index keeps the last, a stream yields both), so the shard is refused."""
    return ShardReadError(
        "duplicate-member",
        f"member {shown(name)} appears twice; a shard holds each member once (it was not written by this "
        "toolkit): restore the shard or rebuild it",
        shard,
        name.partition(".")[0],
    )


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


def split_sample(shard: str, name: str) -> ShardReadError:
    """A member of a key whose sample ended earlier in the shard (its members are not together):
    the key would be two samples."""
    return ShardReadError(
        "duplicate-member",
        f"member {shown(name)} belongs to sample {shown(name.partition('.')[0])}, which ended earlier in the "
        "shard; a sample's members are written together (it was not written by this toolkit): restore the "
        "shard or rebuild it",
        shard,
        name.partition(".")[0],
    )


def iter_shard(source: Path | BinaryIO, handler: ReadErrorHandler = raise_read_error) -> Iterator[Sample]:
    """Yield (key, {ext: bytes}) from a shard (a path or an open binary stream) in one sequential
    pass, grouping consecutive members by key.

    Problems go to `handler` (as webdataset's `handler=`): the default raises a `ShardReadError`;
    a handler that returns skips the bad member, or ends the shard when the tar itself is broken.
    Sparse members and members larger than the shard (or `MAX_MEMBER_BYTES`) are refused unread;
    a member name present twice, a key whose members are not together, a json nested too deep and
    an npy whose header declares more than it holds are refused too (`content_problem`)."""
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
    seen: set[str] = set()  # every member name so far: a duplicate anywhere in the shard is refused
    finished: set[str] = set()  # keys whose samples were yielded: one key is one sample
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
            if info.name in seen:
                handler(duplicate_member(label, info.name))
                continue
            if key != current_key:
                if key in finished:
                    handler(split_sample(label, info.name))
                    continue
                if current_key is not None:
                    finished.add(current_key)
                    yield current_key, members
                current_key, members = key, {}
            seen.add(info.name)
            data = tar.extractfile(info)
            members[ext] = data.read() if data else b""
            if ext.endswith(_DECODED_KINDS):  # json and npy: bounded before any reader decodes them
                bad_content = content_problem(info.name, members[ext])
                if bad_content:
                    del members[ext]
                    handler(ShardReadError(bad_content[0], bad_content[1], label, key))
    except (tarfile.TarError, OSError) as exc:
        handler(ShardReadError("unreadable-shard", f"tar stream breaks off: {exc}", label, current_key, fatal=True))
        current_key = None  # the sample being read at the break may lack members: it is not yielded
    finally:
        tar.close()
        if handle is not source:
            handle.close()
    if current_key is not None:
        yield current_key, members
