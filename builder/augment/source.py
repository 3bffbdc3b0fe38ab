"""The source config SCGS augments: a composed dataset folder with a train split."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builder.core.errors import InputError, UsageError
from builder.core.manifest import COMPOSITES, Manifest
from builder.core.shards import iter_shard, shard_filename
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
    folder: Path
    manifest: Manifest

    @property
    def config(self) -> str:
        assert self.manifest.config is not None
        return self.manifest.config

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


def open_source(folder: Path) -> SourceConfig:
    folder = Path(folder)
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
    for split, entry in manifest.splits.items():
        expected = [shard_filename(split, i) for i in range(len(entry.shards))]
        if entry.filenames != expected:
            raise SourceError(
                f"{folder}: split {split} lists shards {entry.filenames[:3]}..., not {split}-00000.tar onwards; "
                "rebuild it with `hsi compose`"
            )
    if manifest.split(TRAIN).num_samples == 0:
        raise UsageError(f"{folder}: the {TRAIN} split is empty; there is nothing to augment")
    return SourceConfig(folder, manifest)
