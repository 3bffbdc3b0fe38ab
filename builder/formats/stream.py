"""`stream(...)`: a PyTorch iterable dataset read straight from a release's shards.

Sources: a release folder (`hard-spurious-imagenet/`), a composed dataset folder (`OUT/<config>/`),
an `hf://datasets/ORG/NAME@REVISION` address (through huggingface_hub's fsspec filesystem), or an
explicit list of shard paths/URLs. The shard list comes from the `_info.json` manifest, never from a
directory listing.

When the manifest gives each shard's length, the epoch's samples (shards in their per-epoch order,
one after the other) are cut into equal, contiguous ranges, one per node (rank, world size), and each
node's range into one per DataLoader worker: every node gets the same number of samples, so DDP ranks
take the same number of steps. `uneven="drop"` (the default) leaves out the last `N % world_size`
samples of the epoch (which ones changes with the shuffled shard order); `uneven="pad"` gives every
node `ceil(N / world_size)` samples, the extra ones repeated from the start of the epoch. `len()` is
the per-node count. For an explicit shard list (lengths unknown) shards are split across readers, and
when there are fewer shards than readers every reader keeps every n-th sample.

Shards are read with `builder.core.shard_read.iter_shard` over a byte stream: one sequential pass per shard,
no index, as fast as a hand-written decode loop (see benchmarks/read.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from builder.core.errors import InputError, first_few
from builder.core.manifest import MANIFEST_NAME
from builder.core.names import UnsafeNameError, check_config_name, check_shard_filename, check_split_name, inside
from builder.core.shard_read import ReadErrorHandler, iter_shard, raise_read_error
from builder.formats.composites import (
    composite_background_status,
    decode_composite_image,
    decode_composite_json,
    decode_label,
)

try:  # torch is the models extra; without it ShardStream still iterates, just not as a torch dataset
    from torch.utils.data import IterableDataset as _IterableBase
except ImportError:  # pragma: no cover - exercised only in torch-less installs
    _IterableBase = object  # type: ignore[misc,assignment]

RELEASE_META = "_release.json"  # a release folder's index of configs (written by cards.release)
# What a broken sample or shard raises while being read or decoded (PIL's errors are OSErrors).
SAMPLE_ERRORS = (OSError, ValueError, KeyError, TypeError, tarfile.TarError)


class StreamError(InputError, ValueError):
    """A source, manifest, shard or sample that cannot be read; the message names which."""


def _join(base: str, *parts: str) -> str:
    """`base/parts`: names were checked by the rules of builder.core.names; a local path is also
    resolved, so a link planted in the folder cannot lead out of it."""
    if "://" not in base:
        return str(inside(Path(base), *parts))
    return "/".join([base.rstrip("/"), *parts])


def _read_json(url: str) -> dict | None:
    import fsspec

    try:
        with fsspec.open(url, "rb") as handle:
            data = json.loads(handle.read())
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, ValueError) as exc:
        raise StreamError(
            f"{url} is not valid JSON ({exc}); rebuild the folder with the command that wrote it"
        ) from None
    if not isinstance(data, dict):
        raise StreamError(f"{url} must hold a JSON object, not {type(data).__name__}")
    return data


UNEVEN = ("drop", "pad")


def source_manifest(source: str | os.PathLike, config: str | None = None) -> tuple[str, dict]:
    """(dataset folder, its `_info.json`) of a release's config (default: its default config) or of a
    composed dataset folder: where a reader learns the splits, class names and shard lengths."""
    base = str(source)
    release = _read_json(_join(base, RELEASE_META))
    try:
        if config is not None:  # a name given by a user enters here, whatever the source holds
            check_config_name(config)
        if release is not None:
            config = check_config_name(config or release.get("default_config"))
            if config not in release.get("configs", {}):
                listed = first_few(sorted(release.get("configs", {})), 10)
                raise StreamError(f"config {config!r} is not in this release; it has {listed}")
            base = _join(base, "data", config)
        manifest = _read_json(_join(base, MANIFEST_NAME))
    except UnsafeNameError as exc:
        raise StreamError(f"{source}: {exc}") from None
    if manifest is None:
        raise FileNotFoundError(
            f"{source}: neither a release folder ({RELEASE_META}) nor a dataset folder ({MANIFEST_NAME})"
        )
    return base, manifest


def resolve_shards(
    source: str | os.PathLike | Sequence[str], config: str | None, split: str
) -> tuple[list[str], int | None]:
    """(shard urls, number of samples or None) for a source, read from its manifests."""
    shards, num_samples, _ = resolve_shard_lengths(source, config, split)
    return shards, num_samples


def resolve_shard_lengths(
    source: str | os.PathLike | Sequence[str], config: str | None, split: str
) -> tuple[list[str], int | None, list[int] | None]:
    """(shard urls, number of samples, samples per shard): the counts are None when unknown."""
    if not isinstance(source, (str, os.PathLike)):  # an explicit list of shards: no counts known
        return [str(s) for s in source], None, None
    base, manifest = source_manifest(source, config)
    try:
        splits = manifest.get("splits")
        check_split_name(split)
        if not isinstance(splits, dict) or split not in splits:
            raise StreamError(
                f"split {split!r} is not in {base}; it has {sorted(splits) if isinstance(splits, dict) else 'none'}"
            )
        entry = splits[split]
        names = entry.get("filenames") if isinstance(entry, dict) else None
        if not isinstance(names, list):
            raise StreamError(
                f"{_join(base, MANIFEST_NAME)}: splits.{split}.filenames must be a list of shard filenames"
            )
        lengths = entry.get("shard_lengths")
        if not (
            isinstance(lengths, list)
            and len(lengths) == len(names)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in lengths)
        ):
            lengths = None
        urls = [_join(base, check_shard_filename(name, split)) for name in names]
        return urls, entry.get("num_samples"), lengths
    except UnsafeNameError as exc:
        raise StreamError(f"{source}: {exc}") from None


def node_rank_and_count() -> tuple[int, int]:
    """This process's rank and the world size: torch.distributed when initialised, else the
    RANK/WORLD_SIZE variables torchrun sets, else a single node."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _rng(*parts: Any) -> np.random.Generator:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def iter_tar_samples(url: str, handler: ReadErrorHandler = raise_read_error) -> Iterator[tuple[str, dict[str, bytes]]]:
    """(key, {ext: bytes}) from one shard (local path or fsspec URL): `iter_shard` over its bytes."""
    import fsspec

    opener = open(url, "rb") if "://" not in url else fsspec.open(url, "rb").open()
    with opener as raw:
        yield from iter_shard(raw, handler)


def decode_sample(key: str, members: dict[str, bytes], transform: Callable | None, keep_json: bool) -> dict:
    picture = decode_composite_image(members["jpg"])
    meta = decode_composite_json(members)
    sample = {
        "key": key,
        "image": transform(picture) if transform else picture,
        "label": decode_label(members),
        "group": meta["group"],
        "size": meta["size"],
        "position": meta["position"],
        "background": meta["background"],
        "background_status": composite_background_status(meta),
    }
    if keep_json:
        sample["json"] = meta
    return sample


class ShardStream(_IterableBase):
    """`stream(...)`: a torch IterableDataset of dicts {key, image, label, group, size, position,
    background, background_status[, json]} over the shards of `split` of a source (see the module's
    docstring). `background_status` is "own", "none" (a fill made from nothing: filter it out with
    `sample["background_status"] != "none"`) or None on gray and noise; older composites read as own.

    `transform` is applied to the PIL image (e.g. torchvision transforms). Pass `rank`/`world_size`
    to override what torch.distributed or the RANK/WORLD_SIZE variables say. `handler` decides
    what a broken shard does (see `builder.core.shard_read.iter_shard`): raise (the default), or e.g.
    `collect_read_errors(errors)` to skip bad members and record why. `uneven`: when the samples do
    not divide among the nodes, "drop" the last `N % world_size` of the epoch or "pad" by repeating
    its first ones, so every node yields `len()` samples (see the module's docstring).
    """

    def __init__(
        self,
        source: str | os.PathLike | Sequence[str],
        config: str | None = None,
        split: str = "test",
        *,
        shuffle_buffer: int = 0,
        seed: int = 0,
        transform: Callable | None = None,
        keep_json: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        handler: ReadErrorHandler = raise_read_error,
        uneven: str = "drop",
    ):
        if isinstance(source, Path):
            source = str(source)
        # the manifest's shard lengths, or None (then unused) unless there is one per shard
        shards, num_samples, shard_lengths = resolve_shard_lengths(source, config, split)
        if not shards:
            raise ValueError("no shards to read")
        if uneven not in UNEVEN:
            raise ValueError(f"uneven={uneven!r}; use one of {', '.join(UNEVEN)}")
        self.shards = shards
        self.shard_lengths = shard_lengths
        self.uneven = uneven
        self.num_samples = num_samples
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed
        self.transform = transform
        self.keep_json = keep_json
        self.rank, self.world_size = rank, world_size
        self.handler = handler
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Shard order and buffer shuffling change per epoch, identically on every node."""
        self.epoch = epoch

    def __len__(self) -> int:
        """Samples per epoch on this node (rank): the same on every node when shard lengths are known."""
        if self.num_samples is None:
            raise TypeError("the sample count is unknown for an explicit shard list")
        if self.shard_lengths is None:
            return self.num_samples
        return self._per_node(self._node()[1])

    def _per_node(self, world: int) -> int:
        total = sum(self.shard_lengths or ())
        return total // world if self.uneven == "drop" else -(-total // world)

    def _node(self) -> tuple[int, int]:
        rank, world = (self.rank, self.world_size) if self.rank is not None else node_rank_and_count()
        return rank, world or 1

    def _reader(self) -> tuple[int, int]:
        """(index, count) of this reader among all nodes x workers."""
        from torch.utils.data import get_worker_info

        rank, world = self._node()
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        return rank * workers + worker, world * workers

    def _epoch_shards(self) -> list[tuple[str, int]]:
        """(shard, its length) in this epoch's order, the same on every node."""
        order = list(zip(self.shards, self.shard_lengths or [0] * len(self.shards)))
        if self.shuffle_buffer:
            _rng(self.seed, "shards", self.epoch).shuffle(order)
        return order

    def _ranges(self) -> list[tuple[int, int]]:
        """This reader's [start, end) ranges of epoch positions (positions >= N wrap to the start)."""
        from torch.utils.data import get_worker_info

        rank, world = self._node()
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        total, quota = sum(self.shard_lengths or ()), self._per_node(world)
        start = rank * quota + worker * quota // workers
        end = rank * quota + (worker + 1) * quota // workers
        if total == 0 or start == end:
            return []
        if end <= total:
            return [(start, end)]
        # padding: the tail of the epoch, then its beginning again (quota <= total, so one wrap)
        return [(start, total), (0, end - total)] if start < total else [(start - total, end - total)]

    def _balanced(self) -> Iterator[tuple[str, str, dict[str, bytes]]]:
        """(shard url, key, members) of this reader's ranges, reading only the shards they cover."""
        shards = self._epoch_shards()
        for low, high in self._ranges():
            first = 0
            for url, length in shards:
                if first + length > low and first < high:
                    position = first
                    for url_, key, members in self._read(url):
                        if position >= high:
                            break
                        if position >= low:
                            yield url_, key, members
                        position += 1
                first += length

    def _assignment(self) -> tuple[list[str], int, int]:
        """(this reader's shards, sample stride, sample offset)."""
        index, count = self._reader()
        shards = list(self.shards)
        if self.shuffle_buffer:
            _rng(self.seed, "shards", self.epoch).shuffle(shards)
        if len(shards) >= count:
            return shards[index::count], 1, 0
        return shards, count, index

    def _raw(self) -> Iterator[tuple[str, str, dict[str, bytes]]]:
        """(shard url, key, members): the shard travels with each sample so errors can name it."""
        if self.shard_lengths is not None:
            yield from self._balanced()
            return
        shards, stride, offset = self._assignment()
        position = 0
        for url in shards:
            for item in self._read(url):
                if position % stride == offset:
                    yield item
                position += 1

    def _read(self, url: str) -> Iterator[tuple[str, str, dict[str, bytes]]]:
        key = None
        try:
            for key, members in iter_tar_samples(url, self.handler):
                yield url, key, members
        except SAMPLE_ERRORS as exc:
            where = f"after sample {key!r}" if key is not None else "before its first sample"
            raise StreamError(f"shard {url}: cannot be read {where} ({type(exc).__name__}: {exc})") from exc

    def __iter__(self) -> Iterator[dict]:
        raw = self._raw()
        if self.shuffle_buffer > 1:
            raw = shuffled(raw, self.shuffle_buffer, _rng(self.seed, "buffer", self.epoch, *self._reader()))
        for url, key, members in raw:
            try:
                sample = decode_sample(key, members, self.transform, self.keep_json)
            except SAMPLE_ERRORS as exc:
                raise StreamError(
                    f"shard {url}: sample {key!r} failed to decode or transform ({type(exc).__name__}: {exc})"
                ) from exc
            yield sample


def shuffled(items: Iterator, buffer_size: int, rng: np.random.Generator) -> Iterator:
    """Reservoir-style shuffle buffer: fill, then emit a random element for every new one."""
    buffer: list = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        index = int(rng.integers(buffer_size))
        buffer[index], item = item, buffer[index]
        yield item
    rng.shuffle(buffer)
    yield from buffer


# The reader users train from: `stream(source, config, split, shuffle_buffer=..., seed=..., ...)` builds
# one; the class owns the parameters, so they are declared (and documented) once.
stream = ShardStream
