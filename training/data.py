"""Training batches from `stream()`: filtered by group or size, error samples repeated (JTT), shuffled
through a seeded buffer after the repetition, augmented on the batch in the main process from a
generator seeded by (seed, epoch), so a run is the same whatever the worker count and a resumed epoch
sees the same crops and flips. The default keeps the whole canvas (flips only): a random resized crop
can cut away a corner object, so it is used only when asked for, with a floor on the kept area."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from builder.formats.stream import shuffled, stream
from evaluation.model_formats.models import Preprocessing
from evaluation.predicting.data import SourceSplit, SplitReader, prepare_image
from evaluation.predicting.verified_shards import verify_stream


def derived_seed(*parts) -> int:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class _ToArray:
    """PIL image -> the model's uint8 H x W x 3 input (a picklable transform for the workers)."""

    def __init__(self, pre: Preprocessing):
        self.pre = pre

    def __call__(self, picture):
        return prepare_image(picture.convert("RGB"), self.pre)


class TrainSamples(SplitReader):
    """Samples {key, image, label, meta} of the training split; `repeats[key]` extra copies of a sample."""

    def __init__(
        self,
        where: SourceSplit,
        pre: Preprocessing,
        *,
        seed: int,
        shuffle_buffer: int,
        groups: Sequence[str] | None = None,
        sizes: Sequence[int] | None = None,
        repeats: Mapping[str, int] | None = None,
    ):
        # shuffle_buffer=1: the stream shuffles shard order per epoch; the buffer is ours (after repeats).
        super().__init__(where, pre, shuffle_buffer=1, seed=seed, transform=_ToArray(pre), keep_json=True)
        self.seed, self.buffer = seed, shuffle_buffer
        self.groups = set(groups) if groups else None
        self.sizes = set(int(s) for s in sizes) if sizes else None
        self.repeats = dict(repeats or {})
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.stream.set_epoch(epoch)

    def keep(self, sample: dict) -> bool:
        return (self.groups is None or sample["group"] in self.groups) and (
            self.sizes is None or int(sample["size"]) in self.sizes
        )

    def _repeated(self) -> Iterator[dict]:
        for sample in self.stream:
            if not self.keep(sample):
                continue
            key, meta = sample["key"], sample["json"]
            item = {"key": key, "image": sample["image"], "label": int(sample["label"]), "meta": meta}
            for _ in range(1 + self.repeats.get(key, 0)):
                yield item

    def __iter__(self) -> Iterator[dict]:
        items = self._repeated()
        if self.buffer > 1:
            from torch.utils.data import get_worker_info

            info = get_worker_info()
            rng = np.random.default_rng(derived_seed(self.seed, "train-buffer", self.epoch, info.id if info else 0))
            items = shuffled(items, self.buffer, rng)
        yield from items


def verify_training_data(
    samples: TrainSamples, manifest: dict, split: str, val: SourceSplit, announce, test: SourceSplit | None = None
) -> None:
    """Prove every shard of the train (which `samples` then reads from the proved files), validation and
    test splits against the manifest's sha256 before the first step, so changed bytes under an unchanged
    manifest are never trained on, selected on or scored."""
    verify_stream(samples.stream, manifest, split, announce=announce, command="hsi train", refused=REFUSED)
    prove_splits(val.source, val.config, [val.split] + ([test.split] if test else []), manifest, announce, {split})


REFUSED = "no training step was taken"


def prove_splits(
    source, config: str | None, splits: Sequence[str], manifest: dict, announce, proved: set[str] | None = None
) -> None:
    """Prove the shards of each of `splits` not in `proved` against the manifest's sha256 before any is
    read; a split the manifest lacks is left to the reader that needs it (which refuses it)."""
    done = set(proved or ())
    listed = manifest.get("splits") if isinstance(manifest, Mapping) else None
    for name in splits:
        if name in done or not isinstance(listed, Mapping) or name not in listed:
            continue
        done.add(name)
        verify_stream(
            stream(source, config, name), manifest, name, announce=announce, command="hsi train", refused=REFUSED
        )


@dataclass
class TrainBatch:
    images: object  # uint8 B x 3 x H x W
    labels: object  # int64 B
    keys: list[str]
    metas: list[dict]


def collate_train(items: list[dict]) -> TrainBatch:
    import torch

    images = torch.from_numpy(np.stack([it["image"] for it in items])).permute(0, 3, 1, 2).contiguous()
    return TrainBatch(
        images,
        torch.tensor([it["label"] for it in items], dtype=torch.int64),
        [it["key"] for it in items],
        [it["meta"] for it in items],
    )


@dataclass(frozen=True)
class Augmentation:
    flip: bool = True
    random_resized_crop: bool = False
    crop_scale_min: float = 0.35  # the smallest kept share of the canvas area when cropping

    def to_json(self) -> dict:
        return {
            "flip": self.flip,
            "random_resized_crop": self.random_resized_crop,
            "crop_scale_min": self.crop_scale_min,
        }


def augment(images, aug: Augmentation, generator):
    """Flips and (only if asked) random resized crops of a uint8 batch, drawn from `generator`."""
    import torch
    import torch.nn.functional as F

    images = images.clone()
    n, _, h, w = images.shape
    if aug.random_resized_crop:
        out = torch.empty_like(images)
        for i in range(n):
            area = float(torch.empty(1).uniform_(aug.crop_scale_min, 1.0, generator=generator)) * h * w
            ratio = float(torch.empty(1).uniform_(np.log(3 / 4), np.log(4 / 3), generator=generator).exp())
            cw = min(w, max(1, int(round((area * ratio) ** 0.5))))
            ch = min(h, max(1, int(round((area / ratio) ** 0.5))))
            top = int(torch.randint(0, h - ch + 1, (1,), generator=generator))
            left = int(torch.randint(0, w - cw + 1, (1,), generator=generator))
            crop = images[i : i + 1, :, top : top + ch, left : left + cw].float()
            out[i] = F.interpolate(crop, size=(h, w), mode="bilinear", align_corners=False).round().clamp(0, 255)[0]
        images = out
    if aug.flip:
        flip = torch.rand(n, generator=generator) < 0.5
        images[flip] = images[flip].flip(-1)
    return images
