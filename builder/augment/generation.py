"""How one SCGS shard is built, wherever it is built: in the process that planned the run, in a
forked worker (which inherits the planning process's models), in a spawned worker pinned to one GPU
or in a Ray actor (each loads the models once, with the run's loader, and checks they are the ones
the run planned with).

A shard's bytes depend only on its plan: which images, their seeds (from the seed, the source key
and the index), and the models; never on the worker, the order shards are built in, or how many
were built before in the same process.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from builder.augment.classifier import ScgsClassifier, predict_labels
from builder.augment.label_check import check_keep_rule, label_check, tally
from builder.augment.masks import (
    cam_keep_mask,
    check_mask_kind,
    check_threshold,
    resize_cam,
    sample_keep_mask,
)
from builder.augment.sampling import check_sampling
from builder.augment.source import SourceConfig, SourceError
from builder.backends.sd_inpaint import GenerationSettings
from builder.backends.torch_base import limit_threads_in_forked_child
from builder.backends.torch_threads import use_stage_threads
from builder.core.config import canonical_json, differing_settings
from builder.core.errors import RunFailed, UsageError
from builder.core.hashing import copy_checked
from builder.core.manifest import ShardStats
from builder.core.runner import ShardPlan, ShardResult, report_progress
from builder.core.shard_write import write_shard
from builder.formats import composites
from builder.formats.augmented import AUGMENT_SCHEMA_VERSION, augment_members, generated_key

DEFAULT_SHARD_SIZE = 64


@dataclass(frozen=True)
class ScgsOptions:
    """What decides which images are regenerated and how (the generation settings apart)."""

    mask: str = "cam"
    threshold: float = 0.7
    cam_layer: str | None = None  # None: the classifier's default (the last stage)
    clusters: int = 5
    fraction: float = 0.2
    per_image: int = 1
    keep: str = "all"
    seed: int = 0
    batch_size: int = 16  # classifier and CAM batches
    shard_size: int = DEFAULT_SHARD_SIZE

    def check(self) -> ScgsOptions:
        check_mask_kind(self.mask)
        check_threshold(self.threshold)
        check_sampling(self.clusters, self.fraction, self.per_image)
        check_keep_rule(self.keep)
        if self.batch_size < 1 or self.shard_size < 1:
            raise UsageError("--batch-size and --shard-size must be at least 1")
        return self


def generation_seed(seed: int, source_key: str, index: int) -> int:
    """The diffusion noise seed of one generated image: from (seed, source key, index) only, so a
    control and the CAM variant draw the same noise for the same image."""
    digest = hashlib.sha256(f"{seed}:scgs-generate:{source_key}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@dataclass(frozen=True)
class GenerationItem:
    """One image to generate: the j-th from a sampled source."""

    key: str
    shard: str
    label: int
    predicted: int
    cluster: int
    index: int

    @property
    def out_key(self) -> str:
        return generated_key(self.key, self.index)


@dataclass(frozen=True)
class CopiedShard:
    source: str  # path of the source shard
    stats: ShardStats


def copy_shard(item: CopiedShard, target: Path) -> ShardStats:
    """The source shard, copied whole (and checked against its manifest's sha256) or not at all."""

    def mismatch(digest: str) -> SourceError:
        return SourceError(
            f"{item.source} does not match the sha256 its manifest lists ({digest} != {item.stats.sha256}); "
            "validate and rebuild the source config"
        )

    digest = copy_checked(Path(item.source), target, item.stats.sha256, mismatch)
    return ShardStats(target.name, item.stats.num_samples, target.stat().st_size, digest)


# --- the models, once per process -----------------------------------------------------------


def generator_provenance(inpainter: Any) -> dict:
    return {
        "name": "stable-diffusion-inpaint",
        "model_id": inpainter.model_id,
        "weights_sha256": inpainter.weights_sha256,
        "native_size": inpainter.native_size,
        "dtype": inpainter.dtype,  # float16 and float32 draw other images: a resume must not mix them
    }


@dataclass(frozen=True)
class GenerationModels:
    """The models the generated shards need: the ERM classifier (labels and Grad-CAM++), the
    optional check model and the inpainter."""

    classifier: ScgsClassifier
    inpainter: Any  # builder.backends.sd_inpaint.SdInpainter
    check_classifier: ScgsClassifier | None = None

    def provenance(self) -> dict:
        """What identifies them, as the settings and the manifest record it (JSON-normalised)."""
        return json.loads(
            canonical_json(
                {
                    "classifier": self.classifier.provenance(),
                    "check_model": self.check_classifier.provenance() if self.check_classifier else None,
                    "generator": generator_provenance(self.inpainter),
                }
            )
        )


class ModelLoader(Protocol):
    """Loads the run's models again in a worker process, on "cpu" or "cuda" (the GPU the worker was
    given). It must pickle: a frozen dataclass of model specs and paths, not of loaded models."""

    def __call__(self, device: str) -> GenerationModels: ...


# The models of the runs this process takes part in, by run token, with the id of the process
# that loaded them: the planning process registers its own (forked workers inherit them), a
# spawned worker or a Ray actor loads its copy on its first shard and keeps it for the next ones.
_PROCESS_MODELS: dict[str, tuple[int, GenerationModels]] = {}


class WorkerModelsDiffer(RunFailed):
    """A worker process loaded other models than the ones the run was planned with."""


@dataclass(frozen=True)
class ModelHandle:
    """How a shard builder finds the run's models in whatever process it runs in."""

    token: str  # names this run's entry of _PROCESS_MODELS
    device: str  # "cpu" or "cuda": where a worker loads its copy
    expected: Mapping[str, Any]  # GenerationModels.provenance() of the planning process's models
    loader: ModelLoader | None = None

    def register(self, models: GenerationModels) -> None:
        _PROCESS_MODELS[self.token] = (os.getpid(), models)

    def release(self) -> None:
        _PROCESS_MODELS.pop(self.token, None)

    def get(self) -> GenerationModels:
        entry = _PROCESS_MODELS.get(self.token)
        if entry is None:
            if self.loader is None:
                raise RunFailed(
                    "this SCGS run has no model loader, so its shards can only be built where it was planned"
                )
            models = self.loader(self.device)
            loaded = models.provenance()
            if loaded != self.expected:
                raise WorkerModelsDiffer(
                    "a worker loaded other models than the run was planned with ("
                    + "; ".join(differing_settings(dict(self.expected), loaded))
                    + "): the model files changed during the run; run the same command again"
                )
            entry = (os.getpid(), models)
            _PROCESS_MODELS[self.token] = entry
        loaded_in, models = entry
        limit_threads_in_forked_child(loaded_in)  # OpenMP's pool does not survive a fork
        return models


# --- one shard ------------------------------------------------------------------------------


def cam_maps(cam: Any, classifier: ScgsClassifier, images: np.ndarray, predicted: Sequence[int], batch_size: int):
    """Grad-CAM++ of the predicted classes, at the canvas size, in [0, 1]."""
    height, width = images.shape[1:3]
    maps = []
    for start in range(0, len(images), batch_size):
        batch = classifier.preprocess(images[start : start + batch_size])
        targets = [classifier.output_index(int(p)) for p in predicted[start : start + batch_size]]
        for one in cam.maps(classifier.module, batch, targets):
            maps.append(resize_cam(one, height, width))
    return np.stack(maps)


@dataclass(frozen=True)
class ScgsShardBuilder:
    """Builds one shard: a copy of a source shard, or generated samples. It pickles small (plans,
    settings and a model handle, never the models), for worker processes and Ray actors."""

    out_dir: Path
    source: SourceConfig
    config: str  # the output config's name (the samples' `variant`)
    options: ScgsOptions
    generation: GenerationSettings
    cam: Any  # the gradcam++ backend (settings only)
    cam_layer: str
    models: ModelHandle

    def __call__(self, plan: ShardPlan) -> ShardResult:
        if plan.items and isinstance(plan.items[0], CopiedShard):
            stats = copy_shard(plan.items[0], self.out_dir / plan.filename)
            report_progress(1)  # the bar counts plan items: one per copied shard
            return ShardResult(stats)
        return self.generate(plan)

    @property
    def jpeg_quality(self) -> int:
        return int((self.source.manifest.spec or {}).get("jpeg_quality", 95))

    def generate(self, plan: ShardPlan) -> ShardResult:
        use_stage_threads()  # the run's thread count in any worker: float sums depend on it
        items: list[GenerationItem] = list(plan.items)
        options, generation, models = self.options, self.generation, self.models.get()
        class_names = self.source.class_names
        sources = self.source.select(by_shard((item.shard, item.key) for item in items))
        unique = sorted({item.key for item in items})
        pixels = {key: sources[key].pixels for key in unique}
        predicted = {item.key: item.predicted for item in items}
        maps = cam_maps(
            self.cam,
            models.classifier,
            np.stack([pixels[k] for k in unique]),
            [predicted[k] for k in unique],
            options.batch_size,
        )
        cam_of = dict(zip(unique, maps))
        cam_keep = {key: cam_keep_mask(cam, options.threshold) for key, cam in cam_of.items()}
        keeps = [sample_keep_mask(options.mask, cam_keep[i.key], options.seed, i.key, i.index) for i in items]
        prompts = [models.inpainter.prompt_for(class_names[i.label], generation) for i in items]
        seeds = [generation_seed(options.seed, i.key, i.index) for i in items]
        generated = models.inpainter.generate(
            [pixels[i.key] for i in items], keeps, prompts, seeds, generation, progress=False
        )
        stacked = np.stack(generated)
        erm = predict_labels(models.classifier, stacked, options.batch_size)
        check = (
            predict_labels(models.check_classifier, stacked, options.batch_size) if models.check_classifier else None
        )
        samples, metas, checks = [], [], []
        for n, item in enumerate(items):
            result = label_check(item.label, int(erm[n]), int(check[n]) if check is not None else None, options.keep)
            checks.append((item.label, result))
            if not result.kept:
                continue
            kept_mask = keeps[n]
            keep = kept_mask if kept_mask is not None else np.zeros(stacked.shape[1:3], bool)
            meta = {**composites.decode_composite_json(sources[item.key].members), "variant": self.config}
            block = self.augment_block(item, models, keep, cam_keep[item.key], prompts[n], seeds[n], result.to_json())
            jpeg = composites.encode_jpeg(generated[n], self.jpeg_quality)
            members = {
                **composites.composite_members(jpeg, item.label, meta),
                **augment_members(block, keep, cam_of[item.key]),
            }
            samples.append((item.out_key, members))
            metas.append(meta)
        report_progress(len(items))
        stats = write_shard(self.out_dir / plan.filename, samples)
        return ShardResult(stats, [], {"composites": composites.count_composites(metas), "label_check": tally(checks)})

    def augment_block(
        self,
        item: GenerationItem,
        models: GenerationModels,
        keep: np.ndarray,
        cam_keep: np.ndarray,
        prompt: str,
        seed: int,
        check: dict,
    ) -> dict:
        options, generation = self.options, self.generation
        names = self.source.class_names
        return {
            "source_key": item.key,
            "source_config": self.source.config,
            "index": item.index,
            "true_label": item.label,
            "true_class_name": names[item.label],
            "predicted_label": item.predicted,
            "predicted_class_name": names[item.predicted],
            "cluster": item.cluster,
            "mask": options.mask,
            "threshold": options.threshold,
            "cam_layer": self.cam_layer,
            "cam_area_fraction": round(float(cam_keep.mean()), 6),
            "mask_area_fraction": round(float(keep.mean()), 6),
            "sd_model": models.inpainter.model_id,
            "sd_weights_sha256": models.inpainter.weights_sha256,
            "prompt": prompt,
            "negative_prompt": generation.negative_prompt,
            "generation_seed": seed,
            "paste_back": bool(generation.paste_back) and options.mask != "none",
            "label_check": check,
            "schema_version": AUGMENT_SCHEMA_VERSION,
        }


def by_shard(pairs) -> dict[str, set[str]]:
    """{shard: keys} of (shard, key) pairs."""
    wanted: dict[str, set[str]] = {}
    for shard, key in pairs:
        wanted.setdefault(shard, set()).add(key)
    return wanted
