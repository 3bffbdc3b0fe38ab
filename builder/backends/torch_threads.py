"""One intra-op thread count for every process that does a stage's torch work.

Why: torch splits a large reduction (a mean over a feature map, a GEMM's sums, a group norm) over
its intra-op threads, and float sums in another grouping round differently. A lone process gets
torch's default (one thread per core), a forked worker must use one (OpenMP's pool does not
survive a fork: a second thread there hangs), a Ray actor gets one (Ray sets OMP_NUM_THREADS to
its CPUs), a spawned GPU worker the default again. With these counts `hsi scgs` in one process and
with `--workers 2` wrote other JPEG bytes for 5 of 33 shards of the tests' run, and a run stopped
under `--workers 2` and resumed in one process mixed the two.

The rule: every process that does a stage's torch work (plans with a model, builds a shard, runs
a detector over a chunk) runs it with `STAGE_INTRA_OP_THREADS` intra-op threads, whatever its
environment, runner or worker count; stages record the count in their settings, so a folder made
under another rule is refused on resume instead of mixed. One thread is the only count a forked
worker can use, so it is the count of every process: parallelism comes from `--workers`, not from
threads inside one process. Importing this module does not import torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

STAGE_INTRA_OP_THREADS = 1


def threads_setting(device_type: str | None = None, precision: str | None = None) -> dict:
    """What a stage records in its settings (and manifest) about its torch math: the threads, and
    where given the device type ("cpu", "cuda") and precision (builder.backends.torch_base's
    PRECISIONS, or a generator's dtype): CPU and CUDA, float32 and bf16 round differently, so a
    folder begun under one is refused under another instead of mixed."""
    setting: dict = {"intra_op_threads": STAGE_INTRA_OP_THREADS}
    if device_type is not None:
        setting["device_type"] = device_type
    if precision is not None:
        setting["precision"] = precision
    return setting


def _torch():
    """torch, or None where it is not installed (then no model of ours runs, and nothing is set)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def use_stage_threads() -> None:
    """The stage's thread count in this process from now on: for a worker process (forked,
    spawned or a Ray actor) before it builds a shard. In the process that plans the run, work
    inside `stage_threads()` instead, which gives the caller's count back afterwards."""
    torch = _torch()
    if torch is not None and torch.get_num_threads() != STAGE_INTRA_OP_THREADS:
        torch.set_num_threads(STAGE_INTRA_OP_THREADS)


@contextmanager
def stage_threads() -> Iterator[None]:
    """The stage's thread count while the block runs (the planning process's model work and the
    shards it builds itself); the process's own count is restored afterwards, so a caller of the
    Python API keeps its threads."""
    torch = _torch()
    before = torch.get_num_threads() if torch is not None else None
    use_stage_threads()
    try:
        yield
    finally:
        if torch is not None and torch.get_num_threads() != before:
            torch.set_num_threads(before)


def runs_torch(*backends: object) -> bool:
    """Whether any of these backends runs a torch model (they keep it in a `ProcessLocalModel`):
    only then does a stage record and set the thread count, so a classical run never imports torch."""
    from builder.backends.torch_base import ProcessLocalModel

    return any(isinstance(getattr(backend, "placement", None), ProcessLocalModel) for backend in backends)
