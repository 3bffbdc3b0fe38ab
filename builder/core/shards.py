"""Deterministic WebDataset shards and the `_info.json` manifest.

A shard is written to a private temporary name and renamed when complete, so a shard file that
exists is always whole. Members are sorted by key, then by extension; every tar header is fixed
(mtime 0, uid/gid 0, no user names), so the same samples give byte-identical shards.
"""

from __future__ import annotations

from builder.core.errors import InputError
from builder.core.manifest import (  # noqa: F401 - re-exported for the readers of raw manifests
    ERRORS_NAME,
    MANIFEST_NAME,
    NotADataset,
    ShardStats,
    write_json_atomic,
    write_jsonl_atomic,
)

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

Sample = tuple[str, dict[str, bytes]]


class ShardFormatError(InputError, ValueError):
    """A shard that cannot be trusted: unsafe member names, keys with dots, a mixed-up order."""


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


def write_shard(path: Path, samples: Iterable[Sample]) -> ShardStats:
    """Write samples (sorted here by key) to `path` atomically and return its stats."""
    ordered = sorted(samples, key=lambda sample: sample[0])
    keys = [key for key, _ in ordered]
    if len(set(keys)) != len(keys):
        raise ShardFormatError(f"duplicate sample keys in {path.name}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as raw:
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for key, members in ordered:
                check_key(key)
                for ext in sorted(members):
                    data = members[ext]
                    tar.addfile(_tar_info(f"{key}.{ext}", len(data)), io.BytesIO(data))
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(tmp, path)
    return ShardStats(path.name, len(ordered), path.stat().st_size, sha256_file(path))


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
