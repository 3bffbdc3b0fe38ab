"""Many models in one `hsi eval` run: in this process one after another, in N worker processes at
once (on CUDA one per GPU, each pinned to its own), or on Ray with one actor per model.

A worker loads its model and does everything that needs it (`pipeline.model_work`: plan, skip or
add passes, predictions as the predictions.parquet bytes, the clean and background passes) and
sends that back; it writes nothing. The parent holds the output folder's `OwnedFolder` and is its
only writer: it writes each model's files and reports as the model's work arrives, then rebuilds
the leaderboard, so `_written.json` has one writer and the files are those one process writes.

In a sweep (several models) a model that fails, from loading to its reports, becomes a
`ModelFailure`: its folder gets `failed.json` (its leaderboard row), the others still run, and the
command's exit status says some failed. One model alone fails the run as before.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import sys
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import wait
from typing import Any

from builder.core.errors import EXIT_FAILED, HsiError, UsageError, printable
from builder.core.interrupts import ctrl_c_deferred
from builder.core.owned import OwnedFolder
from builder.core.runner import init_worker
from builder.core.slurm_runner import SlurmOptions
from evaluation.model_formats.models import ModelOptions, load_model, loaded_spec
from evaluation.predicting.verified_shards import remember_proofs
from evaluation.ranking.leaderboard import FAILED_JSON, failure_record

from .eval_folder import FolderRecord, folder_name, spec_folder_name
from .model_setup import options_for_run
from .pipeline import EvalResult, ModelWork, RunSettings, model_work, write_work


@dataclass(frozen=True)
class ModelTask:
    """One model of a sweep, as a worker receives it (picklable: a spec and options, never a module)."""

    position: int
    spec: str
    options: ModelOptions
    source: str
    settings: RunSettings
    out: FolderRecord | None = None  # the parent's record of the output folder when the task was handed out
    proved: tuple = ()  # the data's shards the parent proved (verified_shards.proofs): not hashed again


@dataclass(frozen=True)
class ModelFailure:
    """A model that could not be evaluated: where it failed and why, in one line."""

    spec: str
    name: str  # its model folder
    stage: str  # "load", "evaluate" or "write" (leaderboard.FAILURE_STAGES)
    error: str  # the exception's type
    reason: str
    exit_status: int = EXIT_FAILED


Outcome = ModelWork | ModelFailure


class ModelsFailed(HsiError):
    """Some models of a sweep failed; the others were evaluated and every report was written."""

    exit_status = 3


_TRACEBACK_LAST_LINE = re.compile(r"^(builtins\.)?[\w.]*(Error|Exception): .+")


def one_line(exc: BaseException) -> str:
    """An error as one line: an HsiError's own message; otherwise its type and the line that says
    what went wrong (TorchScript puts the model's own error on the last line of its traceback)."""
    if isinstance(exc, HsiError):
        return printable(" ".join(str(exc).split()))
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if len(lines) > 1 and _TRACEBACK_LAST_LINE.match(lines[-1]):
        return printable(lines[-1].removeprefix("builtins."))
    return printable(f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__)


def error_type(exc: BaseException) -> str:
    """The exception's type as Python names it: `RuntimeError`, `torch.jit.Error`."""
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def failure_of(spec: str, name: str, stage: str, exc: BaseException) -> ModelFailure:
    status = exc.exit_status if isinstance(exc, HsiError) else EXIT_FAILED
    # a forward pass that raised records what the model raised (ForwardFailed keeps its type)
    return ModelFailure(spec, name, stage, getattr(exc, "cause_type", None) or error_type(exc), one_line(exc), status)


def announce_to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def compute_model(
    task: ModelTask,
    announce: Callable[[str], None] = announce_to_stderr,
    owned: OwnedFolder | None = None,
    keep_going: bool = True,
) -> Outcome:
    """Load the task's model and do its work (`pipeline.model_work`). `owned` is the output folder
    when this process holds it (its model folder is then checked before any work); `keep_going`
    turns any failure into a ModelFailure instead of raising it."""
    settings = task.settings
    remember_proofs(task.proved)
    stage, spec = "load", loaded_spec(task.spec, task.options)  # as reports name it: a file by its name only
    name = spec_folder_name(task.spec, task.options, settings.label_space, settings.limit)
    try:
        options = options_for_run(
            task.spec, task.options, task.source, settings.config, settings.split, settings.device
        )
        loaded = load_model(task.spec, options)
        stage, spec, name = "evaluate", loaded.spec, folder_name(loaded, settings.label_space, settings.limit)
        out = owned if owned is not None else task.out
        if out is None:  # a programming error: a worker is always handed the folder's record
            raise ValueError("a model task run outside the output folder's holder needs its FolderRecord")
        return model_work(loaded, task.source, settings, out, announce, name)
    except Exception as exc:  # any failure of one model, a crash or out of memory too, is that model's row
        if not keep_going:
            raise
        if not isinstance(exc, HsiError):  # a crash: its traceback, for whoever debugs the model
            traceback.print_exc(file=sys.stderr)
        failure = failure_of(spec, name, stage, exc)
        announce(f"{spec}: failed while {'loading' if stage == 'load' else 'evaluating'}: {failure.reason}")
        return failure


# --- worker processes --------------------------------------------------------------------------


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them for a child (the parent's own
    list when it has one, so a child never escapes it)."""
    import torch

    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [name.strip() for name in listed.split(",") if name.strip()] if listed is not None else []
    count = torch.cuda.device_count()
    return names[:count] if listed is not None else [str(n) for n in range(count)]


def process_slots(device: str, workers: int) -> list[str | None]:
    """One slot per worker process: the GPU it is pinned to, or None for a CPU process. On CUDA
    (`--device cuda`, or `auto` where CUDA is available) there is one worker per GPU."""
    if device == "cpu":
        return [None] * workers
    import torch

    if not torch.cuda.is_available():
        if device == "auto":
            return [None] * workers
        raise UsageError(f"--device {device}: no CUDA device is available here (use --device cpu or auto)")
    if device != "cuda" and device != "auto":
        raise UsageError(
            f"--model-workers {workers} pins each worker process to a GPU of its own: pass --device cuda or auto, "
            f"not {device}"
        )
    gpus = visible_gpus()
    if workers > len(gpus):
        raise UsageError(
            f"--model-workers {workers}: this machine has {len(gpus)} CUDA device(s), and each worker takes one; "
            f"pass at most {len(gpus)}"
        )
    return list(gpus[:workers])


def _model_process(
    work: Callable[..., Outcome], task: ModelTask, gpu: str | None, start_method: str, connection
) -> None:
    """A worker process: one model, its work sent back to the parent, then exit."""
    init_worker(None)  # Ctrl-C is the parent's; die with the parent
    os.setpgrp()  # a group of its own: stopping the model stops its DataLoader workers with it
    # its DataLoader workers start as in a process of its own (fork on Linux), not spawned as it was
    multiprocessing.set_start_method(start_method, force=True)
    if gpu is not None:  # before CUDA starts in this process: `cuda` then means this GPU
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    connection.send(work(task))
    connection.close()


def _stop(process) -> None:
    """End a worker process and its DataLoader workers (its process group) now."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sent)
        except ProcessLookupError:  # it had not made its group yet, or has ended
            if process.is_alive():
                os.kill(process.pid, sent)
        process.join(timeout=5)
        if not process.is_alive():
            return


def run_in_processes(
    tasks: Sequence[ModelTask],
    slots: Sequence[str | None],
    snapshot: Callable[[], FolderRecord],
    on_outcome: Callable[[ModelTask, Outcome], None],
    work: Callable[..., Outcome] = compute_model,
) -> None:
    """`work(task)` for each task in a fresh spawned process (so a model's memory, and a crash, end
    with it), at most one per slot at once; `on_outcome` runs here as each model's work arrives, in
    finishing order. `work` is a top-level function (the child imports it by name)."""
    context = multiprocessing.get_context("spawn")  # CUDA cannot be used in forked children
    start_method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    queue, free = deque(tasks), list(slots)
    running: dict = {}  # the result pipe -> (process, task, slot)

    def start_next() -> None:
        while queue and free:
            task, slot = queue.popleft(), free.pop(0)
            receiver, sender = context.Pipe(duplex=False)
            handed_out = replace(task, out=snapshot())
            process = context.Process(target=_model_process, args=(work, handed_out, slot, start_method, sender))
            # a Ctrl-C while the child starts waits in the parent, never hits a child not yet ignoring it
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                process.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            sender.close()
            running[receiver] = (process, task, slot)

    try:
        start_next()
        while running:
            arrived = []
            ready_pipes: list[Any] = wait(list(running))
            for ready in ready_pipes:
                process, task, slot = running.pop(ready)
                outcome: Outcome
                try:
                    outcome = ready.recv()
                except (EOFError, OSError):  # the process died: killed for memory, a segfault
                    process.join()
                    outcome = _died(task, f"its worker process ended without a result (exit status {process.exitcode})")
                ready.close()
                process.join()
                free.append(slot)
                arrived.append((task, outcome))
            start_next()  # the next models run while these are written
            for task, outcome in arrived:
                on_outcome(task, outcome)
    finally:
        for process, _, _ in running.values():
            _stop(process)


def _died(task: ModelTask, reason: str) -> ModelFailure:
    name = spec_folder_name(task.spec, task.options, task.settings.label_space, task.settings.limit)
    return ModelFailure(loaded_spec(task.spec, task.options), name, "evaluate", "WorkerDied", reason)


# --- Ray ----------------------------------------------------------------------------------------


class ModelActor:
    """A Ray actor for one model task (its own process: its memory and a crash end with it)."""

    def evaluate(self, task: ModelTask) -> Outcome:
        return compute_model(task)


def ray_slots(ray, device: str, workers: int | None, tasks: int) -> tuple[int, int]:
    """(actors at once, GPUs per actor): one GPU actor per GPU of the cluster (at most `workers`
    when given), or `workers` CPU actors (default 1) on a cluster without GPUs or with --device cpu."""
    gpus = 0 if device == "cpu" else int(ray.cluster_resources().get("GPU", 0))
    if gpus and device not in ("auto", "cuda"):
        raise UsageError(f"--runner ray gives each actor a GPU of its own: pass --device cuda or auto, not {device}")
    size = min(gpus, workers or gpus) if gpus else (workers or 1)
    return max(1, min(size, tasks)), 1 if gpus else 0


def run_on_ray(
    tasks: Sequence[ModelTask],
    address: str | None,
    workers: int | None,
    log_to_driver: bool,
    snapshot: Callable[[], FolderRecord],
    on_outcome: Callable[[ModelTask, Outcome], None],
) -> None:
    """Each task in an actor of its own, as many at once as `ray_slots` allows; `on_outcome` runs here
    as each arrives. A Ray started here (no running one, no `address`) is shut down at the end; an
    actor that dies (killed for memory) is that model's failure."""
    from builder.core.ray_runner import ray_session

    with ray_session(address, log_to_driver) as ray:
        running: dict = {}  # the result reference -> (actor, task)
        try:
            size, gpus = ray_slots(ray, tasks[0].settings.device if tasks else "auto", workers, len(tasks))
            actor_class: Any = ray.remote(num_cpus=1, num_gpus=gpus)(ModelActor)
            queue: deque = deque(tasks)
            while queue or running:
                while queue and len(running) < size:
                    task = queue.popleft()
                    actor = actor_class.remote()
                    running[actor.evaluate.remote(replace(task, out=snapshot()))] = (actor, task)
                done, _ = ray.wait(list(running), num_returns=1)
                actor, task = running.pop(done[0])
                try:
                    outcome = ray.get(done[0])
                except ray.exceptions.RayError as exc:
                    outcome = _died(task, one_line(exc))
                ray.kill(actor)
                on_outcome(task, outcome)
        finally:
            for actor, _ in running.values():  # stopped early (Ctrl-C, a refusal): no actor keeps running
                ray.kill(actor)


def run_on_slurm(
    tasks: Sequence[ModelTask],
    slurm: SlurmOptions,
    snapshot: Callable[[], FolderRecord],
    on_outcome: Callable[[ModelTask, Outcome], None],
) -> None:
    """Every task as one task of one Slurm job array (`--runner slurm`); `on_outcome` runs here as
    each task's outcome arrives. A task that ends without one (cancelled, out of time or memory) is
    that model's failure, with its log."""
    from builder.core.slurm_runner import each_on_slurm

    handed_out = [replace(task, out=snapshot()) for task in tasks]
    for index, ok, value in each_on_slurm(compute_model, handed_out, slurm, job_name="hsi-eval"):
        on_outcome(tasks[index], value if ok else _died(tasks[index], str(value)))


# --- the sweep ----------------------------------------------------------------------------------


@dataclass
class SweepResult:
    results: list[EvalResult | None]  # per task, in task order (None: the model failed)
    failures: list[ModelFailure]  # in finishing order


def run_sweep(
    tasks: Sequence[ModelTask],
    owned: OwnedFolder,
    data: dict,
    *,
    runner: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    slurm: SlurmOptions | None = None,
    entries: Sequence | None = None,
    announce: Callable[[str], None] = announce_to_stderr,
    on_result: Callable[[str, EvalResult], None] = lambda spec, result: None,
    after_each: Callable[[], None] = lambda: None,
    work: Callable[..., Outcome] = compute_model,
    worker_logs: bool = True,
) -> SweepResult:
    """Evaluate every task into `owned`, with the runner and worker count given (local: `workers`
    processes at once, 1 meaning here; ray: actors). `data` is the data revision (leaderboard.DATA_KEYS
    and limit) a failure is recorded against. Each model's files are written as its work arrives,
    then `after_each` runs (the leaderboard is rebuilt there). With one task a failure is raised.
    `work` does one task (compute_model's arguments; on Ray always compute_model); `worker_logs`
    shows the Ray actors' own lines here."""
    keep_going = len(tasks) > 1
    results: list[EvalResult | None] = [None] * len(tasks)
    failures: list[ModelFailure] = []

    def finish(task: ModelTask, outcome: Outcome) -> None:
        # a model's files, its line and the leaderboard rebuilt are done together: a Ctrl-C waits for them
        with ctrl_c_deferred():
            _finish(task, outcome)

    def _finish(task: ModelTask, outcome: Outcome) -> None:
        if isinstance(outcome, ModelWork):
            entry = entries[task.position] if entries is not None else None
            try:
                results[task.position] = result = write_work(outcome, owned, task.settings, announce, entry)
            except Exception as exc:  # a folder refused on writing: this model's failure, the sweep goes on
                if not keep_going:
                    raise
                outcome = failure_of(outcome.spec, outcome.name, "write", exc)
                announce(f"{outcome.spec}: its files could not be written: {outcome.reason}")
            else:
                on_result(outcome.spec, result)
        if isinstance(outcome, ModelFailure):
            if not keep_going:
                raise ModelFailed(outcome)
            failures.append(outcome)
            _record_failure(owned, outcome, data, announce)
        after_each()

    def snapshot() -> FolderRecord:
        return FolderRecord.of(owned)

    def dispatch(batch: Sequence[ModelTask], on_outcome: Callable[[ModelTask, Outcome], None]) -> None:
        if runner == "ray":
            run_on_ray(batch, ray_address, workers, worker_logs, snapshot, on_outcome)
        elif runner == "slurm":
            run_on_slurm(batch, slurm or SlurmOptions(), snapshot, on_outcome)
        else:
            run_in_processes(batch, process_slots(batch[0].settings.device, len(batch)), snapshot, on_outcome, work)

    if len(tasks) == 1 and (workers or 1) > 1:  # one model, its data split over the workers
        finish(tasks[0], in_parts(tasks[0], workers or 1, dispatch, announce))
    elif runner == "ray":
        run_on_ray(tasks, ray_address, workers, worker_logs, snapshot, finish)
    elif runner == "slurm":
        run_on_slurm(tasks, slurm or SlurmOptions(), snapshot, finish)
    elif (workers or 1) > 1 and len(tasks) > 1:
        slots = process_slots(tasks[0].settings.device, min(workers or 1, len(tasks)))
        run_in_processes(tasks, slots, snapshot, finish, work)
    else:
        for task in tasks:
            finish(task, work(task, announce, owned, keep_going))
    return SweepResult(results, failures)


def in_parts(
    task: ModelTask,
    count: int,
    dispatch: Callable[[Sequence[ModelTask], Callable[[ModelTask, Outcome], None]], None],
    announce: Callable[[str], None] = announce_to_stderr,
) -> Outcome:
    """One model over `count` workers, each predicting one part of the data (its shards, as
    `EvalBatches(rank, world_size)` deals them: disjoint, together every sample once); the parts' rows
    are merged into the predictions one process writes (rows by key, errors by shard), timed by the
    slowest part. The clean-photo and background passes need the whole model run: refused here."""
    from .pipeline import requested_passes

    if requested_passes(task.settings):
        raise UsageError(
            "--clean and --parts run in one process: evaluate the model with --model-workers first, then run "
            "hsi eval again with --clean/--parts and no --model-workers (only those passes are added)"
        )
    parts = [
        replace(task, settings=replace(task.settings, part=(index, count), progress=False)) for index in range(count)
    ]
    announce(f"{loaded_spec(task.spec, task.options)}: its data in {count} parts, one per worker")
    outcomes: dict[int, Outcome] = {}
    dispatch(parts, lambda part, outcome: outcomes.__setitem__(part.settings.part[0], outcome))
    failed = [outcome for outcome in outcomes.values() if isinstance(outcome, ModelFailure)]
    if failed:
        return failed[0]
    works = [outcomes[index] for index in range(count)]
    if any(work.part_run is None for work in works):  # skipped, or passes only: the folder's state decides
        return works[0]
    return merged_work(works)


def merged_work(works: list[ModelWork]) -> ModelWork:
    """The parts' prediction runs as the one ModelWork of the whole model run."""
    import tempfile
    from pathlib import Path

    from evaluation.predicting.predictions import PREDICTIONS_NAME, write_predictions

    runs = [work.part_run for work in works]
    rows = sorted((row for run in runs for row in run.rows), key=lambda row: row["key"])
    errors = sorted((e for run in runs for e in run.errors), key=lambda e: (e["shard"], e["key"] or ""))
    seconds = max(run.seconds for run in runs)
    metadata = dict(runs[0].metadata)
    halved = [run.metadata["run"]["batch_halved_to"] for run in runs]
    metadata["run"] = {
        **metadata["run"],
        "batch_halved_to": min((h for h in halved if h is not None), default=None),
        "seconds": round(seconds, 3),
        "images_per_second": round(len(rows) / seconds, 2) if seconds else None,
    }
    with tempfile.TemporaryDirectory(prefix="hsi-eval-") as tmp:
        written = write_predictions(Path(tmp) / PREDICTIONS_NAME, rows, errors, metadata)
        return replace(works[0], predictions=written.read_bytes(), part_run=None)


class ModelFailed(HsiError):
    """The one model of a run failed in a worker: its own message and exit status."""

    def __init__(self, failure: ModelFailure) -> None:
        super().__init__(f"{failure.spec}: {failure.reason}")
        self.exit_status = failure.exit_status


def _record_failure(owned: OwnedFolder, failure: ModelFailure, data: dict, announce: Callable[[str], None]) -> None:
    """`failed.json` in the model's folder, through `owned` (the leaderboard's row for it)."""
    record = failure_record(failure.spec, data, failure.stage, failure.error, failure.reason)
    try:
        owned.write_json(f"{failure.name}/{FAILED_JSON}", record)
    except HsiError as exc:  # a folder that is not ours: the failure is still counted and said
        announce(f"{failure.spec}: its failure is not recorded in {failure.name}/{FAILED_JSON}: {one_line(exc)}")


def sweep_tasks(
    specs: Sequence[tuple[str, ModelOptions]], source, settings: RunSettings, parallel: bool, proved: tuple = ()
) -> list[ModelTask]:
    """The tasks of `specs` (spec, options); a parallel sweep shows no per-model progress bars (they
    would overwrite each other), only each model's summary as it finishes. `proved`: the shards the
    parent proved before any model (verified_shards.proofs)."""
    if parallel:
        settings = replace(settings, progress=False)
    return [
        ModelTask(n, spec, options, str(source), settings, proved=proved) for n, (spec, options) in enumerate(specs)
    ]


__all__ = [
    "ModelTask",
    "ModelFailure",
    "ModelsFailed",
    "ModelFailed",
    "SweepResult",
    "compute_model",
    "run_sweep",
    "sweep_tasks",
]
