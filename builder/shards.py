"""Deterministic WebDataset shards and the `_info.json` manifest.

A shard is written to a private temporary name and renamed when complete, so a shard file that
exists is always whole. Members are sorted by key, then by extension; every tar header is fixed
(mtime 0, uid/gid 0, no user names), so the same samples give byte-identical shards.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

MANIFEST_NAME = "_info.json"
ERRORS_NAME = "errors.jsonl"

Sample = tuple[str, dict[str, bytes]]


class ShardFormatError(ValueError):
    """A shard that cannot be trusted: unsafe member names, keys with dots, a mixed-up order."""


@dataclass(frozen=True)
class ShardStats:
    filename: str
    num_samples: int
    bytes: int
    sha256: str

    def to_json(self) -> dict:
        return asdict(self)


def shard_filename(split: str, index: int) -> str:
    return f"{split}-{index:05d}.tar"


def check_key(key: str) -> None:
    if not key or "." in key or "/" in key or key.startswith("_"):
        raise ShardFormatError(f"sample key {key!r} must be non-empty, without '.', '/' or a leading '_'")


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
# those of tarfile's USTAR_FORMAT with the fields of `_tar_info` (tests/test_shard_writer_bytes.py).
_BLOCK = tarfile.BLOCKSIZE
_RECORD = tarfile.RECORDSIZE
_NAME_FIELD = 100
_ZEROS = bytes(_BLOCK)
_SIZE_LIMIT = 8**11  # 11 octal digits: tarfile's USTAR_FORMAT refuses larger sizes
_MODE_IDS = b"0000444\0" + b"0000000\0" * 2  # mode 0o444, uid 0, gid 0
_AFTER_SIZE = b"00000000000\0"  # mtime 0
_AFTER_CHECKSUM = (
    tarfile.REGTYPE + b"\0" * 100  # typeflag, empty linkname
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
    return b"".join((encoded, b"\0" * (_NAME_FIELD - len(encoded)), _MODE_IDS, size_field, _AFTER_SIZE,
                     b"%06o\0 " % checksum, _AFTER_CHECKSUM))


def _write_member(out: BinaryIO, digest, name: str, data: bytes) -> int:
    """Write one member (header, data, zero padding to a block), hashing what is written; return
    the bytes written."""
    size = len(data)
    header, padding = _ustar_header(name, size), _ZEROS[: -size % _BLOCK]
    out.write(header)
    out.write(data)
    out.write(padding)
    digest.update(header)
    digest.update(data)
    digest.update(padding)
    return _BLOCK + size + len(padding)


def write_shard(path: Path, samples: Iterable[Sample]) -> ShardStats:
    """Write samples (sorted here by key) to `path` atomically and return its stats."""
    ordered = sorted(samples, key=lambda sample: sample[0])
    keys = [key for key, _ in ordered]
    if len(set(keys)) != len(keys):
        raise ShardFormatError(f"duplicate sample keys in {path.name}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()  # of the bytes as written: reading the shard back cost ~1% of compose
    with open(tmp, "wb") as raw:
        offset = 0
        for key, members in ordered:
            check_key(key)
            for ext in sorted(members):
                offset += _write_member(raw, digest, f"{key}.{ext}", members[ext])
        # As tarfile closes an archive: two zero blocks, then zeros up to a whole record.
        offset += 2 * _BLOCK
        end = b"\0" * (2 * _BLOCK + -offset % _RECORD)
        raw.write(end)
        digest.update(end)
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(tmp, path)
    return ShardStats(path.name, len(ordered), path.stat().st_size, digest.hexdigest())


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


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
    return key, ext


def iter_shard(source: Path | BinaryIO) -> Iterator[Sample]:
    """Yield (key, {ext: bytes}) from a shard (a path or an open binary stream) in one sequential
    pass, grouping consecutive members by key."""
    if not hasattr(source, "read"):
        with open(source, "rb") as handle:
            yield from iter_shard(handle)
        return
    label = Path(getattr(source, "name", "") or "shard").name
    current_key: str | None = None
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=source, mode="r|") as tar:
        for info in tar:
            if not info.isfile():
                raise ShardFormatError(f"{label}: member {info.name!r} is not a regular file")
            key, ext = split_member_name(info.name)
            if key != current_key:
                if current_key is not None:
                    yield current_key, members
                current_key, members = key, {}
            if ext in members:
                raise ShardFormatError(f"{label}: member {info.name!r} appears twice")
            handle = tar.extractfile(info)
            members[ext] = handle.read() if handle else b""
    if current_key is not None:
        yield current_key, members


def write_json_atomic(path: Path, payload) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n", "utf-8")
    os.replace(tmp, path)


def write_jsonl_atomic(path: Path, rows: Iterable[dict]) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def split_entry(name: str, stats: list[ShardStats]) -> dict:
    """The manifest entry of one split, in the form timm's WebDataset reader accepts."""
    return {
        "name": name,
        "num_samples": sum(s.num_samples for s in stats),
        "filenames": [s.filename for s in stats],
        "shard_lengths": [s.num_samples for s in stats],
        "shards": [s.to_json() for s in stats],
    }


def read_manifest(dataset_dir: Path) -> dict:
    path = Path(dataset_dir) / MANIFEST_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: {dataset_dir} is not a finished dataset "
            "(the manifest is written last; re-run the command that builds it)"
        )
    return json.loads(path.read_text("utf-8"))


def manifest_shard_paths(dataset_dir: Path, manifest: dict, split: str | None = None) -> list[Path]:
    splits = [split] if split else sorted(manifest["splits"])
    return [Path(dataset_dir) / name for s in splits for name in manifest["splits"][s]["filenames"]]
