"""The SCGS stage: a source config's train split plus images regenerated where the ERM model is
wrong, as a new config `<source>-scgs` (or `-scgs-random`, `-scgs-shifted`, `-scgs-none`).

Before any write (when the stage object is made): where the config goes (builder.augment.preflight:
never into or over its source), every source shard checked against its manifest's size and
sha256, M, the misclassified train samples (from the classifier or a predictions table), their
pooled features, the per-class k-means and the sample (builder.augment.sampling), and one
Grad-CAM++ map, so a CAM layer that cannot give one is refused now. Then `run_stage` builds,
resumably by shard (builder.augment.generation):

- every shard of the source, copied byte for byte under its own name (train, val, test: val and
  test are the source's, unchanged; copies, not links, so the config stands alone and releases
  copy it like any other);
- generated train shards after the source's (`train-<n>.tar` onwards), `--shard-size` generated
  images each: per source image the Grad-CAM++ map of the predicted (wrong) class, the keep-mask
  (builder.augment.masks), Stable Diffusion inpainting of everything outside it with the true
  class's prompt, the label check (builder.augment.label_check).

Where the shards are built (`check_run_options`): in this process by default; with `--workers N`
on the CPU, N forked processes that inherit the models; on CUDA, one process per GPU (N of them);
with `--runner ray`, Ray actors (one GPU each on CUDA). A worker that does not inherit the models
loads them once with the run's `ModelLoader` and must get the same provenance. Every image's seed
comes from (seed, source key, index), and every process does its torch work with the same intra-op
thread count (builder.backends.torch_threads, recorded in the settings), so the shards and the
manifest are byte-identical for any worker count and runner on one device type, and a run resumed
under another worker count or runner is the run it would have been uninterrupted.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np

from builder.augment.classifier import ScgsClassifier, pooled_features
from builder.augment.generation import (
    CopiedShard,
    GenerationItem,
    GenerationModels,
    ModelHandle,
    ModelLoader,
    ScgsOptions,
    ScgsShardBuilder,
    by_shard,
    cam_maps,
)
from builder.augment.label_check import kept_shares, merge_tallies
from builder.augment.misclassified import (
    PredictedRow,
    TrainPredictions,
    misclassified_from_classifier,
    misclassified_from_predictions,
)
from builder.augment.preflight import check_generation, check_output_place
from builder.augment.sampling import ClusterPlan, SampledImage, sample_misclassified
from builder.augment.source import TRAIN, SourceConfig
from builder.backends.registry import backend_config, make_backend
from builder.backends.torch_threads import stage_threads, threads_setting
from builder.core.config import canonical_json, fingerprint
from builder.core.errors import UsageError
from builder.core.folders import check_writable_folder
from builder.core.manifest import COMPOSITES, Manifest, SplitEntry
from builder.core.names import check_config_name
from builder.core.runner import ShardPlan, plan_shards
from builder.core.stage import RunOptions, Stage, StageOutcome, StageRun, run_stage
from builder.formats import composites
from builder.formats.augmented import AUGMENT_SCHEMA_VERSION

STAGE_NAME = "scgs"


def scgs_config_name(source_config: str, mask: str) -> str:
    """`<source>-scgs` for the CAM masks, `<source>-scgs-<mask>` for a control."""
    return check_config_name(f"{source_config}-scgs" + ("" if mask == "cam" else f"-{mask}"))


@dataclass
class ScgsModels:
    """The models a run uses, loaded by the caller (the CLI) before the stage is made."""

    classifier: ScgsClassifier
    inpainter: Any  # builder.backends.sd_inpaint.SdInpainter
    generation: Any  # builder.backends.sd_inpaint.GenerationSettings
    check_classifier: ScgsClassifier | None = None
    predictions: Sequence[PredictedRow] | None = None  # M from a table instead of the classifier
    predictions_provenance: dict | None = None
    # loads the same models again in a worker that does not inherit them (a GPU worker, a Ray actor)
    loader: ModelLoader | None = None

    def generating(self) -> GenerationModels:
        return GenerationModels(self.classifier, self.inpainter, self.check_classifier)


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
        with stage_threads():  # M and the k-means features decide the plans: the shards' thread count
            self.sampling = self.sample()
            if not self.sampling.items:
                raise UsageError(
                    f"the classifier gets every one of the {self.sampling.predictions.train_samples} train samples "
                    f"of {source.config} right: SCGS has no misclassified image to regenerate"
                )
            self.probe_cam()
        self._settings = json.loads(canonical_json(self.settings_payload()))
        self._plans = self.make_plans()
        # this run's models in this process and, through the loader, in any worker
        self.handle = ModelHandle(
            uuid.uuid4().hex,
            device_kind(str(models.classifier.device)),
            models.generating().provenance(),
            models.loader,
        )

    # --- before any write -------------------------------------------------------------------

    def sample(self) -> Sampling:
        models, options = self.models, self.options
        if models.predictions is not None:
            predictions = misclassified_from_predictions(self.source, models.predictions)
        else:
            predictions = misclassified_from_classifier(self.source, models.classifier, options.batch_size)
        wrong = predictions.misclassified
        samples = self.source.select(by_shard((m.shard, m.key) for m in wrong))
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
        cam_maps(self.cam, self.models.classifier, np.stack([image]), [first.predicted], self.options.batch_size)

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
            **models.generating().provenance(),  # classifier, check_model, generator
            "predictions": models.predictions_provenance,
            "generation": asdict(models.generation),
            "schema_version": composites.SCHEMA_VERSION,
            "augment_schema_version": AUGMENT_SCHEMA_VERSION,
            # every process's intra-op threads, the device type and the generator's dtype: each rounds otherwise
            "torch": threads_setting(
                device_kind(str(models.classifier.device)),
                PRECISION_OF_DTYPE.get(models.inpainter.dtype, models.inpainter.dtype),
            ),
        }

    # --- the Stage interface ----------------------------------------------------------------

    def settings(self) -> dict:
        return self._settings

    def plans(self) -> list[ShardPlan]:
        return self._plans

    def progress_label(self) -> str:
        return f"scgs {self.config}"

    def shard_builder(self) -> ScgsShardBuilder:
        return ScgsShardBuilder(
            self.out_dir,
            self.source,
            self.config,
            self.options,
            self.models.generation,
            self.cam,
            self.cam_layer,
            self.handle,
        )

    def before_run(self, plans: Sequence[ShardPlan], options: RunOptions) -> None:
        self.handle.register(self.models.generating())  # built here and in forked workers: no reload

    def after_run(self) -> None:
        self.handle.release()

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
                "generator": self._settings["generator"],
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


# SD's dtype names (builder.backends.sd_inpaint) as the settings' precision names them
PRECISION_OF_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def device_kind(device: str) -> str:
    """ "cuda" or "cpu": where models on `device` (a --device value or a torch device) run."""
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if device.startswith("cuda") else "cpu"


def visible_gpus() -> list[int]:
    """The indexes of the GPUs this process may use, as CUDA_VISIBLE_DEVICES numbers them for its
    children (a worker is pinned to one by setting it to that index)."""
    import torch

    count = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return list(range(count))
    names = [name.strip() for name in listed.split(",") if name.strip()][:count]
    if not all(name.isdigit() for name in names):
        raise UsageError(
            f"CUDA_VISIBLE_DEVICES={listed} names GPUs by UUID; hsi scgs --workers pins one worker to each GPU "
            "by index: list the GPUs by index (e.g. CUDA_VISIBLE_DEVICES=0,1)"
        )
    return [int(name) for name in names]


def check_run_options(options: RunOptions, device: str) -> RunOptions:
    """The runner options for models on `device`: on the CPU `--workers` processes (or Ray actors);
    on CUDA one process (or Ray actor) per GPU, `--workers` of them. Refused, before any write,
    when they do not fit the machine."""
    options.check()
    if options.runner == "local" and options.workers == 1:
        return options
    if options.runner == "slurm":  # each array task uses the GPUs Slurm gave it (--slurm-gpus-per-task)
        return options
    if device_kind(device) == "cpu":
        return options
    if device not in ("auto", "cuda"):
        raise UsageError(
            f"--device {device} names one GPU, but --workers {options.workers}"
            + (" --runner ray" if options.runner == "ray" else "")
            + " gives each worker a GPU of its own: pass --device cuda (or auto)"
        )
    if options.runner == "ray":
        return replace(options, gpus=tuple(range(options.workers)))  # Ray pins each actor to a GPU of its own
    gpus = visible_gpus()
    if options.workers > len(gpus):
        raise UsageError(
            f"--workers {options.workers} runs one process per GPU, but {len(gpus)} GPU(s) are visible: "
            f"pass --workers {len(gpus)} or fewer (or --device cpu for CPU processes)"
        )
    return replace(options, gpus=tuple(gpus[: options.workers]))


def run_scgs(stage: ScgsStage, options: RunOptions) -> StageRun:
    """Build (or resume) the stage's config, in this process or spread over workers (see
    `check_run_options`); refused before any write when the options do not fit."""
    options = check_run_options(options, str(stage.models.classifier.device))
    if (options.runner in ("ray", "slurm") or options.gpus) and stage.models.loader is None:
        raise UsageError(
            "these SCGS models were handed in without a loader, so only this process and its forked CPU workers "
            "can use them: pass ScgsModels(loader=...) to run on GPUs, on Ray or on Slurm"
        )
    with stage_threads():  # the shards built here, and the workers forked from here, use the run's count
        return run_stage(stage, options)
