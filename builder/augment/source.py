"""The source config SCGS augments: a composed dataset folder with a train split."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builder.core.errors import InputError, UsageError
from builder.core.hashing import sha256_file
from builder.core.manifest import COMPOSITES, MANIFEST_NAME, Manifest
from builder.core.names import UnsafeNameError, check_config_name, check_shard_filename, check_split_name
from builder.core.shard_read import iter_shard
from builder.core.shards import shard_filename
from builder.formats.composites import decode_composite_json, decode_composite_pixels, decode_label

TRAIN = "train"


class SourceError(InputError):
    """The folder cannot be augmented (not a composed config, no train split, ...)."""


@dataclass(frozen=True)
class SourceSample:
    shard: str
    key: str
    members: dict[str, bytes]
    label: int

    @property
    def meta(self) -> dict:
        return decode_composite_json(self.members)

    @property
    def pixels(self) -> np.ndarray:
        return decode_composite_pixels(self.members["jpg"])


@dataclass(frozen=True)
class SourceConfig:
    """A composed config folder as `open_source` checked it: its manifest and its config's name."""

    folder: Path
    manifest: Manifest
    config: str

    @property
    def class_names(self) -> list[str]:
        return list(self.manifest.class_names or [])

    @property
    def train_shards(self) -> list[str]:
        return self.manifest.split(TRAIN).filenames

    def samples(self, shards: list[str] | None = None) -> Iterator[SourceSample]:
        """The train split's samples, shard by shard in manifest order, keys in shard order."""
        for shard in shards if shards is not None else self.train_shards:
            for key, members in iter_shard(self.folder / shard):
                yield SourceSample(shard, key, members, decode_label(members))

    def train_samples(self) -> Iterator[SourceSample]:
        """`samples()` of the whole train split, refused as soon as it departs from the manifest: a
        label outside the class names, a key seen twice, a shard holding another count than listed."""
        names, seen = self.class_names, set()
        for stats in self.manifest.split(TRAIN).shards:
            count = 0
            for sample in self.samples([stats.filename]):
                if not 0 <= sample.label < len(names):
                    raise SourceError(
                        f"{self.folder}: {sample.key} in {sample.shard} has label {sample.label}, but the manifest "
                        f"names {len(names)} classes; validate the source config and rebuild it with `hsi compose`"
                    )
                if sample.key in seen:
                    raise SourceError(
                        f"{self.folder}: key {sample.key} occurs twice in the train split (again in {sample.shard}); "
                        "validate the source config and rebuild it with `hsi compose`"
                    )
                seen.add(sample.key)
                count += 1
                yield sample
            if count != stats.num_samples:
                raise SourceError(
                    f"{self.folder}: {stats.filename} holds {count} samples, its manifest lists {stats.num_samples}; "
                    "validate the source config and rebuild it with `hsi compose`"
                )

    def verify_shards(self) -> None:
        """Every listed shard is a file of the listed size and sha256 (read once, before any write)."""
        for entry in self.manifest.splits.values():
            for stats in entry.shards:
                path = self.folder / stats.filename
                if not path.is_file():
                    raise SourceError(f"{path} is listed in its folder's manifest but missing; {REBUILD}")
                size = path.stat().st_size
                if size != stats.bytes:
                    raise SourceError(f"{path} has {size} bytes, its manifest lists {stats.bytes}; {REBUILD}")
                digest = sha256_file(path)
                if digest != stats.sha256:
                    raise SourceError(
                        f"{path} does not match the sha256 its manifest lists ({digest[:12]}... != "
                        f"{stats.sha256[:12]}...); {REBUILD}"
                    )

    def select(self, wanted: Mapping[str, set[str]]) -> dict[str, SourceSample]:
        """{key: sample} of the wanted keys, per shard (only those shards are read)."""
        found: dict[str, SourceSample] = {}
        for shard in sorted(wanted):
            for sample in self.samples([shard]):
                if sample.key in wanted[shard]:
                    found[sample.key] = sample
        missing = sorted(set().union(*wanted.values()) - set(found)) if wanted else []
        if missing:
            raise SourceError(
                f"{self.folder}: {len(missing)} train samples listed earlier are gone (first: {missing[0]}); "
                "the source changed during the run: run again"
            )
        return found


REBUILD = "validate the source config and rebuild it with `hsi compose`"


def open_source(folder: Path) -> SourceConfig:
    folder = Path(folder)
    if folder.is_file():
        raise SourceError(f"{folder} is a file: pass a composed config folder (e.g. OUT/hard-spurious-imagenet-10)")
    if (folder / "_release.json").is_file() and not (folder / MANIFEST_NAME).is_file():
        raise SourceError(
            f"{folder} is a release folder, not a config: pass the composed config folder it was made from "
            "(OUT/<config>) or one of its data/<config> folders"
        )
    manifest = Manifest.read(folder)
    if manifest.holds != COMPOSITES or manifest.stage != "compose":
        raise SourceError(
            f"{folder} was written by `hsi {manifest.stage}`, not `hsi compose`: pass a composed config folder "
            "(e.g. OUT/hard-spurious-imagenet-10) to augment"
        )
    if TRAIN not in manifest.splits:
        raise SourceError(
            f"{folder} ({manifest.config}) has no {TRAIN} split (it holds {', '.join(sorted(manifest.splits))}): "
            "SCGS augments a train split; compose a config with one, e.g. the -10 subset"
        )
    if not manifest.class_names:
        raise SourceError(f"{folder}: the manifest lists no class names; rebuild it with `hsi compose`")
    try:
        config = check_config_name(manifest.config)
        for split, entry in manifest.splits.items():
            check_split_name(split)
            for name in entry.filenames:
                check_shard_filename(name, split)
    except UnsafeNameError as exc:
        raise SourceError(f"{folder}: {exc}; {REBUILD}") from None
    for split, entry in manifest.splits.items():
        expected = [shard_filename(split, i) for i in range(len(entry.shards))]
        if entry.filenames != expected:
            raise SourceError(
                f"{folder}: split {split} lists shards {entry.filenames[:3]}..., not {split}-00000.tar onwards; "
                "rebuild it with `hsi compose`"
            )
    if manifest.split(TRAIN).num_samples == 0:
        raise UsageError(f"{folder}: the {TRAIN} split is empty; there is nothing to augment")
    return SourceConfig(folder, manifest, config)
