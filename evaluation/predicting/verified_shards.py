"""Every shard an evaluation reads is first checked against its manifest's sha256 (and size), and
its samples are counted from its tar headers against the manifest's `num_samples`.

A flipped byte in a JPEG decodes to other pixels, so without this check an altered shard gives other
probabilities under the original fingerprint, and the leaderboard takes it for the same data
revision. The check runs in the main process before the DataLoader starts (its workers then read
files already proved), on the shards the run will read (with `--limit`, only the first ones).

A hub source (hf://) is downloaded into the Hugging Face cache (`HF_HUB_CACHE`) and the cached copy
is checked and read, so what is proved is what is read; a cached copy that fails the check is
downloaded once more before the shard is refused.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable
from pathlib import Path

from builder.core.errors import InputError, printable
from builder.core.hashing import sha256_file
from builder.core.manifest import ShardStats
from builder.core.shard_read import ShardReadError, sample_count, tar_members
from builder.core.untrusted import Fields

VERIFIED = "sha256"  # what eval.json's data.verified records
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ShardMismatch(InputError):
    """A shard whose bytes are not the ones its manifest lists: nothing is evaluated."""


def _name(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def expected_digests(manifest: dict, split: str, where: str) -> dict[str, tuple[str, int, int]]:
    """{shard filename: (sha256, bytes, num_samples)} of `split`, as the manifest lists them (checked fields)."""
    entry = Fields(manifest, where).object("splits").object(split)
    listed = {}
    for shard in entry.objects("shards"):
        listed[shard.string("filename")] = (
            shard.string("sha256", pattern=_SHA256),
            shard.integer("bytes", low=0),
            shard.integer("num_samples", low=0),
        )
    return listed


def shards_read(urls: list[str], lengths: list[int] | None, limit: int | None) -> list[str]:
    """The shards a run reads: all of them, or with `limit` and known lengths the first ones holding
    the first `limit` samples (the evaluation reads shards in manifest order)."""
    if limit is None or lengths is None or len(lengths) != len(urls):
        return list(urls)
    chosen, total = [], 0
    for url, length in zip(urls, lengths):
        if total >= limit:
            break
        chosen.append(url)
        total += length
    return chosen


def _hub_copy(url: str, force: bool) -> Path:
    """The local cached copy of a hub file (downloaded when missing, or again when `force`)."""
    from huggingface_hub import HfFileSystem, hf_hub_download

    resolved = HfFileSystem().resolve_path(url)
    return Path(
        hf_hub_download(
            resolved.repo_id,
            resolved.path_in_repo,
            repo_type=resolved.repo_type,
            revision=resolved.revision,
            force_download=force,
        )
    )


# The files proved in this process, by what any write changes ((device, inode, size, mtime, ctime) ->
# sha256): a sweep proves its data once, hands these to each model's worker (`remember_proofs`), and a
# file written to since its proof is hashed again.
_PROVED: dict[tuple[int, ...], str] = {}


def _signature(path: Path) -> tuple[int, ...]:
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _matches(path: Path, digest: str, size: int) -> bool:
    signature = _signature(path)  # taken before hashing: a write while hashing changes it
    if signature[2] != size:
        return False
    if _PROVED.get(signature) == digest:
        return True
    if sha256_file(path) != digest:
        return False
    _PROVED[signature] = digest
    return True


# Each proved file's sample count, by the same signature: a sweep's workers count no shard twice.
_COUNTED: dict[tuple[int, ...], int] = {}


def _sample_count(path: Path) -> int | None:
    """The samples the proved shard at `path` holds (its members' distinct keys, read from the tar
    headers), so that a manifest with true hashes and false counts is refused as compose refuses it;
    None for a tar that cannot be listed, which the reader then reports as an `unreadable-shard` row
    after the samples before the break, as it reports any broken shard."""
    signature = _signature(path)
    if signature not in _COUNTED:
        try:
            _COUNTED[signature] = sample_count(tar_members(path))
        except (OSError, tarfile.TarError, ShardReadError):
            return None
    return _COUNTED[signature]


def proofs() -> tuple[tuple[tuple[int, ...], str], ...]:
    """The files proved in this process so far, to hand to a worker process (`remember_proofs`)."""
    return tuple(sorted(_PROVED.items()))


def remember_proofs(proved: tuple[tuple[tuple[int, ...], str], ...]) -> None:
    _PROVED.update((tuple(signature), digest) for signature, digest in proved)


def verify_shards(
    urls: list[str],
    manifest: dict,
    split: str,
    where: str,
    announce: Callable[[str], None] = print,
    command: str = "hsi eval",
    refused: str = "nothing was evaluated",
) -> dict[str, str]:
    """{url: local path to read} for each of `urls`, each proved to hold the manifest's bytes;
    refuses (ShardMismatch, one line naming the shard and saying `refused`) at the first that does
    not. `command` names the run in its notes."""
    listed = expected_digests(manifest, split, where)
    local: dict[str, str] = {}
    for url in urls:
        name = _name(url)
        if name not in listed:
            raise ShardMismatch(
                f"{where}: shard {printable(name)} has no sha256 in the manifest; it cannot be verified"
            )
        digest, size, count = listed[name]
        remote = "://" in url
        path = _hub_copy(url, force=False) if remote else Path(url)
        if not path.is_file():
            raise ShardMismatch(f"shard {printable(str(path))} is missing; the manifest lists it")
        if not _matches(path, digest, size) and remote:
            announce(f"{command}: the cached copy of {name} differs from the manifest; downloading it again")
            path = _hub_copy(url, force=True)
        if not _matches(path, digest, size):
            raise ShardMismatch(
                f"shard {printable(url)} does not match the sha256 its manifest lists (changed or damaged since it "
                f"was written): {refused}; rebuild or download the dataset again"
            )
        found = _sample_count(path)
        problem = None if found is None else ShardStats(name, count, size, digest).count_problem(found)
        if problem:
            raise ShardMismatch(
                f"shard {problem} ({where}): its sha256 is true but its count is not, so the manifest does not "
                f"describe its shards: {refused}; rebuild or download the dataset again"
            )
        local[url] = str(path)
    return local


def verify_stream(
    stream,
    manifest: dict,
    split: str,
    limit: int | None = None,
    announce: Callable[[str], None] = print,
    command: str = "hsi eval",
    refused: str = "nothing was evaluated",
) -> None:
    """Check the sha256 of every shard `stream` (builder.formats.stream) reads, with `limit` only those
    holding the first `limit` samples, and point it at the proved files (for a hub source, the checked
    copies in the cache): what an evaluation and a training run read is what was proved."""
    urls = shards_read(stream.shards, stream.shard_lengths, limit)
    where = f"{urls[0].rsplit('/', 1)[0]}/_info.json" if urls else "_info.json"
    local = verify_shards(urls, manifest, split, where, announce, command, refused)
    if stream.shard_lengths is not None:
        stream.shard_lengths = stream.shard_lengths[: len(urls)]
    stream.shards = [local[url] for url in urls]
