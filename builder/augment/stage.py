"""The SCGS stage: a source config's train split plus images regenerated where the ERM model is
wrong, as a new config `<source>-scgs` (or `-scgs-random`, `-scgs-shifted`, `-scgs-none`).

Before any write (when the stage object is made): where the config goes (builder.augment.preflight:
never into or over its source), every source shard checked against its manifest's size and
sha256, M, the misclassified train samples (from the classifier or a predictions table), their
pooled features, the per-class k-means and the sample (builder.augment.sampling), and one
Grad-CAM++ map, so a CAM layer that cannot give one is refused now. Then `run_stage` builds,
resumably by shard:

- every shard of the source, copied byte for byte under its own name (train, val, test: val and
  test are the source's, unchanged; copies, not links, so the config stands alone and releases
  copy it like any other);
- generated train shards after the source's (`train-<n>.tar` onwards), `--shard-size` generated
  images each: per source image the Grad-CAM++ map of the predicted (wrong) class, the keep-mask
  (builder.augment.masks), Stable Diffusion inpainting of everything outside it with the true
  class's prompt, the label check (builder.augment.label_check).

The models run in this process (one GPU); `--workers` and the Ray runner are refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np

from builder.augment.classifier import ScgsClassifier, pooled_features, predict_labels
from builder.augment.label_check import check_keep_rule, kept_shares, label_check, merge_tallies, tally
from builder.augment.masks import cam_keep_mask, check_mask_kind, check_threshold, resize_cam, sample_keep_mask
from builder.augment.misclassified import (
    PredictedRow,
    TrainPredictions,
    misclassified_from_classifier,
    misclassified_from_predictions,
)
from builder.augment.preflight import check_generation, check_output_place
from builder.augment.sampling import ClusterPlan, SampledImage, check_sampling, sample_misclassified
from builder.augment.source import TRAIN, SourceConfig, SourceError
from builder.backends.registry import backend_config, make_backend
from builder.core.config import canonical_json, fingerprint
from builder.core.errors import UsageError
from builder.core.folders import check_writable_folder
from builder.core.hashing import copy_checked
from builder.core.manifest import COMPOSITES, Manifest, ShardStats, SplitEntry
from builder.core.names import check_config_name
from builder.core.runner import ShardPlan, ShardResult, plan_shards, report_progress
from builder.core.shard_write import write_shard
from builder.core.stage import RunOptions, Stage, StageOutcome, StageRun, run_stage
from builder.formats import composites
from builder.formats.augmented import AUGMENT_SCHEMA_VERSION, augment_members, generated_key

STAGE_NAME = "scgs"
DEFAULT_SHARD_SIZE = 64


def scgs_config_name(source_config: str, mask: str) -> str:
    """`<source>-scgs` for the CAM masks, `<source>-scgs-<mask>` for a control."""
    return check_config_name(f"{source_config}-scgs" + ("" if mask == "cam" else f"-{mask}"))


def generation_seed(seed: int, source_key: str, index: int) -> int:
    """The diffusion noise seed of one generated image: from (seed, source key, index) only, so a
    control and the CAM variant draw the same noise for the same image."""
    digest = hashlib.sha256(f"{seed}:scgs-generate:{source_key}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


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


@dataclass
class ScgsShardBuilder:
    """Builds one shard: a copy of a source shard, or generated samples (the models stay loaded)."""

    stage: ScgsStage

    def __call__(self, plan: ShardPlan) -> ShardResult:
        out_dir = self.stage.out_dir
        if plan.items and isinstance(plan.items[0], CopiedShard):
            stats = copy_shard(plan.items[0], out_dir / plan.filename)
            report_progress(1)  # the bar counts plan items: one per copied shard
            return ShardResult(stats)
        return self.stage.generate_shard(plan)


@dataclass
class ScgsModels:
    """The models a run uses, loaded by the caller (the CLI) before the stage is made."""

    classifier: ScgsClassifier
    inpainter: Any  # builder.backends.sd_inpaint.SdInpainter
    generation: Any  # builder.backends.sd_inpaint.GenerationSettings
    check_classifier: ScgsClassifier | None = None
    predictions: Sequence[PredictedRow] | None = None  # M from a table instead of the classifier
    predictions_provenance: dict | None = None


@dataclass
class Sampling:
    predictions: TrainPredictions
    sampled: list[SampledImage]
    clusters: list[ClusterPlan]
    items: list[GenerationItem] = field(default_factory=list)


class ScgsStage(Stage):
    name: ClassVar[str] = STAGE_NAME
    holds: ClassVar[str] = COMPOSITES
    progress_unit: ClassVar[str] = "img"

    def __init__(self, source: SourceConfig, out_root: Path, options: ScgsOptions, models: ScgsModels) -> None:
        self.source, self.options, self.models = source, options.check(), models
        self.config = scgs_config_name(source.config, options.mask)
        self.out_dir = Path(out_root) / self.config
        check_output_place(Path(out_root), self.out_dir, source.folder)
        check_writable_folder(self.out_dir)
        check_generation(models.generation)
        self.cam_layer = options.cam_layer or models.classifier.cam_layer
        # through the registry, like every model: the kept region is thresholded by the stage itself
        self.cam = make_backend(
            "cam", "gradcam++", backend_config("cam", "gradcam++", SimpleNamespace(cam_layer=self.cam_layer))
        )
        source.verify_shards()  # a tampered or changed source is refused now, not midway through the copies
        self.sampling = self.sample()
        if not self.sampling.items:
            raise UsageError(
                f"the classifier gets every one of the {self.sampling.predictions.train_samples} train samples of "
                f"{source.config} right: SCGS has no misclassified image to regenerate"
            )
        self.probe_cam()
        self._settings = json.loads(canonical_json(self.settings_payload()))
        self._plans = self.make_plans()

    # --- before any write -------------------------------------------------------------------

    def sample(self) -> Sampling:
        models, options = self.models, self.options
        if models.predictions is not None:
            predictions = misclassified_from_predictions(self.source, models.predictions)
        else:
            predictions = misclassified_from_classifier(self.source, models.classifier, options.batch_size)
        wrong = predictions.misclassified
        samples = self.source.select(_by_shard((m.shard, m.key) for m in wrong))
        if wrong:
            features = pooled_features(
                models.classifier, np.stack([samples[m.key].pixels for m in wrong]), options.batch_size
            )
        else:
            features = np.zeros((0, 1), np.float32)
        sampled, clusters = sample_misclassified(wrong, features, options.clusters, options.fraction, options.seed)
        items = [
            GenerationItem(s.source.key, s.source.shard, s.source.label, s.source.predicted, s.cluster, j)
            for s in sampled
            for j in range(options.per_image)
        ]
        return Sampling(predictions, sampled, clusters, items)

    def probe_cam(self) -> None:
        """One Grad-CAM++ map now, so a --cam-layer that cannot give one is refused before any write."""
        first = self.sampling.items[0]
        image = self.source.select({first.shard: {first.key}})[first.key].pixels
        self.cams(np.stack([image]), [first.predicted])

    def make_plans(self) -> list[ShardPlan]:
        plans = []
        for split, entry in self.source.manifest.splits.items():
            for index, stats in enumerate(entry.shards):
                plans.append(ShardPlan(split, index, (CopiedShard(str(self.source.folder / stats.filename), stats),)))
            if split == TRAIN:
                for plan in plan_shards(TRAIN, self.sampling.items, self.options.shard_size):
                    plans.append(ShardPlan(TRAIN, len(entry.shards) + plan.index, plan.items))
        return plans

    def settings_payload(self) -> dict:
        models = self.models
        return {
            "stage": STAGE_NAME,
            "source": {"config": self.source.config, "fingerprint": self.source.manifest.fingerprint},
            "options": {**asdict(self.options), "cam_layer": self.cam_layer},
            "classifier": models.classifier.provenance(),
            "check_model": models.check_classifier.provenance() if models.check_classifier else None,
            "predictions": models.predictions_provenance,
            "generator": self.generator_provenance(),
            "generation": asdict(models.generation),
            "schema_version": composites.SCHEMA_VERSION,
            "augment_schema_version": AUGMENT_SCHEMA_VERSION,
        }

    def generator_provenance(self) -> dict:
        inpainter = self.models.inpainter
        return {
            "name": "stable-diffusion-inpaint",
            "model_id": inpainter.model_id,
            "weights_sha256": inpainter.weights_sha256,
            "native_size": inpainter.native_size,
            "dtype": inpainter.dtype,  # float16 and float32 draw other images: a resume must not mix them
        }

    # --- the Stage interface ----------------------------------------------------------------

    def settings(self) -> dict:
        return self._settings

    def plans(self) -> list[ShardPlan]:
        return self._plans

    def progress_label(self) -> str:
        return f"scgs {self.config}"

    def shard_builder(self) -> ScgsShardBuilder:
        return ScgsShardBuilder(self)

    # --- generation -------------------------------------------------------------------------

    def cams(self, images: np.ndarray, predicted: Sequence[int]) -> np.ndarray:
        """Grad-CAM++ of the predicted classes, at the canvas size, in [0, 1]."""
        classifier, size = self.models.classifier, self.options.batch_size
        height, width = images.shape[1:3]
        maps = []
        for start in range(0, len(images), size):
            batch = classifier.preprocess(images[start : start + size])
            targets = [classifier.output_index(int(p)) for p in predicted[start : start + size]]
            for cam in self.cam.maps(classifier.module, batch, targets):
                maps.append(resize_cam(cam, height, width))
        return np.stack(maps)

    def generate_shard(self, plan: ShardPlan) -> ShardResult:
        items: list[GenerationItem] = list(plan.items)
        options, models = self.options, self.models
        class_names = self.source.class_names
        sources = self.source.select(_by_shard((item.shard, item.key) for item in items))
        unique = sorted({item.key for item in items})
        pixels = {key: sources[key].pixels for key in unique}
        predicted = {item.key: item.predicted for item in items}
        cam_of = dict(zip(unique, self.cams(np.stack([pixels[k] for k in unique]), [predicted[k] for k in unique])))
        cam_keep = {key: cam_keep_mask(cam, options.threshold) for key, cam in cam_of.items()}
        keeps = [sample_keep_mask(options.mask, cam_keep[i.key], options.seed, i.key, i.index) for i in items]
        prompts = [models.inpainter.prompt_for(class_names[i.label], models.generation) for i in items]
        seeds = [generation_seed(options.seed, i.key, i.index) for i in items]
        generated = models.inpainter.generate(
            [pixels[i.key] for i in items], keeps, prompts, seeds, models.generation, progress=False
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
            keep = keeps[n] if keeps[n] is not None else np.zeros(stacked.shape[1:3], bool)
            meta = {**composites.decode_composite_json(sources[item.key].members), "variant": self.config}
            block = self.augment_block(item, keep, cam_keep[item.key], prompts[n], seeds[n], result.to_json())
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

    @property
    def jpeg_quality(self) -> int:
        return int((self.source.manifest.spec or {}).get("jpeg_quality", 95))

    def augment_block(
        self, item: GenerationItem, keep: np.ndarray, cam_keep: np.ndarray, prompt: str, seed: int, check: dict
    ) -> dict:
        options, generation = self.options, self.models.generation
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
            "sd_model": self.models.inpainter.model_id,
            "sd_weights_sha256": self.models.inpainter.weights_sha256,
            "prompt": prompt,
            "negative_prompt": generation.negative_prompt,
            "generation_seed": seed,
            "paste_back": bool(generation.paste_back) and options.mask != "none",
            "label_check": check,
            "schema_version": AUGMENT_SCHEMA_VERSION,
        }

    # --- the manifest -----------------------------------------------------------------------

    def manifest(self, outcome: StageOutcome) -> Manifest:
        source = self.source.manifest
        splits: dict[str, SplitEntry] = {}
        generated = [
            r for p, r in zip(outcome.plans, outcome.results) if p.items and isinstance(p.items[0], GenerationItem)
        ]
        for split, entry in source.splits.items():
            stats = [r.stats for r in outcome.results_of(split)]
            counts = entry.counts
            if split == TRAIN:
                generated_counts = [r.counts.get("composites", {}) for r in generated]
                counts = composites.merge_counts([entry.counts or {}, *generated_counts])
            splits[split] = SplitEntry(split, stats, counts=counts, source_images=entry.source_images)
        check_counts = merge_tallies([r.counts.get("label_check", {}) for r in generated])
        return Manifest(
            stage=self.name,
            config=self.config,
            fingerprint=fingerprint(self._settings),
            spec_fingerprint=source.spec_fingerprint,
            spec=source.spec,
            parts=source.parts,
            schema_version=composites.SCHEMA_VERSION,
            splits=splits,
            errors=outcome.errors,
            class_names=list(self.source.class_names),
            backends={
                "classifier": self.models.classifier.provenance(),
                "check_model": self.models.check_classifier.provenance() if self.models.check_classifier else None,
                "cam": {"name": "gradcam++", "package": "grad-cam", "layer": self.cam_layer},
                "generator": self.generator_provenance(),
            },
            settings=self._settings,
            augment=self.summary(check_counts),
            notes=list(source.notes or []) or None,
        )

    def summary(self, check_counts: dict) -> dict:
        sampling, names = self.sampling, self.source.class_names
        wrong = sampling.predictions.misclassified
        per_class = {
            names[label]: {
                "misclassified": sum(1 for m in wrong if m.label == label),
                "sampled": sum(1 for s in sampling.sampled if s.source.label == label),
                "clusters": [c.to_json() for c in sampling.clusters if c.label == label],
            }
            for label in sorted({m.label for m in wrong})
        }
        return {
            "method": "SCGS (arXiv 2412.19457): misclassified train images, Grad-CAM++ keep-mask of the wrong "
            "class, Stable Diffusion inpainting of the rest with the true class",
            "source_config": self.source.config,
            "source_fingerprint": self.source.manifest.fingerprint,
            "mask": self.options.mask,
            "threshold": self.options.threshold,
            "keep": self.options.keep,
            "misclassified_from": sampling.predictions.source,
            "train_samples": sampling.predictions.train_samples,
            "misclassified": len(wrong),
            "erm_train_accuracy": round(sampling.predictions.accuracy, 6),
            "sampled_images": len(sampling.sampled),
            "generated_images": len(sampling.items),
            "kept_images": sum(row["kept"] for row in check_counts.values()),
            "per_class": per_class,
            "label_check": kept_shares(check_counts, names),
        }


def check_run_options(options: RunOptions) -> None:
    if options.runner != "local" or options.workers != 1:
        raise UsageError(
            "hsi scgs runs its models in one process: --workers and --runner ray are not supported "
            "(run one hsi scgs per GPU, one per mask kind)"
        )


def run_scgs(stage: ScgsStage, options: RunOptions) -> StageRun:
    """Build (or resume) the stage's config; refused before any write when the options do not fit."""
    check_run_options(options)
    return run_stage(stage, options)


def _by_shard(pairs) -> dict[str, set[str]]:
    wanted: dict[str, set[str]] = {}
    for shard, key in pairs:
        wanted.setdefault(shard, set()).add(key)
    return wanted
