"""The parts a compose run reads, checked before any of them is used.

Refused before the output folder is touched (an `InputError`, exit status 2), because a run on them
would write composites that cannot be trusted:
- a parts manifest that is not one of this toolkit (`Manifest.read` names the field at fault);
- a shard name that is not `<split>-NNNNN.tar` in one path component, a shard listed twice, a shard
  that is missing, not a regular file, or outside the parts folder;
- a shard whose size or sha256 differs from the parts manifest: it was changed after extract wrote
  it (bit flips in a `canvas.npy` would otherwise give different composites with "errors: 0");
- a shard holding another number of samples than the manifest says (true hashes, false counts);
- a shard with a member name present twice, a json nested too deep or a `canvas.npy` whose header
  declares more than it holds (`builder.core.shard_read`: which copy, or what allocation, would be
  the reader's guess).
  Refusing is safer than skipping its images: a corrupted shard usually means a damaged copy, and a
  run that quietly drops a shard's images would publish a smaller benchmark.

Problems inside a shard whose bytes the manifest vouches for (a tar that breaks off, a member that
is a link, has an absolute name or a `..` component) become `unreadable-parts` rows, one per
sample (or per shard when the tar cannot be read at all), and their samples are not composed.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from builder.core.errors import InputError
from builder.core.hashing import sha256_file
from builder.core.manifest import PARTS, Manifest, ShardStats
from builder.core.records import Issue
from builder.core.shard_read import TarMember, member_key, sample_count, tar_members
from builder.formats.parts_index import PartsRef, index_parts_shard

PARTS_SHARD_NAME = re.compile(r"(?P<split>[A-Za-z0-9][A-Za-z0-9_-]*)-(?P<index>[0-9]{5})\.tar")


def check_parts_shard_name(filename: str, split: str) -> None:
    """A parts shard is named `<split>-NNNNN.tar`, one path component, under the split that lists it."""
    match = PARTS_SHARD_NAME.fullmatch(filename) if isinstance(filename, str) else None
    if match is None or match["split"] != split:
        raise InputError(
            f"the parts manifest lists {filename!r} under split {split!r}: a parts shard must be named "
            f"{split}-NNNNN.tar (one file name, no folder); the manifest was not written by hsi extract"
        )


def read_parts_manifest_checked(parts_dir: Path, splits: Sequence[str]) -> Manifest:
    """The typed parts manifest, with the shard names of `splits` checked."""
    manifest = Manifest.read(parts_dir)
    if manifest.holds != PARTS:
        raise InputError(f"{parts_dir} holds a {manifest.stage!r} manifest, not the parts written by `hsi extract`")
    missing = [s for s in splits if s not in manifest.splits]
    if missing:
        raise InputError(
            f"parts in {parts_dir} have no split {missing}; they have {sorted(manifest.splits)} (choose with --splits)"
        )
    seen: dict[str, str] = {}
    for split in splits:
        for filename in manifest.splits[split].filenames:
            check_parts_shard_name(filename, split)
            if filename in seen:
                raise InputError(f"the parts manifest lists {filename} twice; rebuild the parts with hsi extract")
            seen[filename] = split
    return manifest


def verify_parts_shards(parts_dir: Path, manifest: Manifest, splits: Sequence[str]) -> None:
    """Every shard of `splits` is a regular file inside `parts_dir` with the manifest's size and sha256."""
    root = Path(parts_dir).resolve()
    for split in splits:
        for stats in manifest.splits[split].shards:
            path = Path(parts_dir) / stats.filename
            if path.is_symlink() or not path.is_file() or path.resolve().parent != root:
                raise InputError(
                    f"parts shard {stats.filename} listed in {parts_dir}/_info.json is missing or not a "
                    "regular file in that folder; re-run hsi extract (with --overwrite) to rebuild it"
                )
            size = path.stat().st_size
            digest = sha256_file(path) if size == stats.bytes else None
            if digest != stats.sha256:
                found = f"sha256 {digest}" if digest else f"{size} bytes"
                expected = f"sha256 {stats.sha256}" if digest else f"{stats.bytes} bytes"
                raise InputError(
                    f"parts shard {stats.filename} in {parts_dir} does not match the parts manifest "
                    f"({found}, the manifest says {expected}): it was changed or corrupted after "
                    "extract wrote it; restore it or rebuild the parts with hsi extract --overwrite"
                )


def scan_members(members: Sequence[TarMember]) -> tuple[dict[str, list[str]], dict[str, tuple[int, int]]]:
    """(key -> what is wrong with its members, key -> (offset, size) of its `json` member).
    Wrong: links and other non-files, absolute names, `..`, folders, sparse members; the key is the
    member's base name up to its first dot. The json's place lets compose read a sample's boxes."""
    found: dict[str, list[str]] = {}
    json_members: dict[str, tuple[int, int]] = {}
    for info in members:
        name = info.name
        if info.isfile() and name.endswith(".json") and name.count(".") == 1 and is_plain_key(name[:-5]):
            json_members[name[:-5]] = (info.offset_data, info.size)
        parts = name.replace("\\", "/").split("/")
        problem = None
        if name.startswith(("/", "\\")):
            problem = "has an absolute name"
        elif ".." in parts:
            problem = "has a '..' component"
        elif len(parts) > 1:
            problem = "is inside a folder"
        elif not info.isfile():
            problem = "is a link or not a regular file"
        elif info.issparse():
            problem = "is a sparse member"
        if problem:
            key = member_key(name)
            found.setdefault(key, []).append(f"member {name!r} {problem}")
    return found, json_members


def check_sample_count(parts_dir: Path, stats: ShardStats, members: Sequence[TarMember]) -> None:
    """The shard's samples (its members' distinct keys) are the number its manifest entry says:
    a manifest with true hashes and false counts would be copied into the composed manifest."""
    problem = stats.count_problem(sample_count(members))
    if problem:
        raise InputError(
            f"parts shard {problem} ({parts_dir}/_info.json): the manifest does not describe its shards; "
            "rebuild the parts with hsi extract --overwrite"
        )


def is_plain_key(key: str | None) -> bool:
    return bool(key) and not any(ch in key for ch in "/\\") and not key.startswith(".")


def index_checked_parts(
    parts_dir: Path, manifest: Manifest, splits: Sequence[str]
) -> tuple[dict[str, list[PartsRef]], list[Issue]]:
    """The parts index of `splits`, with member-level problems as `unreadable-parts` rows."""
    index: dict[str, list[PartsRef]] = {}
    issues: list[Issue] = []
    for split in splits:
        refs: list[PartsRef] = []
        for position, filename in enumerate(manifest.splits[split].filenames):
            path = Path(parts_dir) / filename
            try:
                members = tar_members(path)  # one pass over the headers serves both readings
                check_sample_count(parts_dir, manifest.splits[split].shards[position], members)
                unsafe, json_members = scan_members(members)
                shard_refs, shard_issues = index_parts_shard(path, split, members)
            except (tarfile.TarError, OSError, EOFError) as exc:
                issues.append(
                    Issue(
                        filename,
                        "unreadable-parts",
                        f"{filename}: not a readable tar ({exc}); its images are skipped",
                        "compose",
                        split=split,
                        shard=filename,
                    )
                )
                continue
            for key, problems in sorted(unsafe.items()):
                issues.append(
                    Issue(
                        key,
                        "unreadable-parts",
                        f"{filename}: {'; '.join(problems)}",
                        "compose",
                        split=split,
                        shard=filename,
                        key=key,
                    )
                )
            known = {ref.key for ref in refs}
            for ref in shard_refs:
                if ref.key in known:
                    issues.append(
                        Issue(
                            ref.key,
                            "unreadable-parts",
                            f"{filename}: sample {ref.key} is also in an "
                            "earlier shard of this split; the first is kept",
                            "compose",
                            split=split,
                            shard=filename,
                            key=ref.key,
                        )
                    )
            refs += [
                replace(ref, members=tuple(sorted((*ref.members, ("json", *json_members[ref.key])))))
                for ref in shard_refs
                if ref.key not in unsafe and ref.key not in known
            ]
            # a key index_parts_shard derived from an unsafe name (`/tmp/x`, ``) is reported above
            issues += [issue for issue in shard_issues if issue.key not in unsafe and is_plain_key(issue.key)]
        index[split] = [replace(ref, row=row) for row, ref in enumerate(sorted(refs, key=lambda ref: ref.key))]
    return index, issues
