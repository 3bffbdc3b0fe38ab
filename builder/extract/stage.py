"""`hsi extract` as a `Stage`: list the sources and load the backends when the stage is made (so a
missing checkpoint or a bad root leaves no file behind), then `run_stage` builds the missing parts
shards and writes errors.jsonl and, last, the manifest.

A parts folder can hold several splits (extract val, then train, into the same --out); each split
has its own settings entry and fingerprint, and the manifest lists every finished split.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from builder.backends.registry import entry
from builder.backends.torch_base import (
    check_device_name,
    check_gpu_indexes,
    device_type_named,
    resolve_precision,
    run_device_type,
)
from builder.backends.torch_threads import runs_torch, stage_threads, threads_setting
from builder.core.config import SettingsMismatch, canonical_json, drop_settings, fingerprint, load_settings
from builder.core.errors import RunFailed, UsageError
from builder.core.folders import check_writable_folder
from builder.core.manifest import ERRORS_NAME, PARTS, ErrorCounts, Manifest, SplitEntry
from builder.core.records import Issue, count_by_reason
from builder.core.runner import STATE_DIR, ShardPlan, load_finished, plan_shards
from builder.core.shard_partial import drop_partials
from builder.core.stage import RunOptions, Stage, StageOutcome, StageRun, run_stage, write_errors
from builder.extract.shard_builder import (
    ExtractConfig,
    ExtractShardBuilder,
    describe_backends,
    listing_digest,
    load_backends,
    unload_backends,
)
from builder.extract.sources import SourceListing, load_sources
from builder.formats.fill_scores import summarise_fill_scores
from builder.formats.parts import PARTS_SCHEMA_VERSION, iter_parts_json

PARTS_DIR_NAME = "parts"


@dataclass
class ExtractSummary:
    parts_dir: Path
    split: str
    images_listed: int
    samples: int
    issues_by_reason: dict[str, int]
    seconds: float
    shards_built: int
    shards_reused: int
    already_complete: bool = False
    notes: list[str] = field(default_factory=list)
    fill_scores: dict | None = None  # the split's summary (builder.formats.fill_scores)

    def format(self) -> str:
        lines = [f"parts: {self.parts_dir} (split {self.split})"]
        if self.already_complete:
            lines.append("  already complete with these settings: nothing to do (use --overwrite to rebuild)")
        lines.append(
            f"  images listed {self.images_listed}, parts written {self.samples}, "
            f"shards built {self.shards_built}, reused {self.shards_reused}, {self.seconds:.1f} s"
        )
        scores = self.fill_scores or {}
        if scores.get("score"):
            lines.append(
                f"  fill scores of {scores['scored']} parts: median score {scores['score']['median']:.2f}, "
                f"texture {scores['texture']['median']:.2f}, seam {scores['seam']['median']:.2f}, "
                f"step {scores['step']['median']:.2f}; {scores['share_below_poor_score']:.0%} under "
                f"{scores['poor_score']} (hsi validate --parts draws the worst)"
            )
        if self.issues_by_reason:
            lines.append("  issues by reason (see errors.jsonl):")
            lines += [f"    {reason:<24} {count}" for reason, count in self.issues_by_reason.items()]
        return "\n".join(lines)


class ExtractStage(Stage):
    name: ClassVar[str] = "extract"
    holds: ClassVar[str] = PARTS
    errors_per_split: ClassVar[bool] = True

    def __init__(self, listing: SourceListing, out: Path, config: ExtractConfig) -> None:
        self.listing = listing
        self.config = config
        self.out_dir = Path(out) / PARTS_DIR_NAME
        self.settings_key = config.split
        # Backends load before anything is written: a missing checkpoint leaves no partial output.
        masker, inpainter = load_backends(config)
        self.backends = describe_backends(masker, inpainter)
        settings = config.output_settings(self.backends, listing_digest(listing.records))
        self.uses_torch = runs_torch(masker, inpainter)
        if self.uses_torch:  # SAM and LaMa round their sums by the thread count, device type and precision
            device_type = device_type_named(config.device)
            settings["torch"] = threads_setting(device_type, resolve_precision(config.precision, device_type))
        self._settings = json_ready(settings)
        self._threads = ExitStack()
        self._plans = plan_shards(config.split, listing.records, config.shard_size)

    @classmethod
    def from_source(
        cls,
        source: Path | str,
        out: Path,
        config: ExtractConfig,
        boxes: Path | None = None,
        announce: Callable[[str], None] = print,
    ) -> ExtractStage:
        return cls(load_sources(source, config.split, boxes, announce=announce), out, config)  # a URL stays one

    @property
    def split(self) -> str:
        return self.config.split

    @property
    def splits(self) -> tuple[str, ...]:
        return (self.split,)

    def settings(self) -> dict:
        return self._settings

    def plans(self) -> list[ShardPlan]:
        return self._plans

    def shard_builder(self) -> ExtractShardBuilder:
        return ExtractShardBuilder(self.config, str(self.out_dir), fingerprint(self._settings))

    def default_split(self) -> str:
        return self.split

    def after_run(self) -> None:
        self._threads.close()
        for plan in self._plans:  # a finished shard's kept images are in its tar now
            if load_finished(self.out_dir, plan) is not None:
                drop_partials(self.out_dir, plan.filename)

    def planning_issues(self) -> list[Issue]:
        return list(self.listing.issues)

    def progress_label(self) -> str:
        return f"extract {self.split}"

    def is_complete(self, previous: Manifest | None) -> bool:
        done = previous.splits.get(self.split) if previous else None
        return done is not None and done.fingerprint == fingerprint(self._settings)

    def claim(self, overwrite: bool) -> None:
        check_writable_folder(self.out_dir)  # never write into (or delete from) a folder of someone else's
        if not overwrite:
            self.check_sources_unchanged()
        if overwrite and self.out_dir.is_dir():
            self.drop_split()
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def check_sources_unchanged(self) -> None:
        """A split extracted from other sources (an image added, removed or repaired, a box changed)
        cannot be resumed: say so in words rather than as a changed hash."""
        saved = (load_settings(self.out_dir) or {}).get(self.split) if self.out_dir.is_dir() else None
        if not saved or saved.get("sources") == self._settings["sources"]:
            return

        def others(settings: dict) -> dict:
            return {k: v for k, v in settings.items() if k != "sources"}

        if others(saved) == others(self._settings):
            raise SettingsMismatch(
                f"the sources of split {self.split!r} changed since {self.out_dir} was extracted: an image file was "
                "added, removed or replaced (e.g. a repaired download, which changes its size), or a box changed. "
                "Run the same command with --overwrite to rebuild the split from the current files."
            )

    def drop_split(self) -> None:
        """--overwrite: forget this split (its shards, state and kept images, settings, manifest entry, error rows)."""
        split, parts_dir = self.split, self.out_dir
        ours = re.compile(rf"^{re.escape(split)}-\d{{5}}\.tar(\.json|\.\d{{6,}}\.partial)?$")
        for folder in (parts_dir, parts_dir / STATE_DIR):
            for path in sorted(folder.iterdir()) if folder.is_dir() else []:
                if ours.match(path.name) and path.is_file():
                    path.unlink()
        drop_settings(parts_dir, split)
        manifest = Manifest.read_if_present(parts_dir)
        if manifest is not None and split in manifest.splits:
            manifest.splits.pop(split)
            (manifest.settings or {}).pop(split, None)
            manifest.write(parts_dir)
        write_errors(parts_dir, [], replaced_splits={split})

    def before_run(self, plans: Sequence[ShardPlan], options: RunOptions) -> None:
        if options.runner in ("ray", "slurm") or options.gpus:
            unload_backends()  # the models run in other processes; free this one's copy (and its GPU memory)
        if self.uses_torch:  # the shards built here, and the workers forked from here, use the run's count
            self._threads.enter_context(stage_threads())

    def manifest(self, outcome: StageOutcome) -> Manifest:
        results, previous = outcome.results, outcome.previous
        self.check_skipped(sum(r.stats.num_samples for r in results), outcome.issues)
        entry = SplitEntry(
            self.split,
            [r.stats for r in results],
            fingerprint=fingerprint(self._settings),
            images_listed=self.listing.images_found,
            errors=outcome.errors,
            fill_scores=summarise_fill_scores(
                meta.get("fill_scores") for r in results for meta in iter_parts_json(self.out_dir / r.stats.filename)
            ),
        )
        splits = dict(previous.splits) if previous else {}
        settings = dict(previous.settings or {}) if previous else {}
        splits[self.split], settings[self.split] = entry, self._settings
        totals: dict[str, int] = {}
        for split_entry in splits.values():
            for reason, count in (split_entry.errors.by_reason if split_entry.errors else {}).items():
                totals[reason] = totals.get(reason, 0) + count
        return Manifest(
            stage=self.name,
            splits=splits,
            settings=settings,
            backends=self.backends,
            schema_version=PARTS_SCHEMA_VERSION,
            fingerprint=fingerprint({s: e.fingerprint for s, e in sorted(splits.items())}),
            errors=ErrorCounts.of(totals),
        )

    def check_skipped(self, samples: int, issues: Sequence[Issue]) -> None:
        """Refuse to finish a split that lost more than --max-skip-fraction of its listed images (a
        wrong annotation file, another split's boxes): the shards and errors.jsonl are written, so the
        run can be inspected, but no manifest, so nothing downstream takes the split as finished."""
        listed = self.listing.images_found
        skipped = listed - samples
        if not listed or skipped <= self.config.max_skip_fraction * listed:
            return
        reasons = count_by_reason(issue for issue in issues if issue.action == "skipped")
        top = ", ".join(f"{reason} {count}" for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
        raise TooManySkipped(
            f"{skipped} of the {listed} images listed for split {self.split!r} were skipped "
            f"({skipped / listed:.0%}, more than --max-skip-fraction {self.config.max_skip_fraction:g}); "
            f"top reasons: {top or 'none recorded'}. Check --boxes and --split (see {self.out_dir / ERRORS_NAME}). "
            "The shards and errors.jsonl are kept, the manifest is not written: fix the inputs and rerun with "
            "--overwrite, or rerun with a higher --max-skip-fraction to accept (finished shards are reused)."
        )


class TooManySkipped(RunFailed):
    """More of the listed images were skipped than --max-skip-fraction allows."""


def json_ready(settings: dict) -> dict:
    """Settings as they read back from JSON (tuples as lists), so saved and new compare equal."""
    return json.loads(canonical_json(settings))


def run_extract(
    source: Path | str,
    out: Path,
    config: ExtractConfig,
    boxes: Path | None = None,
    *,
    options: RunOptions = RunOptions(),
    announce: Callable[[str], None] = print,
) -> ExtractSummary:
    options.check()  # before listing or loading anything: a missing runner costs nothing
    with ExitStack() as ray_open:
        cluster_gpus = None
        if options.runner == "ray" and uses_models(config):
            from builder.core.ray_runner import ray_session

            # one Ray for the whole run: its GPU count decides the device, then the same Ray runs the shards
            ray = ray_open.enter_context(ray_session(options.ray_address, options.progress))
            cluster_gpus = int(ray.cluster_resources().get("GPU", 0))
        config, options = place_models(config, options, cluster_gpus)
        stage = ExtractStage.from_source(source, out, config, boxes, announce=announce)
        run = run_stage(stage, options)
    return summarise(stage, run)


def uses_models(config: ExtractConfig) -> bool:
    """Whether the masker or inpainter runs a torch model (sam, lama)."""
    backends = (("masker", config.masker), ("inpainter", config.inpainter))
    return any("torch" in entry(kind, name).requires for kind, name in backends)


def place_models(
    config: ExtractConfig, options: RunOptions, cluster_gpus: int | None = None
) -> tuple[ExtractConfig, RunOptions]:
    """Where the models run and in what math, decided before any model loads or file is written:
    a CUDA device or `--gpus` index this machine (or the Ray cluster: `cluster_gpus`) lacks is
    refused in one line; `auto` becomes the device type it finds and `--precision` its default
    there, so every worker runs what the settings record. On Ray with CUDA, one actor per cluster
    GPU (at most `--workers` when given), each holding one."""
    check_device_name(config.device)
    if options.runner == "ray" and options.gpus:
        raise UsageError(
            "--gpus picks GPUs of this machine; --runner ray gives every GPU of the cluster an actor of its own: "
            "leave --gpus out (--workers N caps the actors)"
        )
    check_gpu_indexes(options.gpus)
    if not uses_models(config):
        if config.precision is not None:
            raise UsageError("--precision applies to the model backends (--masker sam, --inpainter lama)")
        if config.device not in ("auto", "cpu"):
            run_device_type(config.device)  # a CUDA device asked for must exist, models or not
        return config, options
    if options.runner == "ray" and config.device.startswith("cuda:"):
        raise UsageError(
            f"--device {config.device} names one GPU, but Ray gives each actor its own: pass --device cuda"
        )
    device_type = run_device_type(config.device, cluster_gpus if options.runner == "ray" else None)
    if options.runner == "ray" and device_type == "cuda":
        actors = min(cluster_gpus or 0, options.workers) if options.workers > 1 else cluster_gpus or 0
        options = replace(options, gpus=tuple(range(actors)))  # the runner starts one GPU actor per entry
    device = device_type if config.device == "auto" else config.device
    return replace(config, device=device, precision=resolve_precision(config.precision, device_type)), options


def summarise(stage: ExtractStage, run: StageRun) -> ExtractSummary:
    entry = run.manifest.split(stage.split)
    by_reason = dict(entry.errors.by_reason) if entry.errors else {}
    return ExtractSummary(
        stage.out_dir,
        stage.split,
        entry.images_listed or 0,
        entry.num_samples,
        by_reason,
        run.seconds,
        run.shards_built,
        run.shards_reused,
        already_complete=run.already_complete,
        fill_scores=entry.fill_scores,
    )
