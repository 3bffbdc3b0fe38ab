"""The local runner: shards are the unit of work and of resume.

A stage plans its work as `ShardPlan`s and provides a function that builds one shard (writes the
tar atomically and returns its stats and issues). The runner skips shards already finished, runs the
rest in worker processes, shows progress, and hands the results back in shard order, so the output
is the same whatever the worker count.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from builder.core.config import CONFIG_NAME
from builder.core.errors import HsiError, SettingsError, first_few
from builder.core.manifest import ERRORS_NAME, MANIFEST_NAME, ShardStats
from builder.core.names import SHARD_FILENAME
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


def load_finished(out_dir: Path, plan: ShardPlan) -> ShardResult | None:
    """A shard is finished when both its tar and its state record exist and agree in size."""
    state, tar = _state_path(out_dir, plan), out_dir / plan.filename
    if not (state.is_file() and tar.is_file()):
        return None
    try:
        result = ShardResult.from_json(json.loads(state.read_text("utf-8")))
    except (ValueError, KeyError, TypeError):
        return None
    return result if result.stats.bytes == tar.stat().st_size else None


def record_finished(out_dir: Path, plan: ShardPlan, result: ShardResult) -> None:
    state = _state_path(out_dir, plan)
    state.parent.mkdir(parents=True, exist_ok=True)
    tmp = state.with_name(f"{state.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result.to_json(), sort_keys=True), "utf-8")
    os.replace(tmp, state)


class ForeignOutput(SettingsError, FileExistsError):
    """An output folder that holds files this toolkit did not write."""


def is_toolkit_folder(out_dir: Path) -> bool:
    """A folder this toolkit wrote: it holds our manifest or our settings file."""
    return (out_dir / MANIFEST_NAME).is_file() or (out_dir / CONFIG_NAME).is_file()


def check_writable_folder(out_dir: Path, what: str = "--out") -> None:
    """Refuse to write into a non-empty folder that this toolkit did not write."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ForeignOutput(f"{what} {out_dir} is a file, not a folder: choose a folder to write into")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not is_toolkit_folder(out_dir):
        raise ForeignOutput(
            f"{out_dir} is not empty and holds no dataset of this toolkit; it only ever writes into an empty "
            "folder or one it wrote itself: choose another --out or --name"
        )


VALIDATION_REPORT = "validation.json"  # validation.report's JSON_NAME: core cannot import validation
# What the stages (and `hsi validate` on their folders) write in an output folder as plain files,
# beside its shards and our temporaries: --overwrite removes a folder only when it holds nothing else.
OWN_FILES = frozenset(
    {
        MANIFEST_NAME,
        CONFIG_NAME,
        ERRORS_NAME,
        "spec.yaml",
        VALIDATION_REPORT,
        "validation.md",
        "scores_per_class.csv",
    }
)
PREVIEWS_DIR = "previews"
# The sheets `hsi scgs` draws in its folder's previews/ (cards.scgs draws them, cards.release
# publishes them): named here, at the bottom of the stack, so the claim and the release agree.
SCGS_PREVIEW_NAME = "scgs_preview.png"
SCGS_LABEL_CHECK_NAME = "scgs_label_check.png"
# The previews/ pictures a stage draws itself, beyond those its validation report lists (by the
# stage name in the folder's manifest, as STAGE_OUTPUTS in builder.core.manifest).
STAGE_PREVIEWS: dict[str, frozenset[str]] = {"scgs": frozenset({SCGS_PREVIEW_NAME, SCGS_LABEL_CHECK_NAME})}
# `_state/` holds one record per finished shard, written through a temporary of ours.
STATE_RECORD = re.compile(rf"{SHARD_FILENAME.pattern}\.json(?:\.\d+\.tmp)?")


def is_plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def is_plain_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def read_json_dict(path: Path) -> dict:
    """A JSON object file of ours, or {} when it is missing, a link or unreadable (it then claims nothing)."""
    try:
        data = json.loads(path.read_text("utf-8")) if is_plain_file(path) else None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def own_preview_names(manifest: dict, report: dict) -> set[str]:
    """The names of the pictures in a folder's `previews/` that the toolkit drew for it, from its
    manifest and validation report: those the report lists (as `previews/NAME`) and those its stage
    draws itself (STAGE_PREVIEWS)."""
    listed = report.get("previews")
    paths = listed if isinstance(listed, list) else []
    names = {
        p.removeprefix(f"{PREVIEWS_DIR}/") for p in paths if isinstance(p, str) and p.startswith(f"{PREVIEWS_DIR}/")
    }
    stage = manifest.get("stage")
    return names | (STAGE_PREVIEWS.get(stage, frozenset()) if isinstance(stage, str) else frozenset())


def _own_top_file(name: str) -> bool:
    return (
        name in OWN_FILES
        or bool(SHARD_FILENAME.fullmatch(name))
        or bool(OWN_TEMPORARY.match(name))
        or bool(re.fullmatch(r"\.validation\.md(\.\d+)?\.tmp", name))
    )


def stray_entries(folder: Path, own_file: Callable[[str], bool], own_folder: Callable[[str], bool]) -> list[str]:
    """The entries below `folder` the toolkit did not write, as sorted paths relative to it (a folder
    with a trailing `/`, not looked into). `own_file`/`own_folder` say which relative paths are ours;
    only our folders are descended into, and a link is never ours."""
    found: list[str] = []

    def walk(path: Path, prefix: str) -> None:
        for entry in path.iterdir():
            relative = prefix + entry.name
            if is_plain_file(entry) and own_file(relative):
                continue
            if is_plain_folder(entry) and own_folder(relative):
                walk(entry, relative + "/")
            else:
                found.append(relative + ("/" if is_plain_folder(entry) else ""))

    if is_plain_folder(folder):
        walk(folder, "")
    return sorted(found)


def foreign_entries(folder: Path) -> list[str]:
    """The entries of a stage's output folder that this toolkit did not write there (see
    stray_entries). It looks into our own sub-folders: `_state/` holds only shard records, `previews/`
    only the pictures drawn for this folder (own_preview_names). A name of ours on an entry of
    another kind (a folder where we write a file) is foreign."""
    previews = own_preview_names(read_json_dict(folder / MANIFEST_NAME), read_json_dict(folder / VALIDATION_REPORT))

    def own_file(relative: str) -> bool:
        top, _, below = relative.partition("/")
        if not below:
            return _own_top_file(top)
        return (top == STATE_DIR and bool(STATE_RECORD.fullmatch(below))) or (top == PREVIEWS_DIR and below in previews)

    return stray_entries(folder, own_file, lambda relative: relative in (STATE_DIR, PREVIEWS_DIR))


def refuse_foreign(folder: Path, foreign: Sequence[str], flag: str, error: type[Exception] = ForeignOutput) -> None:
    """Refuse an --overwrite that would delete `foreign` (paths in `folder`), naming them."""
    if foreign:
        raise error(
            f"--overwrite would delete {first_few(foreign)} in {folder}, which this toolkit did not write: "
            f"move them out of the folder first, or choose another {flag}"
        )


def prepare_output(out_dir: Path, overwrite: bool) -> None:
    """Create `out_dir`; with `overwrite`, empty it first. Both only for a folder this toolkit wrote
    (or an empty one): a folder of someone else's is never written into, and --overwrite never
    deletes a file the toolkit did not write (it refuses, naming them)."""
    check_writable_folder(out_dir)
    if overwrite and out_dir.is_symlink():  # rmtree refuses a link; what it leads to is not emptied either
        raise ForeignOutput(
            f"{out_dir} is a link (to {os.readlink(out_dir)}): --overwrite only replaces a real folder; "
            "pass the folder it leads to, or remove the link"
        )
    if overwrite and out_dir.exists():
        refuse_foreign(out_dir, foreign_entries(out_dir), "--out")
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)


# Our temporaries are `<file we write>.<pid>.tmp`; nothing else in a folder is ever deleted as stale.
OWN_TEMPORARY = re.compile(
    r"^(?:[A-Za-z0-9][A-Za-z0-9_-]*-\d{5}\.tar|_info\.json|errors\.jsonl|_config\.yaml|spec\.yaml"
    r"|[A-Za-z0-9][A-Za-z0-9_-]*-\d{5}\.tar\.json)\.\d+\.tmp$"
)


def remove_stale_temporaries(out_dir: Path) -> None:
    """Delete what a killed run of ours left half-written (the folder is locked, so no live run of
    ours is writing them)."""
    for folder in (out_dir, out_dir / STATE_DIR):
        if folder.is_dir():
            for tmp in folder.iterdir():
                if OWN_TEMPORARY.match(tmp.name) and tmp.is_file() and not tmp.is_symlink():
                    tmp.unlink(missing_ok=True)


# --- worker-side progress -------------------------------------------------------------------

_progress_counter = None


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


def _init_worker(counter) -> None:
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
    _init_worker(counter)
    os.environ["CUDA_VISIBLE_DEVICES"] = devices.get()


def report_progress(n: int = 1) -> None:
    """Called by shard builders after each item; counts towards the progress bar."""
    if _progress_counter is not None:
        with _progress_counter.get_lock():
            _progress_counter.value += n


def _build_and_record(build: Callable[[ShardPlan], ShardResult], out_dir: Path, plan: ShardPlan) -> ShardResult:
    result = build(plan)
    record_finished(out_dir, plan, result)
    return result


def run_shards(
    plans: Sequence[ShardPlan],
    build: Callable[[ShardPlan], ShardResult],
    out_dir: Path,
    workers: int = 1,
    desc: str = "shards",
    unit: str = "img",
    progress: bool = True,
    worker_devices: Sequence[str] | None = None,
) -> tuple[list[ShardResult], int]:
    """Build every unfinished shard; return all results in plan order and how many were reused.

    `build` must be a picklable top-level callable (a function or a frozen dataclass instance)
    when workers > 1. `worker_devices` (GPU indexes as strings, e.g. ["0", "1"]) runs one spawned
    worker process per GPU, each seeing only its own GPU; it replaces `workers`.
    """
    global _progress_counter
    results: dict[int, ShardResult] = {}
    todo = []
    for position, plan in enumerate(plans):
        finished = load_finished(out_dir, plan)
        if finished is None:
            todo.append((position, plan))
        else:
            results[position] = finished
    reused = len(results)
    total = sum(len(plan.items) for _, plan in todo)
    # CUDA cannot be used in forked children, so GPU workers are spawned.
    context = multiprocessing.get_context("fork" if os.name == "posix" and not worker_devices else "spawn")
    counter = context.Value("q", 0)
    initializer: Callable[..., None] = _init_worker
    initargs: tuple = (counter,)
    if worker_devices:
        workers = len(worker_devices)
        device_queue = context.Queue()
        for device in worker_devices:
            device_queue.put(str(device))
        initializer, initargs = _init_device_worker, (counter, device_queue)
    bar = tqdm(total=total, desc=desc, unit=unit, disable=not progress or total == 0, smoothing=0.1)
    try:
        if not worker_devices and (workers <= 1 or len(todo) <= 1):
            _progress_counter = counter
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
                    pending = {pool.submit(_build_and_record, build, out_dir, plan): pos for pos, plan in todo}
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                while pending:
                    done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for future in done:
                        results[pending.pop(future)] = future.result()
                    bar.update(counter.value - bar.n)
            except BaseException:
                stop_pool(pool)
                raise
            pool.shutdown(wait=True)
    except KeyboardInterrupt:
        raise Interrupted(len(results) - reused, len(todo), reused) from None
    finally:
        _progress_counter = None
        bar.close()
    return [results[position] for position in range(len(plans))], reused


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

    def __init__(self, finished: int, todo: int, reused: int) -> None:
        super().__init__(
            f"interrupted: {finished} of the {todo} shards to build were finished"
            + (f" (and {reused} from earlier runs)" if reused else "")
            + "; run the same command again to resume"
        )


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start
