"""Shared plumbing of the torch backends: where the weights come from (a flag, an environment
variable or a hub id), their sha256, the device, the model placed once per process, a batch that
halves itself when the GPU runs out of memory, and the provenance a backend records
(`TorchBackend` bundles the last four).

Importing this module does not import torch; the functions that need it import it when called, so
`hsi extract --masker box` never pays for torch.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from builder.backends.base import BackendInfo
from builder.backends.loader_gate import LoaderRefused, hub_snapshot, model_folder
from builder.backends.registry import BackendUnavailable, from_setting
from builder.core.hashing import sha256_file

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


def check_gpu_indexes(indexes: Sequence[int], flag: str = "--gpus") -> None:
    """Refuse GPU indexes this machine does not have (`--gpus 0` with no GPU must never run on the
    CPU instead), in one line, before any model loads."""
    if not indexes:
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    missing = [index for index in indexes if index < 0 or index >= count]
    if missing:
        seen = f"torch sees {count} CUDA device(s)" if count else "torch sees no CUDA device"
        raise BackendUnavailable(
            f"{flag} {','.join(map(str, indexes))} names GPU(s) {','.join(map(str, missing))}, but {seen}: "
            f"pass indexes below {count}" + (" or leave --gpus out to run on the CPU" if not count else "")
        )


def run_device_type(name: str, cluster_gpus: int | None = None) -> str:
    """ "cuda" or "cpu": where a run with `--device name` does its model work, checked before any
    model loads. `cluster_gpus` is a Ray cluster's GPU count (None: this machine's CUDA decides)."""
    check_device_name(name)
    if name == "cpu":
        return "cpu"
    if cluster_gpus is not None:
        if name == "auto":
            return "cuda" if cluster_gpus else "cpu"
        if not cluster_gpus:
            raise BackendUnavailable(f"--device {name} was asked for but the Ray cluster has no GPU: pass --device cpu")
        return "cuda"
    if name == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    resolve_device(name)  # refuses a CUDA device this machine lacks
    return "cuda"


def device_type_named(name: str) -> str:
    """ "cuda" or "cpu" for a --device value, without refusing: `auto` asks this machine."""
    if name == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if name.startswith("cuda") else "cpu"


# The math a torch backend runs in. bf16: autocast to bfloat16 where a backend allows it (SAM's
# image encoder), TF32 matmuls elsewhere; tf32: float32 tensors, TF32 matmuls and convolutions
# (CUDA only); fp32: strict float32 (TF32 off, also for cuDNN, whose default allows it).
PRECISIONS = ("bf16", "tf32", "fp32")


def resolve_precision(precision: str | None, device_type: str) -> str:
    """`--precision`, or its default on `device_type`: bf16 on CUDA, fp32 on the CPU."""
    if precision is None:
        return "bf16" if device_type == "cuda" else "fp32"
    if precision not in PRECISIONS:
        raise BackendUnavailable(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "tf32" and device_type != "cuda":
        raise BackendUnavailable("--precision tf32 is a CUDA math mode: on the CPU pass fp32 (or bf16)")
    return precision


@contextmanager
def math_mode(device, precision: str, autocast_bf16: bool) -> Iterator[None]:
    """Run a block in `precision` on `device`: TF32 allowed on CUDA unless fp32 (restored after);
    with `autocast_bf16`, bf16 autocast under `--precision bf16` (a backend's choice: only where its
    ops keep their accuracy)."""
    import torch

    cuda = getattr(device, "type", str(device)) == "cuda"
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) if cuda else None
    if cuda:
        allowed = precision != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = allowed
        torch.backends.cudnn.allow_tf32 = allowed
    try:
        if autocast_bf16 and precision == "bf16":
            with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16):
                yield
        else:
            yield
    finally:
        if before is not None:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@dataclass(frozen=True)
class CheckpointSource:
    """Where a backend's weights file comes from (a flag, else a variable), and what to tell the
    user when it is missing."""

    what: str  # e.g. "the SAM vit_h checkpoint"
    flag: str  # e.g. "--sam-checkpoint"
    variable: str  # e.g. "HSI_SAM_CHECKPOINT"
    published: str  # where the official file is published

    def help(self) -> str:
        return (
            f"give it with {self.flag} PATH or the {self.variable} environment variable; "
            f"the official file is published at {self.published}"
        )

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

    @property
    def setting(self) -> str:
        """The flat setting the flag fills (`--sam-checkpoint` -> `sam_checkpoint`)."""
        return self.flag.removeprefix("--").replace("-", "_")

    def config_field(self) -> Any:
        """A backend config's `checkpoint` field: read from this source's setting; None: the variable."""
        return from_setting(self.setting)


@dataclass(frozen=True)
class CheckpointConfig:
    """What every backend loaded from one checkpoint file takes: the file, where to run it, and how
    many images share a forward pass (halved on out-of-memory). A subclass names its `source` and
    declares `checkpoint = source.config_field()`."""

    source: ClassVar[CheckpointSource]
    checkpoint: str | None = None  # None: the source's environment variable
    device: str = "auto"
    batch_size: int = 8
    precision: str | None = None  # PRECISIONS; None: bf16 on CUDA, fp32 on the CPU

    def __post_init__(self) -> None:
        if self.precision is not None and self.precision not in PRECISIONS:
            raise BackendUnavailable(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")

    def locate(self) -> Path:
        """The checkpoint file, after checking the device name: both refuse before any work."""
        check_device_name(self.device)
        return self.source.locate(self.checkpoint)


@dataclass(frozen=True)
class HubModelSource:
    """Weights in Hugging Face hub format (a folder of configs and weight files): a local folder
    as given, else the hub id's snapshot (from the local cache when HF_HUB_OFFLINE=1)."""

    what: str  # e.g. "the detector"
    flag: str  # e.g. "--detector"
    hub_id: str  # the published model
    holds: str  # what the folder must hold, e.g. "the transformers-format weights"
    patterns: tuple[str, ...]  # the snapshot's files worth fetching

    def help(self) -> str:
        return (
            f"Pass {self.flag} with a folder holding {self.holds} (published at https://huggingface.co/{self.hub_id})."
        )

    def locate(self, model_id: str) -> Path:
        if self.is_local(model_id) or Path(model_id).expanduser().is_symlink():
            return model_folder(Path(model_id).expanduser(), f"{self.what} ({self.flag})")  # no link, no code
        try:
            return hub_snapshot(model_id, list(self.patterns))
        except LoaderRefused:
            raise
        except Exception as exc:  # the hub client raises many kinds; all mean "not available here"
            raise BackendUnavailable(
                f"cannot load {self.what} {model_id!r}: it is neither a local folder nor available from the "
                f"Hugging Face Hub ({type(exc).__name__}: {exc}). {self.help()}"
            ) from None

    @staticmethod
    def is_local(model_id: str) -> bool:
        return Path(model_id).expanduser().is_dir()

    def public_name(self, model_id: str) -> str:
        """What provenance records: a folder's name (never a machine path) or the hub id."""
        return Path(model_id).name if self.is_local(model_id) else model_id


_sha_cache: dict[tuple[str, int, int], str] = {}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")


def checkpoint_sha256(path: Path) -> str:
    """sha256 of a checkpoint file, computed once per process for an unchanged file (checkpoints
    are gigabytes, and every worker describes its backends)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _sha_cache:
        _sha_cache[key] = sha256_file(path, chunk=1 << 22)
    return _sha_cache[key]


def weight_files_sha256(folder: Path) -> dict[str, str]:
    """sha256 of each weight file of a hub-format model folder, by file name."""
    return {
        path.name: checkpoint_sha256(path)
        for path in sorted(Path(folder).iterdir())
        if path.is_file() and path.suffix in WEIGHT_SUFFIXES
    }


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


class TorchBackend:
    """What every torch backend shares: its model, moved to its device once per process; a batch
    size that halves on out-of-memory; and its provenance, which names the checkpoint file (never
    a machine path) and its sha256. Subclasses set `name` and pass their own parameters."""

    name: ClassVar[str]

    def __init__(
        self,
        module,
        checkpoint_name: str,
        sha256: str | None,
        device: str,
        batch_size: int,
        batch_what: str,
        precision: str | None = None,
    ) -> None:
        self.placement = ProcessLocalModel(module, device)
        self.batch = AdaptiveBatch(batch_size, batch_what)
        self.checkpoint_name = checkpoint_name
        self.sha256 = sha256
        self.precision_asked = precision

    def ready(self):
        """The model's device, after moving the model there if this process has not used it yet."""
        return self.placement.ready()

    @property
    def device_type(self) -> str:
        """ "cuda" or "cpu": where this backend runs (a Ray driver may name CUDA it lacks itself)."""
        return device_type_named(self.placement.device_name)

    @property
    def precision(self) -> str:
        """The math this backend runs in (PRECISIONS): --precision, else its device type's default."""
        return resolve_precision(self.precision_asked, self.device_type)

    def provenance(self, params: dict) -> BackendInfo:
        return BackendInfo(self.name, params, checkpoint=self.checkpoint_name, checkpoint_sha256=self.sha256)
