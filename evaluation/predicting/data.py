"""Evaluation data: the samples of any source `stream()` accepts, preprocessed and batched in the
DataLoader's workers.

`stream()` resolves the source (release folder, composed dataset folder, hf:// address) to its
manifest's shards and splits them across nodes and workers. The samples are decoded here rather
than by `stream()`'s own decoder, because evaluation must survive bad input: a sample that does not
decode and a shard that breaks off are error rows, counted and reported, and the run goes on.
Images travel to the main process as uint8 tensors (a quarter of float32's bytes); normalisation
happens on the device, batched.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from builder.core.errors import InputError, printable
from builder.core.records import Issue
from builder.core.untrusted import Fields, UntrustedInput, describe
from builder.formats.composites import COMPOSITE_FIELDS, FIELD_CHOICES
from builder.formats.stream import iter_tar_samples, source_manifest, stream
from evaluation.model_formats.models import Preprocessing

from .predictions import is_utf8

try:
    from torch.utils.data import IterableDataset
except ImportError:  # pragma: no cover - the evaluation needs the models extra
    IterableDataset = object


def _pil_filter(name: str):
    from PIL import Image

    return {
        "nearest": Image.NEAREST,
        "bilinear": Image.BILINEAR,
        "bicubic": Image.BICUBIC,
        "lanczos": Image.LANCZOS,
        "box": Image.BOX,
        "hamming": Image.HAMMING,
    }[name]


def prepare_image(image, pre: Preprocessing) -> np.ndarray:
    """A PIL RGB image -> the model's H x W x 3 uint8 input, per `pre`.

    Default: the image as it is, resized only when its size differs from the input size. With
    crop_pct (timm's eval protocol): shorter side to int(H / crop_pct), then a centre crop."""
    h, w = pre.input_size
    flt = _pil_filter(pre.interpolation)
    if pre.crop_pct is not None:
        scale = int(h / pre.crop_pct)
        iw, ih = image.size
        if iw <= ih:
            size = (scale, max(scale, round(ih * scale / iw)))
        else:
            size = (max(scale, round(iw * scale / ih)), scale)
        image = image.resize(size, flt)
        left, top = (size[0] - w) // 2, (size[1] - h) // 2
        image = image.crop((left, top, left + w, top + h))
    elif image.size != (w, h):
        image = image.resize((w, h), flt)
    return np.asarray(image, dtype=np.uint8)


@dataclass
class Batch:
    images: object  # torch uint8 tensor B x 3 x H x W (None when every sample failed)
    rows: list[dict]  # per image: key, shard, cls, meta (the sample's json)
    errors: list[dict]  # error rows: key (or None), shard, reason, detail

    def pin_memory(self) -> Batch:  # called by the DataLoader's pinning thread
        return Batch(self.images.pin_memory() if self.images is not None else None, self.rows, self.errors)


def _shard_name(url: str) -> str:
    return url.rsplit("/", 1)[-1]


class SampleError(UntrustedInput):
    """A sample whose members are not what a composite holds: it becomes that sample's error row."""


# Fields whose value is a class: an ImageNet-1k index (a config label is never larger), or a wnid.
CLASS_INDEX_FIELDS = ("class_index", "label", "background_class_index")
WNID_FIELDS = ("wnid", "background_wnid", "paired_wnid")
INT64 = (-(1 << 63), (1 << 63) - 1)


def sample_json(raw: bytes) -> dict:
    """A sample's json member, checked as the predictions table stores it: an object (no NaN or
    Infinity), each field of the composite schema it holds of the schema's type, class indices in
    0-999 and wnids of ImageNet-1k. Fields it lacks are fine (a config without group metadata);
    fields beyond the schema go to extra_json."""
    from builder.core.classes import is_known_wnid

    try:
        meta = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise SampleError(f"json member is not JSON ({printable(str(error))[:120]})") from None
    fields = Fields(meta, "json member") if isinstance(meta, dict) else None
    if fields is None:
        raise SampleError(f"json member is {describe(meta)}, not an object")
    if not is_utf8(meta):
        raise SampleError("json member holds text that is not UTF-8 (an escaped lone surrogate)")
    for name, (kind, _, _) in COMPOSITE_FIELDS.items():
        if meta.get(name) is None:
            continue
        if name in CLASS_INDEX_FIELDS:
            fields.integer(name, low=0, high=999)
        elif kind is int:
            fields.integer(name, low=INT64[0], high=INT64[1])
        elif kind is float:
            fields.number(name, low=0, high=1)
        else:
            fields.string(name, choices=FIELD_CHOICES.get(name))
            if name in WNID_FIELDS and not is_known_wnid(meta[name]):
                raise fields.error(f"{describe(meta[name])} is not an ImageNet-1k wnid", name)
    return meta


def sample_label(raw: bytes, meta: dict) -> int:
    """The cls member: the sample's label in its config (0-999), the same as its json's `label`."""
    try:
        label = int(raw.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise SampleError(f"cls member is not an integer ({describe(raw[:40])})") from None
    if not 0 <= label <= 999:
        raise SampleError(f"cls member {label} is not a label 0-999")
    if meta.get("label") is not None and meta["label"] != label:
        raise SampleError(f"cls member {label} disagrees with the json's label {meta['label']}")
    return label


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def decode_member_sample(key: str, members: dict[str, bytes], pre: Preprocessing) -> tuple[np.ndarray, int, dict]:
    from PIL import Image

    meta = sample_json(members["json"]) if "json" in members else {}
    label = sample_label(members["cls"], meta)
    with Image.open(io.BytesIO(members["jpg"])) as image:
        array = prepare_image(image.convert("RGB"), pre)
    return array, label, meta


@dataclass(frozen=True)
class SourceSplit:
    """One split of a source `stream()` reads (a release folder with its `config`, a composed dataset
    folder, an hf:// address): where a reader's samples come from."""

    source: Any
    config: str | None
    split: str


class SplitReader(IterableDataset):
    """The samples of one split read through `stream()` for a model whose input is prepared by `pre`:
    what the evaluation batches and the training samples share."""

    def __init__(self, where: SourceSplit, pre: Preprocessing, **stream_options: Any):
        self.stream = stream(where.source, where.config, where.split, **stream_options)
        self.pre = pre

    @property
    def shards(self) -> list[str]:
        return self.stream.shards

    @property
    def num_samples(self) -> int | None:
        return self.stream.num_samples


class EvalBatches(SplitReader):
    """Batches of (preprocessed uint8 images, sample rows, error rows) from `stream()`'s shards.

    With `limit`, every reader walks the shards in manifest order and keeps the first `limit`
    samples that fall to it, so the same samples are read whatever the worker count."""

    def __init__(
        self,
        where: SourceSplit,
        pre: Preprocessing,
        batch_size: int,
        limit: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ):
        super().__init__(where, pre, rank=rank, world_size=world_size)
        self.batch_size = batch_size
        self.limit = limit

    def _samples(self) -> Iterator[tuple[str, str, dict[str, bytes] | None, dict | None]]:
        """(shard, key, members, error) in reading order, for this reader."""
        if self.limit is None:
            shards, stride, offset = self.stream._assignment()
        else:
            index, count = self.stream._reader()
            shards, stride, offset = self.shards, count, index
        position = 0
        for url in shards:
            name = _shard_name(url)
            read = 0
            try:
                for key, members in iter_tar_samples(url):
                    read += 1
                    if self.limit is not None and position >= self.limit:
                        return
                    if position % stride == offset:
                        yield name, key, members, None
                    position += 1
            except Exception as exc:  # a truncated or corrupt tar: report it, go on with the next shard
                if stride == 1 or offset == 0:  # shared shards: one reader reports
                    yield (
                        name,
                        None,
                        None,
                        Issue(
                            name,
                            "unreadable-shard",
                            f"{type(exc).__name__}: {exc} (after {read} samples)",
                            "eval",
                            "skipped",
                            shard=name,
                        ).sample_row(),
                    )

    def records(self) -> tuple[list[dict], list[dict]]:
        """(sample rows, error rows) of this reader without decoding any image: the metadata that
        scoring a predictions file needs (a sample whose json or cls is broken is an error row)."""
        rows, errors = [], []
        for shard, key, members, error in self._samples():
            if error is not None:
                errors.append(error)
                continue
            try:
                meta = sample_json(members["json"]) if "json" in members else {}
                cls = sample_label(members["cls"], meta)
            except Exception as exc:  # as in a model run: one sample's error row, the rest go on
                errors.append(
                    Issue(
                        key, "undecodable-sample", f"{type(exc).__name__}: {exc}", "eval", shard=shard, key=key
                    ).sample_row()
                )
            else:
                rows.append({"key": key, "shard": shard, "cls": cls, "meta": meta})
        return rows, errors

    def __iter__(self) -> Iterator[Batch]:
        import torch

        arrays, rows, errors = [], [], []
        for shard, key, members, error in self._samples():
            if error is not None:
                errors.append(error)
            else:
                try:
                    array, cls, meta = decode_member_sample(key, members, self.pre)
                except Exception as exc:  # any decode failure of one sample is that sample's error row
                    detail = re.sub(r"<[^>]* at 0x[0-9a-f]+>", "the jpg member", f"{type(exc).__name__}: {exc}")
                    errors.append(Issue(key, "undecodable-sample", detail, "eval", shard=shard, key=key).sample_row())
                else:
                    arrays.append(array)
                    rows.append({"key": key, "shard": shard, "cls": cls, "meta": meta})
            if len(arrays) >= self.batch_size:
                yield Batch(torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2), rows, errors)
                arrays, rows, errors = [], [], []
        if arrays or errors:
            images = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2) if arrays else None
            yield Batch(images, rows, errors)


def collate_batch(item):
    """The DataLoader's collate for already-batched items (batch_size=None): a Batch, or an extra
    pass's batch."""
    return item


def _lower_priority(worker_id: int) -> None:
    """On a CPU run the workers only fill the gaps the forward pass leaves: at a lower scheduling
    priority they never preempt its threads (one late thread stalls a whole parallel op)."""
    try:
        os.nice(10)
    except OSError:  # not permitted here: run at normal priority
        pass


def make_loader(dataset: IterableDataset, workers: int, pin_memory: bool, yield_to_model: bool = False):
    from torch.utils.data import DataLoader

    kwargs = {"prefetch_factor": 4, "persistent_workers": False} if workers > 0 else {}
    if workers > 0 and yield_to_model:
        kwargs["worker_init_fn"] = _lower_priority
    return DataLoader(
        dataset, batch_size=None, num_workers=workers, pin_memory=pin_memory, collate_fn=collate_batch, **kwargs
    )


def read_dataset_manifest(where: SourceSplit) -> dict:
    """The `_info.json` of the dataset a split is read from, by `stream()`'s own reader (a release's
    config, a composed folder or hf://: the same names and checks as the samples), type-checked by
    the typed `Manifest` (a malformed one is one line naming the field)."""
    from builder.core.manifest import Manifest
    from builder.formats.stream import StreamError, source_manifest

    try:
        _, manifest = source_manifest(where.source, where.config)
    except (FileNotFoundError, StreamError) as exc:
        raise InputError(f"{printable(str(exc))}") from None
    Manifest.from_json(manifest)
    return manifest


def available_splits(source, config: str | None) -> list[str]:
    """The splits a source's manifest lists (for a default --split), read as stream() reads it."""
    try:
        _, manifest = source_manifest(source, config)
    except FileNotFoundError:
        return []
    splits = manifest.get("splits")
    return sorted(splits) if isinstance(splits, dict) else []


def default_split(source, config: str | None) -> str:
    """The split `hsi eval` and `hsi probe` read when none is named: test if there is one, else the first."""
    splits = available_splits(source, config)
    if not splits:
        raise InputError(f"{source}: neither a release folder (_release.json) nor a dataset folder (_info.json)")
    return "test" if "test" in splits else splits[0]
