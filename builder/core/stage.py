"""The stage template: every stage that writes shards (extract, compose, and the later ones) is a
`Stage`, and one `run_stage` does what they all share, in this order:

1. check the run options (a missing runner is refused here, before anything is written);
2. return at once when the folder already holds this exact output;
3. claim the folder (`--overwrite` only ever replaces what this stage wrote there);
4. check the saved settings against the new ones, then save them;
5. remove this toolkit's own stale temporaries;
6. build the shards that are not finished yet, locally, on Ray or as a Slurm job array (an array
   still running from an earlier run is waited for first, or refused: builder.core.slurm_runner);
7. write `errors.jsonl` (every issue a row with its split), then the typed manifest, last.

A stage supplies its settings, its shard plans, its shard builder and its manifest; everything a
stage needs to refuse a run (sources, backends, specs) is resolved when the stage object is made,
so a refusal never leaves a file behind.
"""

from __future__ import annotations

import errno
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from builder.core.config import check_settings, save_settings
from builder.core.errors import HsiError, UsageError
from builder.core.folders import prepare_output, remove_stale_temporaries
from builder.core.locks import exclusive_folder
from builder.core.manifest import ERRORS_NAME, ErrorCounts, Manifest, register_stage_output, write_jsonl_atomic
from builder.core.object_store import StoreMirror
from builder.core.records import Issue, count_by_reason
from builder.core.runner import ShardPlan, ShardResult, Stopwatch, run_shards
from builder.core.slurm_runner import JobSubmitted, SlurmOptions, settle_recorded_array

RUNNERS = ("local", "ray", "slurm")


@dataclass(frozen=True)
class RunOptions:
    """How to run a stage; none of these change a byte of the output."""

    workers: int = 1
    runner: str = "local"
    ray_address: str | None = None
    gpus: tuple[int, ...] = ()
    progress: bool = True
    overwrite: bool = False
    slurm: SlurmOptions = SlurmOptions()  # --runner slurm's flags (partition, time, --detach, ...)
    # --out on an object store: the stage writes its staging folder, pushed there (manifest last)
    mirror: StoreMirror | None = None

    def check(self) -> None:
        if self.runner not in RUNNERS:
            raise UsageError(f"--runner must be one of {', '.join(RUNNERS)}, got {self.runner!r}")
        if self.workers < 1:
            raise UsageError(f"--workers must be at least 1, got {self.workers}")
        if self.runner == "ray":
            from builder.core.ray_runner import check_ray_available

            check_ray_available()
        if self.runner == "slurm":
            self.check_slurm()

    def check_slurm(self) -> None:
        from builder.core.slurm_runner import check_slurm_available

        if self.gpus:
            raise UsageError("--gpus names this machine's GPUs; with --runner slurm ask for --slurm-gpus-per-task")
        if self.workers > 1:
            raise UsageError(
                "--workers is for local processes; with --runner slurm each array task builds its own "
                "shards (--slurm-array-parallelism caps how many run at once)"
            )
        check_slurm_available(self.slurm)


@dataclass
class StageRun:
    """What one `run_stage` did."""

    manifest: Manifest
    issues: list[Issue] = field(default_factory=list)
    shards_built: int = 0
    shards_reused: int = 0
    seconds: float = 0.0
    already_complete: bool = False


@dataclass(frozen=True)
class StageOutcome:
    """What a run built, as `Stage.manifest` gets it: the plans and their results (in plan order),
    every issue of the run with its split, and the manifest the folder held before (None: none)."""

    plans: Sequence[ShardPlan]
    results: Sequence[ShardResult]
    issues: Sequence[Issue]
    previous: Manifest | None

    def results_of(self, split: str) -> list[ShardResult]:
        """The results of `split`'s shards, in plan order."""
        return [result for plan, result in zip(self.plans, self.results) if plan.split == split]

    @property
    def errors(self) -> ErrorCounts:
        """The run's issues, counted by reason."""
        return ErrorCounts(len(self.issues), count_by_reason(self.issues))


class Stage(ABC):
    """One stage's part of a run; see the module docstring for the order `run_stage` calls these."""

    name: ClassVar[str]
    holds: ClassVar[str]  # PARTS or COMPOSITES (builder.core.manifest): what its folder holds
    out_dir: Path
    # None: the folder's settings file belongs to this stage alone; a key: the stage owns one entry
    # of it (extract keeps one entry per split, so val and train can share a parts folder).
    settings_key: str | None = None
    # False: the stage owns the whole folder and rewrites errors.jsonl; True: it owns only the rows
    # of the splits it writes (extract, whose folder gathers several splits' runs).
    errors_per_split: ClassVar[bool] = False

    @abstractmethod
    def settings(self) -> dict:
        """Everything that decides the output bytes; a folder made with other settings is refused."""

    @abstractmethod
    def plans(self) -> list[ShardPlan]:
        """The shards to build, in output order."""

    @abstractmethod
    def shard_builder(self) -> Callable[[ShardPlan], ShardResult]:
        """A picklable callable that builds one shard (workers and Ray actors run it)."""

    @abstractmethod
    def manifest(self, outcome: StageOutcome) -> Manifest:
        """The manifest of the finished folder, from what the run built."""

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits this run writes: their rows in errors.jsonl are replaced, the others kept."""
        return tuple(dict.fromkeys(plan.split for plan in self.plans()))

    def default_split(self) -> str | None:
        """The split an issue belongs to when the code that found it did not say."""
        return None

    def planning_issues(self) -> list[Issue]:
        """Issues found before any shard was built (listing, indexing)."""
        return []

    def is_complete(self, previous: Manifest | None) -> bool:
        return False

    def claim(self, overwrite: bool) -> None:
        """Make the folder ready; with `overwrite`, drop what this stage wrote there before. By
        default the stage owns the whole folder: never one of someone else's, and --overwrite
        empties it (only of what this toolkit wrote)."""
        prepare_output(self.out_dir, overwrite)

    def before_run(self, plans: Sequence[ShardPlan], options: RunOptions) -> None:  # noqa: B027 - optional hook
        """Work shared by all shards (caches, files beside the shards); runs after the settings are saved."""

    def after_run(self) -> None:  # noqa: B027 - optional hook
        """Clean-up of `before_run`, also after a failure."""

    progress_unit: ClassVar[str] = "img"

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and "holds" in cls.__dict__:
            register_stage_output(cls.name, cls.holds)

    def progress_label(self) -> str:
        return self.name

    def progress_total(self, plan: ShardPlan) -> int:
        """What the bar counts of one plan, in `progress_unit`s (as its builder reports them)."""
        return len(plan.items)


def run_stage(stage: Stage, options: RunOptions) -> StageRun:
    options.check()
    if options.mirror is not None:  # the store's lock, its files staged here, the result pushed back
        with options.mirror.mirrored(stage.out_dir):
            return _run_here(stage, options)
    return _run_here(stage, options)


def _run_here(stage: Stage, options: RunOptions) -> StageRun:
    try:
        with exclusive_folder(stage.out_dir):
            return _run_locked(stage, options)
    except OSError as exc:
        if exc.errno in UNWRITABLE:
            raise OutputUnwritable(
                f"cannot write {stage.out_dir}: {exc.strerror} ({exc.filename}); free space or fix the permissions "
                "(or choose another --out), then run the same command to resume: finished shards are kept"
            ) from None
        raise


def _run_locked(stage: Stage, options: RunOptions) -> StageRun:
    clock = Stopwatch()
    out_dir = stage.out_dir
    # an earlier --runner slurm array still writing here: collected by a slurm run, else refused
    settle_recorded_array(
        out_dir,
        collect=options.runner == "slurm" and not options.overwrite,
        options=options.slurm,
        progress=options.progress,
    )
    previous = Manifest.read_if_present(out_dir) if out_dir.is_dir() and not options.overwrite else None
    if previous is not None and stage.is_complete(previous):
        reused = sum(len(previous.split(s).shards) for s in stage.splits if s in previous.splits)
        return StageRun(previous, already_complete=True, shards_reused=reused, seconds=clock.seconds)
    stage.claim(options.overwrite)
    check_settings(out_dir, stage.settings(), key=stage.settings_key)
    save_settings(out_dir, stage.settings(), key=stage.settings_key)
    remove_stale_temporaries(out_dir)

    plans = stage.plans()
    stage.before_run(plans, options)
    try:
        results, reused = run_plans(
            plans,
            stage.shard_builder(),
            out_dir,
            options,
            stage.progress_label(),
            stage.progress_unit,
            stage.progress_total,
        )
    except JobSubmitted:
        raise  # --detach: the array runs on, and what before_run prepared for it stays until it is collected
    except BaseException:
        stage.after_run()
        raise
    stage.after_run()

    issues = located_issues(stage, plans, results)
    write_errors(out_dir, issues, replaced_splits=set(stage.splits) if stage.errors_per_split else None)
    manifest = stage.manifest(StageOutcome(plans, results, issues, Manifest.read_if_present(out_dir)))
    manifest.write(out_dir)
    return StageRun(manifest, issues, len(plans) - reused, reused, clock.seconds)


class OutputUnwritable(HsiError):
    """The output folder cannot be written (disk full, read-only, no permission)."""


UNWRITABLE = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT}


def located_issues(stage: Stage, plans: Sequence[ShardPlan], results: Sequence[ShardResult]) -> list[Issue]:
    """Every issue of the run, each with the split (and shard) it was found in."""
    default = stage.default_split()
    issues = [
        issue if issue.split or default is None else replace(issue, split=default) for issue in stage.planning_issues()
    ]
    for plan, result in zip(plans, results):
        issues += [
            replace(issue, split=issue.split or plan.split, shard=issue.shard or plan.filename)
            for issue in result.issues
        ]
    return sorted(issues, key=lambda issue: (issue.split or "", *issue.sort_key))


def run_plans(
    plans: Sequence[ShardPlan],
    build: Callable[[ShardPlan], ShardResult],
    out_dir: Path,
    options: RunOptions,
    desc: str,
    unit: str,
    work: Callable[[ShardPlan], int] | None = None,
) -> tuple[list[ShardResult], int]:
    """Build the unfinished shards with the runner the options name; results come in plan order."""
    if options.runner == "slurm":
        from builder.core.slurm_runner import run_shards_slurm

        job_name = "hsi-" + "-".join(desc.split())
        return run_shards_slurm(plans, build, out_dir, options.slurm, job_name=job_name, progress=options.progress)
    if options.runner == "ray":
        from builder.core.ray_runner import run_shards_ray

        return run_shards_ray(
            plans,
            build,
            out_dir,
            address=options.ray_address,
            num_gpus=len(options.gpus),
            workers=options.workers if options.workers > 1 else None,  # the default 1: every CPU of the cluster
            progress=options.progress,
            store_url=options.mirror.store_of(out_dir).url if options.mirror else None,
        )
    return run_shards(
        plans,
        build,
        out_dir,
        workers=options.workers,
        desc=desc,
        unit=unit,
        progress=options.progress,
        worker_devices=[str(g) for g in options.gpus] or None,
        work=work,
    )


def read_error_rows(out_dir: Path) -> list[dict]:
    path = out_dir / ERRORS_NAME
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]


def write_errors(out_dir: Path, issues: Sequence[Issue], replaced_splits: set[str] | None) -> None:
    """errors.jsonl: this run's issues, plus (with `replaced_splits`) the rows of the splits this run
    did not touch; None replaces the whole file."""
    old_rows = read_error_rows(out_dir) if replaced_splits is not None else []
    kept = [row for row in old_rows if row.get("split") not in (replaced_splits or set())]
    rows = kept + [issue.to_json() for issue in issues]
    rows.sort(key=lambda r: (r.get("split") or "", r["image_id"], r["reason"], r["detail"]))
    write_jsonl_atomic(out_dir / ERRORS_NAME, rows)
