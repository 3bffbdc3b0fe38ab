"""Run a model over a split and return one prediction row per sample (the pivot every analysis reads).

Before any work: the source's manifest is read, the model's output size is measured on a blank
input and matched to a label space (or refused). Then batches come from the DataLoader's workers,
are normalised on the device and classified; a CUDA out-of-memory error halves the batch, says so,
and retries the same images.

A zero-shot model scores several prompt sets from one image pass: its module returns logits per
set ({set: logits}); the first set fills the prediction columns, and every set (the first too) its
own columns `<column>__<set>` (evaluation.zero_shot.record).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from builder import __version__
from builder.core.errors import HsiError, InputError
from evaluation.model_formats.forward_checks import check_finite, forward_failed
from evaluation.model_formats.labels import LabelSpace, config_wnids, resolve_label_space
from evaluation.model_formats.models import LoadedModel, count_outputs
from evaluation.zero_shot.record import SET_COLUMNS, record_set_names, set_column

from .data import EvalBatches, SourceSplit, make_loader, read_dataset_manifest
from .verified_shards import VERIFIED, verify_stream

TOP_K = 5


def resolve_device(name: str):
    import torch

    from evaluation.model_formats.models import ModelError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise ModelError(f"--device {name!r} is not a device: pass auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ModelError(f"--device {name!r} is not supported: pass auto, cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"--device {name}: no CUDA device is available here (use --device cpu or auto)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ModelError(
            f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
            "numbered from 0 (use --device cuda or auto)"
        )
    return device


def source_display_name(source) -> str:
    """What outputs record of a source: an address as given, a local folder by its name only."""
    text = str(source)
    return text if "://" in text else Path(text).name


class Classifier:
    """A model on its device with its normalisation and label space: uint8 batches -> scored probs."""

    def __init__(
        self,
        loaded: LoadedModel,
        space: LabelSpace,
        device,
        amp: bool | str = False,
        channels_last: bool = False,
        announce: Callable[[str], None] = print,
    ):
        import torch

        self.torch = torch
        self.spec = loaded.spec
        self.device = device
        # recorded as given: True (fp16, as runs from before bf16 record it) or "bf16"; False off CUDA
        self.amp = (amp if amp == "bf16" else bool(amp)) if device.type == "cuda" else False
        self.amp_dtype = torch.bfloat16 if amp == "bf16" else torch.float16
        self.channels_last = channels_last
        self.module = loaded.module.to(device)
        if channels_last:
            self.module = self.module.to(memory_format=torch.channels_last)
        pre = loaded.preprocessing
        self.mean = torch.tensor(pre.mean, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(pre.std, device=device).view(1, 3, 1, 1) * 255
        self.space = space
        self.outputs = torch.as_tensor(space.outputs, device=device)
        self.class_index = np.asarray(space.class_index)
        self.column_of = np.full(1000, -1, np.int64)  # ImageNet class index -> scored column
        self.column_of[self.class_index] = np.arange(len(self.class_index))
        self.max_batch: int | None = None
        self.announce = announce
        # a zero-shot model's prompt sets: its probabilities are B x sets x K, the first set's first
        self.set_names = record_set_names(loaded.zero_shot) if loaded.zero_shot else None

    def _forward(self, images):
        torch = self.torch
        x = images.to(self.device, non_blocking=True).float().sub_(self.mean).div_(self.std)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=bool(self.amp)):
            out = self.module(x)
        if isinstance(out, (tuple, list)):
            out = out[0]
        if self.set_names is not None:
            out = out if isinstance(out, dict) else {self.set_names[0]: out}  # a one-set module's logits
            return torch.stack([self._scored(out[name]) for name in self.set_names], dim=1)
        return self._scored(out)

    def _scored(self, logits):
        return logits.float().index_select(1, self.outputs).softmax(1)

    def probabilities(self, images):
        """Softmax over the scored outputs, B x K on the CPU (B x sets x K for a zero-shot model's
        prompt sets); halves the batch on CUDA OOM. A model that raises, or returns NaN, is one line
        naming it and the input shape (a ForwardFailed)."""
        torch = self.torch
        step = self.max_batch or len(images)
        parts, start = [], 0
        with torch.inference_mode():
            while start < len(images):
                chunk = images[start : start + step]
                try:
                    probs = self._forward(chunk).cpu()
                except torch.cuda.OutOfMemoryError as exc:
                    if step == 1:
                        raise forward_failed(self.spec, chunk.shape, exc) from None
                    step = max(1, step // 2)
                    self.max_batch = step
                    if self.device.type == "cuda":
                        torch.cuda.empty_cache()
                    self.announce(f"hsi eval: out of memory on {self.device}; batch halved to {step}")
                    continue
                except HsiError:  # a model file's own refusal (an input size it does not take)
                    raise
                except Exception as exc:  # noqa: BLE001 - whatever the model raises is its failure
                    raise forward_failed(self.spec, chunk.shape, exc) from None
                check_finite(probs.flatten(1), self.spec, chunk.shape)
                parts.append(probs)
                start += len(chunk)
        return torch.cat(parts).numpy()

    def reference_probabilities(self, images):
        """`probabilities` as B x K: a zero-shot model's first (reference) prompt set, whose
        predictions fill the plain columns (the clean-photo and background passes, the probes)."""
        probs = self.probabilities(images)
        return probs[:, 0] if probs.ndim == 3 else probs


@dataclass
class PredictionRun:
    rows: list[dict]
    metadata: dict
    errors: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    classifier: Classifier | None = None  # kept for the clean photos and bare backgrounds


def _class_or_none(value) -> int | None:
    return None if value is None else int(value)


def prediction_rows(probs: np.ndarray, rows: list[dict], classifier: Classifier, wnids: tuple[str, ...]) -> list[dict]:
    """One output row per sample: its metadata, top-5 classes and the probabilities that matter;
    for prompt sets (B x sets x K), the first set's in the plain columns and each set's in its own."""
    if probs.ndim == 3:
        out = set_rows(probs[:, 0], rows, classifier, wnids)
        for index, name in enumerate(classifier.set_names or ()):
            scored = out if index == 0 else set_rows(probs[:, index], rows, classifier, wnids)
            for row, row_of_set in zip(out, scored):
                row.update({set_column(column, name): row_of_set[column] for column in SET_COLUMNS})
        return out
    return set_rows(probs, rows, classifier, wnids)


def set_rows(probs: np.ndarray, rows: list[dict], classifier: Classifier, wnids: tuple[str, ...]) -> list[dict]:
    """The rows of one B x K probability matrix."""
    k = min(TOP_K, probs.shape[1])
    top = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    out = []
    for i, row in enumerate(rows):

        def prob_of(class_index, row=i):
            if class_index is None:
                return None
            column = classifier.column_of[class_index]
            return None if column < 0 else float(probs[row, column])

        top_classes = [int(c) for c in classifier.class_index[top[i]]]
        out.append(scored_row(row, wnids, top_classes, [float(p) for p in probs[i, top[i]]], prob_of))
    return out


def scored_row(
    row: dict,
    wnids: tuple[str, ...],
    top_classes: list[int],
    top_probs: list[float] | None,
    prob_of: Callable[[int | None], float | None],
) -> dict:
    """One sample's prediction row from its top classes (best first) and a probability lookup by
    ImageNet class: what a model run and a predictions file (`hsi.score`) both produce."""
    from builder.core.classes import class_of

    meta = row["meta"]
    label_class = meta.get("class_index")
    if label_class is None:
        if not 0 <= row["cls"] < len(wnids):  # a sample of someone else's data: one line, not an IndexError
            raise InputError(
                f"sample {row['key']} of {row['shard']}: its json names no class_index and its cls {row['cls']} "
                f"is beyond the config's {len(wnids)} labels; the dataset was not composed by this tool"
            )
        label_class = class_of(wnids[row["cls"]]).index
    paired = meta.get("paired_wnid")
    paired_class = class_of(paired).index if paired else None
    background_class = _class_or_none(meta.get("background_class_index"))
    return {
        "key": row["key"],
        "shard": row["shard"],
        "status": "ok",
        "detail": None,
        "cls": row["cls"],
        "label_class": int(label_class),
        "pred_class": top_classes[0],
        "top5_class": top_classes,
        "top5_prob": top_probs,
        "correct": top_classes[0] == label_class,
        "correct_top5": label_class in top_classes,
        "prob_label": prob_of(label_class),
        "prob_background_class": prob_of(background_class),
        "paired_class_index": paired_class,
        "prob_paired_class": prob_of(paired_class),
        "meta": meta,
    }


@dataclass
class RunPlan:
    """What is known before any work: the shards, the manifest, the config's labels, the label space."""

    dataset: EvalBatches
    manifest: dict
    wnids: tuple[str, ...]
    space: LabelSpace
    verified: str | None = None  # "sha256" once `verify_plan` proved every shard the run reads


def plan_run(
    loaded: LoadedModel,
    source,
    config: str | None,
    split: str,
    *,
    batch_size: int = 64,
    limit: int | None = None,
    label_space: str = "imagenet",
) -> RunPlan:
    """Resolve the data and match the model's output size to a label space; refuses before any work."""
    dataset = EvalBatches(SourceSplit(source, config, split), loaded.preprocessing, batch_size, limit)
    manifest = read_dataset_manifest(SourceSplit(source, config, split))
    wnids = config_wnids(manifest)
    space = resolve_label_space(
        count_outputs(loaded.module, loaded.preprocessing, loaded.spec), loaded.classes, wnids, label_space
    )
    return RunPlan(dataset, manifest, wnids, space)


def run_predictions(
    loaded: LoadedModel,
    source,
    config: str | None = None,
    split: str = "test",
    *,
    batch_size: int = 64,
    workers: int = 2,
    device: str = "auto",
    amp: bool = False,
    channels_last: bool = False,
    limit: int | None = None,
    label_space: str = "imagenet",
    progress: bool = True,
    announce: Callable[[str], None] = print,
    plan: RunPlan | None = None,
) -> PredictionRun:
    from tqdm import tqdm

    plan = plan or plan_run(loaded, source, config, split, batch_size=batch_size, limit=limit, label_space=label_space)
    dataset, manifest, wnids, space = plan.dataset, plan.manifest, plan.wnids, plan.space
    torch_device = resolve_device(device)
    classifier = Classifier(loaded, space, torch_device, amp, channels_last, announce)
    loader = make_loader(
        dataset, workers, pin_memory=torch_device.type == "cuda", yield_to_model=torch_device.type == "cpu"
    )
    expected = dataset.num_samples if limit is None else min(limit, dataset.num_samples or limit)
    rows, errors = [], []
    started = time.perf_counter()
    with tqdm(total=expected, unit="img", desc=f"eval {loaded.spec}", disable=not progress, file=sys.stderr) as bar:
        for batch in loader:
            errors.extend(batch.errors)
            if batch.images is not None:
                rows.extend(prediction_rows(classifier.probabilities(batch.images), batch.rows, classifier, wnids))
            bar.update(len(batch.rows) + sum(1 for e in batch.errors if e["key"] is not None))
    seconds = time.perf_counter() - started
    rows.sort(key=lambda r: r["key"])
    errors.sort(key=lambda e: (e["shard"], e["key"] or ""))
    metadata = {
        "model": loaded.describe(),
        "preprocessing": loaded.preprocessing.to_json(),
        "label_space": space.to_json(),
        "data": {
            "source": source_display_name(source),
            "config": manifest.get("config"),
            "split": split,
            "fingerprint": manifest.get("fingerprint"),
            "num_samples": dataset.num_samples,
            "limit": limit,
            "partial": is_partial(limit, dataset.num_samples),
            "verified": plan.verified,
        },
        "run": {
            "device": torch_device.type,
            "amp": classifier.amp,
            "channels_last": channels_last,
            "batch_size": batch_size,
            "batch_halved_to": classifier.max_batch,
            "workers": workers,
            "seconds": round(seconds, 3),
            "images_per_second": round(len(rows) / seconds, 2) if seconds else None,
        },
        "toolkit": {"name": "hard-spurious-imagenet", "version": __version__},
        "notes": list(loaded.notes),
    }
    if loaded.zero_shot:
        metadata["zero_shot"] = loaded.zero_shot
    return PredictionRun(rows, metadata, errors, seconds, classifier)


def is_partial(limit: int | None, num_samples: int | None) -> bool:
    """A `--limit` run that reads fewer samples than the split holds (the leaderboard marks it)."""
    return limit is not None and (num_samples is None or limit < num_samples)


def verify_plan(plan: RunPlan, split: str, limit: int | None, announce: Callable[[str], None] = print) -> None:
    """Check the sha256 of every shard the run reads, before the loader starts, and point the reader
    at the proved files (for a hub source, the checked copies in the cache); with `--limit`, only the
    shards holding the first `limit` samples are checked and read. `hsi eval` calls it once per model;
    a training loop's per-epoch passes leave it to the caller, which checks its data once."""
    verify_stream(plan.dataset.stream, plan.manifest, split, limit, announce)
    plan.verified = VERIFIED

