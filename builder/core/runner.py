"""The local runner: shards are the unit of work and of resume.

A stage plans its work as `ShardPlan`s and provides a function that builds one shard (writes the
tar atomically and returns its stats and issues). The runner skips shards already finished, runs the
rest in worker processes, shows progress, and hands the results back in shard order, so the output
is the same whatever the worker count.

A builder may also keep a shard's items as they finish (`ItemBuilder`: extract keeps each image,
builder.core.shard_partial): then the bar counts the items kept by an interrupted run as done, and a
run with fewer shards to build than workers splits the shards' missing items among the workers
before each shard is assembled, so a small run uses every worker.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tqdm import tqdm

from builder.core.errors import HsiError
from builder.core.manifest import ShardStats
from builder.core.records import Issue
from builder.core.shards import shard_filename

STATE_DIR = "_state"


@dataclass(frozen=True)
class ShardPlan:
    split: str
    index: int
    items: tuple

    @property
    def filename(self) -> str:
        return shard_filename(self.split, self.index)


@dataclass
class ShardResult:
    stats: ShardStats
    issues: list[Issue] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "stats": self.stats.to_json(),
            "issues": [i.to_json() for i in self.issues],
            "counts": self.counts,
        }

    @classmethod
    def from_json(cls, data: dict) -> ShardResult:
        return cls(
            ShardStats(**data["stats"]),
            [Issue(**row) for row in data["issues"]],
            data.get("counts", {}),
        )


def plan_shards(split: str, items: Sequence, shard_size: int) -> list[ShardPlan]:
    if shard_size < 1:
        raise ValueError("shard size must be at least 1")
    return [
        ShardPlan(split, n, tuple(items[start : start + shard_size]))
        for n, start in enumerate(range(0, len(items), shard_size))
    ]


def _state_path(out_dir: Path, plan: ShardPlan) -> Path:
    return out_dir / STATE_DIR / f"{plan.filename}.json"


def read_state_record(path: Path, shard: str) -> ShardResult | None:
    """The record at `path` when it is a state record of ours for `shard` (a plain file whose JSON
    is a ShardResult of that shard, with the types we write), else None."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        result = ShardResult.from_json(json.loads(path.read_text("utf-8")))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    stats = result.stats
    plain = (
        stats.filename == shard
        and all(isinstance(n, int) and not isinstance(n, bool) for n in (stats.num_samples, stats.bytes))
        and isinstance(stats.sha256, str)
        and isinstance(result.counts, dict)
    )
    return result if plain else None


def load_finished(out_dir: Path, plan: ShardPlan) -> ShardResult | None:
    """A shard is finished when both its tar and its state record exist and agree in size."""
    return load_finished_shard(out_dir, plan.filename)


def load_finished_shard(out_dir: Path, filename: str) -> ShardResult | None:
    """`load_finished` by the shard's file name."""
    state, tar = out_dir / STATE_DIR / f"{filename}.json", out_dir / filename
    if not tar.is_file():
        return None
    result = read_state_record(state, filename)
    return result if result is not None and result.stats.bytes == tar.stat().st_size else None


def record_finished(out_dir: Path, plan: ShardPlan, result: ShardResult) -> None:
    state = _state_path(out_dir, plan)
    state.parent.mkdir(parents=True, exist_ok=True)
    tmp = state.with_name(f"{state.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result.to_json(), sort_keys=True), "utf-8")
    os.replace(tmp, state)


# --- worker-side progress -------------------------------------------------------------------

_progress_counter = None
# the bar of a run in this very process: report_progress moves it as each item finishes, not only
# when the shard does (a small run is one shard, and its bar sat at 0 until the end)
_in_process_bar = None


def exit_with_parent() -> None:
    """Make this worker process die with its parent, even when the parent is killed with SIGKILL
    (Linux's PR_SET_PDEATHSIG); elsewhere, workers end when the pool's pipe closes."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the request took effect
        os._exit(1)


def init_worker(counter) -> None:
    """A pool worker of ours: shares the progress counter, leaves Ctrl-C to the parent, dies with it."""
    global _progress_counter
    _progress_counter = counter
    # Ctrl-C reaches the whole process group; only the parent handles it (it cancels the queue and
    # stops the workers), so a worker neither prints a traceback nor keeps building.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    exit_with_parent()


def _init_device_worker(counter, devices) -> None:
    """One worker per GPU: pin this (freshly spawned) process to the next free GPU before torch
    is imported, so `--device auto`/`cuda` means that GPU."""
    init_worker(counter)
    os.environ["CUDA_VISIBLE_DEVICES"] = devices.get()


def report_progress(n: int = 1) -> None:
    """Called by shard builders after each item; counts towards the progress bar."""
    if _progress_counter is not None:
        with _progress_counter.get_lock():
            _progress_counter.value += n
        if _in_process_bar is not None:
            _in_process_bar.update(_progress_counter.value - _in_process_bar.n)


def _build_and_record(build: Callable[[ShardPlan], ShardResult], out_dir: Path, plan: ShardPlan) -> ShardResult:
    result = build(plan)
    record_finished(out_dir, plan, result)
    return result


@runtime_checkable
class ItemBuilder(Protocol):
    """A shard builder that keeps each item of a shard as it finishes: `build_items` builds (and
    keeps) items `start` to `stop` of a shard, `finished_items` says which of each plan's are kept, and the builder
    called on the plan builds whatever is missing, then assembles the shard from what is kept."""

    def __call__(self, plan: ShardPlan) -> ShardResult: ...

    def finished_items(self, plans: Sequence[ShardPlan]) -> list[frozenset[int]]: ...

    def build_items(self, plan: ShardPlan, start: int, stop: int) -> object: ...


def _build_items(build: ItemBuilder | None, plan: ShardPlan, start: int, stop: int) -> None:
    assert build is not None, "only an ItemBuilder's shards are split"
    build.build_items(plan, start, stop)


def split_items(
    todo: Sequence[tuple[int, ShardPlan]], kept: dict[int, frozenset[int]], parts: int
) -> list[tuple[ShardPlan, int, int]]:
    """The missing items of the shards to build in `parts` runs of about equal length, in item
    order, each cut where a shard ends or a kept item sits: (plan, start, stop) pieces."""
    missing = [(pos, plan, i) for pos, plan in todo for i in range(len(plan.items)) if i not in kept[pos]]
    length = -(-len(missing) // parts) if missing else 1
    pieces: list[tuple[ShardPlan, int, int]] = []
    for first in range(0, len(missing), length):
        run: list[tuple[int, ShardPlan, int]] = []
        for entry in missing[first : first + length]:
            if run and (entry[0] != run[-1][0] or entry[2] != run[-1][2] + 1):
                pieces.append((run[0][1], run[0][2], run[-1][2] + 1))
                run = []
            run.append(entry)
        if run:
            pieces.append((run[0][1], run[0][2], run[-1][2] + 1))
    return pieces


def run_shards(
    plans: Sequence[ShardPlan],
    build: Callable[[ShardPlan], ShardResult],
    out_dir: Path,
    workers: int = 1,
    desc: str = "shards",
    unit: str = "img",
    progress: bool = True,
    worker_devices: Sequence[str] | None = None,
    work: Callable[[ShardPlan], int] | None = None,
) -> tuple[list[ShardResult], int]:
    """Build every unfinished shard; return all results in plan order and how many were reused.

    `build` must be a picklable top-level callable (a function or a frozen dataclass instance)
    when workers > 1. `worker_devices` (GPU indexes as strings, e.g. ["0", "1"]) runs one spawned
    worker process per GPU, each seeing only its own GPU; it replaces `workers`. `work(plan)` is
    what the bar's total counts of a plan, in the unit its builder's `report_progress` calls count
    (default: its items).
    """
    global _progress_counter, _in_process_bar
    results: dict[int, ShardResult] = {}
    todo = []
    for position, plan in enumerate(plans):
        finished = load_finished(out_dir, plan)
        if finished is None:
            todo.append((position, plan))
        else:
            results[position] = finished
    reused = len(results)
    total = sum(work(plan) if work else len(plan.items) for _, plan in todo)
    item_builder = build if isinstance(build, ItemBuilder) else None
    keeps_items = item_builder is not None
    # items an interrupted run kept count as done on the bar (they are assembled, not rebuilt)
    kept_lists = item_builder.finished_items([plan for _, plan in todo]) if item_builder else []
    kept = {position: items for (position, _), items in zip(todo, kept_lists)}
    # CUDA cannot be used in forked children, so GPU workers are spawned.
    context = multiprocessing.get_context("fork" if os.name == "posix" and not worker_devices else "spawn")
    counter = context.Value("q", sum(len(items) for items in kept.values()))
    initializer: Callable[..., None] = init_worker
    initargs: tuple = (counter,)
    if worker_devices:
        workers = len(worker_devices)
        device_queue = context.Queue()
        for device in worker_devices:
            device_queue.put(str(device))
        initializer, initargs = _init_device_worker, (counter, device_queue)
    # fewer shards to build than workers: the workers share the shards' items (then each shard is assembled)
    pieces = split_items(todo, kept, workers) if keeps_items and 1 < workers and len(todo) < workers else []
    bar = tqdm(total=total, desc=desc, unit=unit, disable=not progress or total == 0, smoothing=0.1)
    bar.update(counter.value)
    try:
        if not worker_devices and not pieces and (workers <= 1 or len(todo) <= 1):
            _progress_counter, _in_process_bar = counter, bar
            for position, plan in todo:
                results[position] = _build_and_record(build, out_dir, plan)
                bar.update(counter.value - bar.n)
        else:
            pool = ProcessPoolExecutor(
                max_workers=workers, mp_context=context, initializer=initializer, initargs=initargs
            )
            try:
                # Workers start inside submit(): block SIGINT meanwhile, so a Ctrl-C that arrives as a
                # worker forks waits in the parent instead of hitting a worker before it ignores it.
                blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
                try:
                    shared = {pool.submit(_build_items, item_builder, *piece): i for i, piece in enumerate(pieces)}
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                _collect(shared, {}, bar, counter)
                pending = {pool.submit(_build_and_record, build, out_dir, plan): pos for pos, plan in todo}
                _collect(pending, results, bar, counter)
            except BaseException:
                stop_pool(pool)
                raise
            pool.shutdown(wait=True)
    except KeyboardInterrupt:
        raise Interrupted(len(results) - reused, len(todo), reused, keeps_items) from None
    finally:
        _progress_counter = _in_process_bar = None
        bar.close()
    return [results[position] for position in range(len(plans))], reused


def _collect(pending: dict, results: dict, bar, counter) -> None:
    """Wait for the futures of `pending` (future: its position), moving the bar meanwhile."""
    while pending:
        done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        for future in done:
            results[pending.pop(future)] = future.result()
        bar.update(counter.value - bar.n)


def map_in_processes(
    function: Callable[[Any], Any], tasks: Sequence, workers: int = 1, worker_devices: Sequence[str] | None = None
) -> list:
    """`function(task)` for every task, results in task order, for work that writes no shards (a
    detector over chunks of images). `function` must be picklable when run in worker processes: up
    to `workers` forked ones, or with `worker_devices` (GPU indexes as strings) one spawned process
    per GPU, pinned to it as `run_shards` pins them. One CPU worker, or a single task on the CPU,
    runs here. Ctrl-C stops the workers at once and is re-raised as KeyboardInterrupt."""
    if not worker_devices and (workers <= 1 or len(tasks) <= 1):
        return [function(task) for task in tasks]
    context = multiprocessing.get_context("spawn" if worker_devices else "fork" if os.name == "posix" else "spawn")
    counter = context.Value("q", 0)
    initializer: Callable[..., None] = init_worker
    initargs: tuple = (counter,)
    if worker_devices:
        device_queue = context.Queue()
        for device in worker_devices:
            device_queue.put(str(device))
        initializer, initargs = _init_device_worker, (counter, device_queue)
    size = min(len(worker_devices) if worker_devices else workers, len(tasks))
    pool = ProcessPoolExecutor(max_workers=size, mp_context=context, initializer=initializer, initargs=initargs)
    results: dict[int, Any] = {}
    try:
        # as in run_shards: a Ctrl-C while the workers start waits in the parent
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            pending = {pool.submit(function, task): position for position, task in enumerate(tasks)}
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        while pending:
            done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                results[pending.pop(future)] = future.result()
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)
    return [results[position] for position in range(len(tasks))]


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued shards and stop the workers now: a shard in progress is lost (its
    temporary file is removed on the next run), finished ones are kept."""
    processes = list(getattr(pool, "_processes", {}).values())  # the executor has no public kill
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=5)
    # With its workers gone the executor's manager thread ends at once; waiting for it here keeps
    # Python's exit hook from waking a pipe that thread already closed (a stray traceback).
    pool.shutdown(wait=True, cancel_futures=True)


class Interrupted(HsiError):
    """The run was stopped with Ctrl-C; finished shards are kept and a re-run resumes."""

    exit_status = 130

    def __init__(self, finished: int, todo: int, reused: int, keeps_items: bool = False) -> None:
        super().__init__(
            f"interrupted: {finished} of the {todo} shards to build were finished"
            + (f" (and {reused} from earlier runs)" if reused else "")
            + ("; every image finished inside the others is kept" if keeps_items and finished < todo else "")
            + "; run the same command again to resume"
        )


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start
