"""The Slurm runner (`hsi extract|compose|scgs --runner slurm`): the local runner's contract as one
Slurm job array, submitted through submitit. Needs the optional extra:
pip install 'hard-spurious-imagenet[cluster]'.

The driver (the `hsi` command) holds the folder's lock, plans the shards and submits the unfinished
ones as one job array; each array task builds its shards with the stage's picklable shard builder
and writes their `_state` records, as a local worker does, so the bytes are the local runner's.
Array tasks write shards only; the driver checks the settings, waits with a progress line and
writes the manifest last. Every node must see the output folder at the same path (a shared file
system).

submitit keeps its files (the pickled work, each task's log) in `.<name>.slurm/` beside the output
folder (as the lock file sits beside it), with `job.json`: the array's id and the shards of each
task. A run that finds that array still queued waits for it (`--detach`: it returns at once, and
the same command run again collects); a task that failed or ended without finishing its shards
(cancelled, out of time, its node lost) is named with its log, and the same command run again
submits only the shards still missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from builder.core.errors import EXIT_FAILED, HsiError, UsageError
from builder.core.interrupts import EXIT_INTERRUPTED
from builder.core.runner import ShardPlan, ShardResult, load_finished, load_finished_shard, record_finished

JOB_RECORD = "job.json"
# Slurm's default MaxArraySize is 1001 (indexes 0..1000): more shards than that share tasks.
MAX_ARRAY_TASKS = 1000
DEFAULT_TIME_MINUTES = 240


class SlurmUnavailable(UsageError):
    """submitit or the Slurm commands are missing, or Slurm refused the job array."""


class SlurmTaskFailed(HsiError):
    """An array task ended without finishing its shards; the others are kept for the resume."""

    exit_status = EXIT_FAILED


class ArrayStillRunning(UsageError):
    """An earlier --runner slurm array still builds shards of this folder."""


class JobSubmitted(HsiError):
    """Not a failure: `--detach` submitted the array (or found it running) and returns; the same
    command run again collects it. It ends the command before the manifest, as a refusal would."""

    exit_status = 0


class StoppedWaiting(HsiError):
    """Ctrl-C while the driver waited: the array goes on without it."""

    exit_status = EXIT_INTERRUPTED


@dataclass(frozen=True)
class SlurmOptions:
    """The flags of `--runner slurm`; none of them changes a byte of the output. `config` is a YAML
    mapping of further submitit SlurmExecutor parameters (mem, cpus_per_task, account, qos,
    constraint, setup, ...); the flags win over it."""

    partition: str | None = None
    gpus_per_task: int = 0
    array_parallelism: int | None = None
    time_minutes: int = DEFAULT_TIME_MINUTES
    config: Path | None = None
    detach: bool = False
    poll_seconds: float = 10.0  # the longest pause between two squeue calls (short jobs are polled faster)

    def executor_parameters(self) -> dict:
        """submitit's SlurmExecutor parameters: the YAML file's, then the flags'."""
        parameters = read_slurm_config(self.config) if self.config is not None else {}
        parameters["time"] = self.time_minutes
        if self.partition:
            parameters["partition"] = self.partition
        if self.gpus_per_task:
            parameters["gpus_per_task"] = self.gpus_per_task
        if self.array_parallelism:
            parameters["array_parallelism"] = self.array_parallelism
        return parameters


def read_slurm_config(path: Path) -> dict:
    """The --slurm-config YAML: a mapping whose keys are submitit SlurmExecutor parameters."""
    from builder.core.untrusted import read_yaml

    data = read_yaml(path, "--slurm-config file")
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
        raise UsageError(f"--slurm-config {path} must hold a mapping of Slurm parameters (mem: 16G, qos: ...)")
    known = set(_submitit().SlurmExecutor._valid_parameters())
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(
            f"--slurm-config {path}: {', '.join(unknown)} is not a submitit SlurmExecutor parameter; "
            "the file takes e.g. mem, cpus_per_task, account, qos, constraint, additional_parameters"
        )
    return dict(data)


def _submitit():
    try:
        import submitit
    except ImportError:
        raise SlurmUnavailable(
            "--runner slurm needs submitit, which is not installed; install it with: "
            "pip install 'hard-spurious-imagenet[cluster]'"
        ) from None
    return submitit


def check_slurm_available(options: SlurmOptions) -> None:
    """Refuse `--runner slurm` before anything is written: submitit missing, no sbatch/squeue on
    this machine, or a --slurm-config that is not a mapping of Slurm parameters."""
    _submitit()
    missing = [command for command in ("sbatch", "squeue") if shutil.which(command) is None]
    if missing:
        raise SlurmUnavailable(
            f"--runner slurm submits with sbatch and watches with squeue, and {' and '.join(missing)} "
            "is not on PATH; run hsi on a Slurm login node (or use --runner local)"
        )
    options.executor_parameters()


def slurm_folder(out_dir: Path) -> Path:
    """submitit's folder of an output folder: beside it, so --overwrite never empties it."""
    out_dir = Path(out_dir).resolve()
    return out_dir.parent / f".{out_dir.name}.slurm"


@dataclass(frozen=True)
class ArrayRecord:
    """`job.json`: the array's Slurm id, and per task its own id (`ARRAY_INDEX`, or the bare id of
    a one-task array, which submitit submits as a plain job) and the shards it builds."""

    job_id: str
    task_ids: tuple[str, ...]
    tasks: tuple[tuple[str, ...], ...]
    failure_reported: bool = False  # a run named its failed tasks: the next one resubmits their shards

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{JOB_RECORD}.{os.getpid()}.tmp"
        payload = {
            "job_id": self.job_id,
            "task_ids": list(self.task_ids),
            "tasks": [list(t) for t in self.tasks],
            "failure_reported": self.failure_reported,
        }
        tmp.write_text(json.dumps(payload), "utf-8")
        os.replace(tmp, folder / JOB_RECORD)

    @classmethod
    def read(cls, folder: Path) -> ArrayRecord | None:
        path = folder / JOB_RECORD
        if path.is_symlink() or not path.is_file():
            return None
        try:
            data = json.loads(path.read_text("utf-8"))
            record = cls(
                str(data["job_id"]),
                tuple(str(task_id) for task_id in data["task_ids"]),
                tuple(tuple(str(name) for name in task) for task in data["tasks"]),
                data.get("failure_reported") is True,
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
        plain = record.job_id.isdigit() and len(record.task_ids) == len(record.tasks)
        return record if plain and all(TASK_ID.fullmatch(task_id) for task_id in record.task_ids) else None

    def log_path(self, folder: Path, index: int) -> Path:
        return folder / f"{self.task_ids[index]}_0_log.err"  # submitit's name: %j_%t_log.err

    def unfinished_tasks(self, out_dir: Path) -> list[int]:
        """The indexes of the tasks with a shard not finished in `out_dir`."""
        return [
            index
            for index, names in enumerate(self.tasks)
            if any(load_finished_shard(out_dir, name) is None for name in names)
        ]


TASK_ID = re.compile(r"\d+(?:_\d+)?")


def queued_tasks(record: ArrayRecord) -> set[str]:
    """The ids of the record's tasks that Slurm still lists (pending, running, completing)."""
    try:
        listing = subprocess.run(
            ["squeue", "--noheader", "--array", "--jobs", record.job_id, "--format", "%i"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmUnavailable(f"cannot ask squeue about job {record.job_id}: {exc}") from None
    if listing.returncode != 0:
        if "Invalid job id" in listing.stderr:  # ended long enough ago for Slurm to forget it
            return set()
        raise SlurmUnavailable(f"squeue failed on job {record.job_id}: {listing.stderr.strip()}")
    return set(listing.stdout.split()) & set(record.task_ids)


def task_state(task_id: str) -> tuple[str, str] | None:
    """Slurm's state and reason of a task that may have ended (as long as slurmctld keeps it,
    MinJobAge), or None when it says nothing."""
    try:
        listing = subprocess.run(
            ["squeue", "--noheader", "--array", "--states=all", "--jobs", task_id, "--format", "%i %T %r"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in listing.stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] == task_id:
            return fields[1], fields[2]
    return None


@dataclass(frozen=True)
class ShardTask:
    """What one array task runs: build its shards and record each, as a local worker does."""

    build: Callable[[ShardPlan], ShardResult]
    out_dir: str

    def __call__(self, plans: Sequence[ShardPlan]) -> int:
        out_dir = Path(self.out_dir)
        for plan in plans:
            if load_finished(out_dir, plan) is None:  # a resubmitted task keeps what it finished
                record_finished(out_dir, plan, self.build(plan))
        return len(plans)


def settle_recorded_array(out_dir: Path, *, collect: bool, options: SlurmOptions, progress: bool) -> None:
    """Before a run touches the folder: an earlier array still queued for it is waited for (`collect`:
    a --runner slurm run without --overwrite) or refused (any other run). Nothing is recorded, or
    the array has ended: return at once."""
    folder = slurm_folder(out_dir)
    record = ArrayRecord.read(folder)
    if record is None or shutil.which("squeue") is None:
        return
    queued = queued_tasks(record)
    if not queued:
        if collect:
            report_failed_tasks(record, folder, Path(out_dir))
        return
    if not collect:
        raise ArrayStillRunning(
            f"job array {record.job_id} of an earlier --runner slurm run still builds shards of {out_dir} "
            f"({len(queued)} of {len(record.tasks)} tasks queued or running); collect it with the same command "
            f"and --runner slurm, or stop it with: scancel {record.job_id}"
        )
    if options.detach:
        raise JobSubmitted(
            f"job array {record.job_id} is still running ({len(queued)} of {len(record.tasks)} tasks left); "
            "run the same command again to collect it"
        )
    wait_for_array(record, options.poll_seconds, progress)
    report_failed_tasks(record, folder, Path(out_dir))


def report_failed_tasks(record: ArrayRecord, folder: Path, out_dir: Path) -> None:
    """Name the first task of an ended array that left shards unfinished, once: the run after that
    resubmits them."""
    if record.failure_reported:
        return
    failed = record.unfinished_tasks(out_dir)
    if failed:
        replace(record, failure_reported=True).write(folder)
        missing = sum(load_finished_shard(out_dir, name) is None for index in failed for name in record.tasks[index])
        raise task_failure(record, folder, failed, missing)


def wait_for_array(record: ArrayRecord, poll_seconds: float, progress: bool) -> None:
    """Poll squeue until no task of the array is listed, with one progress line."""
    from tqdm import tqdm

    total = len(record.tasks)
    bar = tqdm(total=total, desc=f"slurm job {record.job_id}", unit="task", disable=not progress)
    pause = 0.5
    try:
        while True:
            queued = queued_tasks(record)
            bar.update(total - len(queued) - bar.n)
            if not queued:
                return
            time.sleep(pause)
            pause = min(pause * 1.5, poll_seconds)
    except KeyboardInterrupt:
        raise StoppedWaiting(
            f"stopped waiting for job array {record.job_id}; its tasks go on: run the same command again "
            f"to collect it, or stop it with: scancel {record.job_id}"
        ) from None
    finally:
        bar.close()


def run_shards_slurm(
    plans: Sequence[ShardPlan],
    build: Callable[[ShardPlan], ShardResult],
    out_dir: Path,
    options: SlurmOptions,
    *,
    job_name: str = "hsi",
    progress: bool = True,
) -> tuple[list[ShardResult], int]:
    """Build every unfinished shard as one Slurm job array; return all results in plan order and
    how many were reused. With `options.detach`, raise `JobSubmitted` once the array is queued."""
    out_dir = Path(out_dir)
    results: dict[int, ShardResult] = {}
    todo: list[int] = []
    for position, plan in enumerate(plans):
        finished = load_finished(out_dir, plan)
        if finished is None:
            todo.append(position)
        else:
            results[position] = finished
    reused = len(results)
    if not todo:
        shutil.rmtree(slurm_folder(out_dir), ignore_errors=True)
        return [results[position] for position in range(len(plans))], reused
    folder = slurm_folder(out_dir)
    count = min(len(todo), MAX_ARRAY_TASKS)
    groups = [todo[start::count] for start in range(count)]
    record = submit_array(folder, [[plans[p] for p in group] for group in groups], build, out_dir, options, job_name)
    if options.detach:
        raise JobSubmitted(
            f"submitted job array {record.job_id} ({len(todo)} shards in {count} tasks; logs in {folder}); "
            "run the same command again to collect it"
        )
    wait_for_array(record, options.poll_seconds, progress)
    report_failed_tasks(record, folder, out_dir)
    for position in todo:
        finished = load_finished(out_dir, plans[position])
        if finished is None:  # not a task's: the record says every task finished its shards
            raise SlurmTaskFailed(f"shard {plans[position].filename} is missing after job array {record.job_id}")
        results[position] = finished
    shutil.rmtree(folder, ignore_errors=True)
    return [results[position] for position in range(len(plans))], reused


def submit_array(
    folder: Path,
    groups: list[list[ShardPlan]],
    build: Callable[[ShardPlan], ShardResult],
    out_dir: Path,
    options: SlurmOptions,
    job_name: str,
) -> ArrayRecord:
    """Submit one array task per group through submitit and record the array in `job.json`."""
    submitit = _submitit()
    from submitit.core.utils import FailedJobError

    folder.mkdir(parents=True, exist_ok=True)
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=0)
    try:
        executor.update_parameters(job_name=job_name, **options.executor_parameters())
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--slurm-config or a --slurm flag holds a value Slurm cannot take: {exc}") from None
    try:
        jobs = executor.map_array(ShardTask(build, str(out_dir)), groups)
    except (FailedJobError, subprocess.CalledProcessError, OSError) as exc:
        detail = " ".join(str(exc).split())[-400:]
        raise SlurmUnavailable(f"sbatch refused the job array: {detail}") from None
    task_ids = tuple(str(job.job_id) for job in jobs)
    record = ArrayRecord(
        task_ids[0].partition("_")[0], task_ids, tuple(tuple(plan.filename for plan in group) for group in groups)
    )
    record.write(folder)
    return record


class OutputNotShared(SlurmTaskFailed):
    """An array task's node does not see the folder of the output (and of submitit's files)."""


def task_failure(record: ArrayRecord, folder: Path, failed: list[int], missing_shards: int) -> SlurmTaskFailed:
    """The first failed task by name, with the last line of its log and the log's path; a task
    Slurm could not launch because its node could not open that log is a node that does not see
    the folder (every node must mount it at the same path), said so."""
    first = record.task_ids[failed[0]]
    log = record.log_path(folder, failed[0])
    if not log.is_file() and task_state(first) == ("FAILED", "JobLaunchFailure"):
        return OutputNotShared(
            f"array task {first} could not start: Slurm could not open its log {log} on its node "
            f"(JobLaunchFailure), so that node does not see {folder.parent}; put the output folder (for an "
            "s3:// --out or --source, HSI_STAGING) on a file system every node mounts at the same path, "
            "then run the same command again"
        )
    last = _last_line(log) if log.is_file() else "it never started: cancelled while queued"
    more = f" (and {len(failed) - 1} other tasks)" if len(failed) > 1 else ""
    return SlurmTaskFailed(
        f"array task {first}{more} ended without finishing its shards"
        + (f" ({last})" if last else "")
        + f"; its log: {log}; {missing_shards} shards are missing, the finished ones are kept: "
        "run the same command again to build the rest"
    )


EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b")


def _last_line(path: Path) -> str:
    """What a task's log says went wrong: the last Python exception line, else Slurm's own last
    word (`*** JOB ... CANCELLED ...`, a time limit), else the last line."""
    try:
        lines = [line.strip() for line in path.read_text("utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    exceptions = [line for line in lines if EXCEPTION_LINE.match(line)]
    slurm = [line for line in lines if "***" in line]
    chosen = (exceptions or slurm or lines or [""])[-1]
    return chosen[:300]


def each_on_slurm(
    function: Callable,
    tasks: Sequence,
    options: SlurmOptions,
    *,
    job_name: str = "hsi-map",
    progress: bool = True,
) -> Iterator[tuple[int, bool, object]]:
    """`function(task)` for every task as one Slurm job array; yields (task index, True, result) or
    (task index, False, what went wrong, with the task's log) as each task ends, in finishing order.
    submitit's folder (the pickled work and results, a log per task) is `.hsi-slurm/<job>-<pid>` in
    the current folder, which the nodes must share; it is removed once every task has succeeded, and
    kept for its logs when one has not."""
    if not tasks:
        return
    submitit = _submitit()
    from submitit.core.utils import FailedJobError, UncompletedJobError
    from tqdm import tqdm

    folder = Path.cwd() / ".hsi-slurm" / f"{job_name}-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=0)
    try:
        executor.update_parameters(job_name=job_name, **options.executor_parameters())
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--slurm-config or a --slurm flag holds a value Slurm cannot take: {exc}") from None
    try:
        jobs = executor.map_array(function, list(tasks))
    except (FailedJobError, subprocess.CalledProcessError, OSError) as exc:
        raise SlurmUnavailable(f"sbatch refused the job array: {' '.join(str(exc).split())[-400:]}") from None
    task_ids = tuple(str(job.job_id) for job in jobs)
    record = ArrayRecord(task_ids[0].partition("_")[0], task_ids, tuple(() for _ in jobs))
    pending, all_ok, pause = set(range(len(jobs))), True, 0.5
    bar = tqdm(total=len(jobs), desc=f"slurm job {record.job_id}", unit="task", disable=not progress)
    try:
        while pending:
            queued = queued_tasks(record)
            for index in sorted(pending):
                job = jobs[index]
                if not job.paths.result_pickle.exists() and task_ids[index] in queued:
                    continue
                pending.discard(index)
                bar.update(1)
                log = record.log_path(folder, index)
                try:
                    if not job.paths.result_pickle.exists():
                        raise UncompletedJobError("no result")
                    outcome = job.result()  # our own task's result, from the folder this run made
                except (FailedJobError, UncompletedJobError):
                    all_ok = False
                    last = _last_line(log) if log.is_file() else "it never started: cancelled while queued"
                    said = f"array task {task_ids[index]} ended without its result ({last}); its log: {log}"
                    yield index, False, said
                    continue
                yield index, True, outcome
            if pending:
                time.sleep(pause)
                pause = min(pause * 1.5, options.poll_seconds)
    except KeyboardInterrupt:
        raise StoppedWaiting(
            f"stopped waiting for job array {record.job_id}; stop its tasks with: scancel {record.job_id}"
        ) from None
    finally:
        bar.close()
    if all_ok:
        shutil.rmtree(folder, ignore_errors=True)
        try:
            folder.parent.rmdir()  # the last run's: leave no empty .hsi-slurm behind
        except OSError:
            pass


def map_on_slurm(
    function: Callable,
    tasks: Sequence,
    options: SlurmOptions,
    *,
    job_name: str = "hsi-map",
    progress: bool = True,
) -> list:
    """`function(task)` for every task as one Slurm job array, results in task order:
    `ray_runner.map_on_ray` on Slurm, for work that writes no shards (validation's detector over
    chunks of images). A task without its result is raised, named with its log (`each_on_slurm`)."""
    results: dict[int, object] = {}
    for index, ok, value in each_on_slurm(function, tasks, options, job_name=job_name, progress=progress):
        if not ok:
            raise SlurmTaskFailed(f"{value}; run the same command again")
        results[index] = value
    return [results[index] for index in range(len(tasks))]
