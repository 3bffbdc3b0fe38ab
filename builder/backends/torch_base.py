"""Shared plumbing of the torch backends: device choice, checkpoint checks and hashes, and running
a model over a batch that halves itself when the GPU runs out of memory.

Importing this module does not import torch; the functions that need it import it when called, so
`hsi extract --masker box` never pays for torch.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from builder.backends import BackendUnavailable

T = TypeVar("T")
R = TypeVar("R")

DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")


def check_device_name(name: str) -> str:
    if not DEVICE_PATTERN.match(name):
        raise BackendUnavailable(f"--device must be auto, cpu, cuda or cuda:N, got {name!r}")
    return name


def resolve_device(name: str):
    """`auto` -> the current CUDA device when one is present, else the CPU; `cuda[:N]` must exist."""
    import torch

    check_device_name(name)
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise BackendUnavailable(f"--device {name} was asked for but torch sees no CUDA device")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise BackendUnavailable(
                f"--device {name} was asked for but torch sees {torch.cuda.device_count()} CUDA device(s)"
            )
    return device


@dataclass(frozen=True)
class CheckpointSource:
    """Where a backend's weights come from, and what to tell the user when they are missing."""

    what: str  # e.g. "the SAM vit_h checkpoint"
    flag: str  # e.g. "--sam-checkpoint"
    variable: str  # e.g. "HSI_SAM_CHECKPOINT"
    published: str  # where the official file is published

    def help(self) -> str:
        return f"give it with {self.flag} PATH or the {self.variable} environment variable; the official file is published at {self.published}"

    def locate(self, flag_value: str | None) -> Path:
        """The checkpoint path from the flag, else the variable; it must be a readable file."""
        value = flag_value or os.environ.get(self.variable) or None
        if value is None:
            raise BackendUnavailable(f"{self.what} is needed: {self.help()}")
        path = Path(value).expanduser()
        origin = self.flag if flag_value else self.variable
        if not path.is_file():
            raise BackendUnavailable(f"{self.what} ({origin}) {path} does not exist or is not a file: {self.help()}")
        if not os.access(path, os.R_OK):
            raise BackendUnavailable(f"{self.what} ({origin}) {path} is not readable: {self.help()}")
        return path

    def unusable(self, path: Path, reason: str) -> BackendUnavailable:
        return BackendUnavailable(f"{self.what} {path.name} cannot be used ({reason}): {self.help()}")


_sha_cache: dict[tuple[str, int, int], str] = {}


def checkpoint_sha256(path: Path) -> str:
    """sha256 of a checkpoint file, computed once per process for an unchanged file."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _sha_cache:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while block := handle.read(1 << 22):
                digest.update(block)
        _sha_cache[key] = digest.hexdigest()
    return _sha_cache[key]


def is_out_of_memory(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


class AdaptiveBatch:
    """Runs `step` over items in chunks of at most `size`; on CUDA out-of-memory it halves the
    size, says so on stderr and retries the chunk. The lowered size is kept for later calls.

    Chunking never changes a result's value, only how many items share one forward pass, so a
    retry gives the same output a first try would have (see the determinism note in sam.py)."""

    def __init__(self, size: int, what: str) -> None:
        if size < 1:
            raise ValueError("batch size must be at least 1")
        self.size = size
        self.what = what

    def run(self, items: Sequence[T], step: Callable[[Sequence[T]], list[R]]) -> list[R]:
        results: list[R] = []
        start = 0
        while start < len(items):
            chunk = items[start : start + self.size]
            try:
                results.extend(step(chunk))
            except Exception as exc:  # noqa: BLE001 - only OOM is handled, the rest re-raised
                if not is_out_of_memory(exc) or self.size == 1:
                    raise
                self.lower(len(chunk))
                continue
            start += len(chunk)
        return results

    def lower(self, failed_size: int) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        self.size = max(1, min(self.size, failed_size) // 2)
        print(
            f"hsi: out of memory in {self.what} with a batch of {failed_size}; retrying with {self.size}",
            file=sys.stderr,
            flush=True,
        )


def limit_threads_in_forked_child(loaded_in_pid: int) -> None:
    """In a worker forked after the parent ran torch ops, use one intra-op thread: OpenMP's pool
    does not survive fork and would hang (torch's DataLoader workers do the same). Worker
    processes are the parallelism there."""
    import torch

    if os.getpid() != loaded_in_pid:
        torch.set_num_threads(1)


class ProcessLocalModel:
    """A model that is moved to its device on first use in each process: a parent that only loads
    and describes it never initialises CUDA, and a forked worker sets itself up on its own."""

    def __init__(self, module, device_name: str) -> None:
        self.module = module
        self.device_name = device_name
        self.device = None
        self.loaded_in_pid = os.getpid()
        self.ready_in_pid: int | None = None

    def ready(self):
        """The module's device, after moving it there if this process has not used it yet."""
        if self.ready_in_pid != os.getpid():
            limit_threads_in_forked_child(self.loaded_in_pid)
            self.device = resolve_device(self.device_name)
            self.module.to(self.device)
            self.ready_in_pid = os.getpid()
        return self.device


def count_parameters(module) -> int:
    return int(sum(p.numel() for p in module.parameters()))
