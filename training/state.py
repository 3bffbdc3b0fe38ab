"""The checkpoints a training run writes, one model each, shared by the writer and every reader: `last.pt`
(all a resume needs) and `best.pt` (the selected weights). The checkpoints hold tensors
and plain values only, so they load with `weights_only=True` and a crafted file cannot run code; the
RNG states are plain values, so a resumed run draws the same streams bit for bit."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from builder.core.errors import InputError
from builder.core.untrusted import StrictModel, UntrustedInput, load_torch, parse_model

LAST, BEST, SETTINGS_NAME = "last.pt", "best.pt", "train_settings.json"


class TrainingStateError(InputError, ValueError):
    """A `last.pt` or `best.pt` that is not a training state this run can use."""


def _tensor(problem: str, fits: Callable[[Any], bool] = lambda _: True) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        import torch

        if not (torch.is_tensor(value) and fits(value)):
            raise PydanticCustomError("tensor", problem)
        return value

    return check


Weights = dict[str, Annotated[Any, AfterValidator(_tensor("expected the model's weights (names -> tensors)"))]]
ByteTensor = Annotated[
    Any, AfterValidator(_tensor("expected an RNG state (a uint8 tensor)", lambda v: str(v.dtype) == "torch.uint8"))
]


def _mt_keys(v: Any) -> bool:
    return tuple(v.shape) == (624,) and str(v.dtype) == "torch.int64" and 0 <= int(v.min()) <= int(v.max()) < 2**32


NumpyKeys = Annotated[
    Any, AfterValidator(_tensor("expected numpy's 624 Mersenne Twister keys (int64, < 2**32)", _mt_keys))
]
Fraction = Annotated[float, Field(ge=0, le=1)]


class SplitScores(StrictModel):
    """A split's accuracy (`training.groups.selection_scores`); the worst group is null on data without groups."""

    mean: Fraction
    worst_group: Fraction | None
    worst_group_name: str | None
    groups: dict[str, Fraction]
    samples: int = Field(ge=0)


class EpochRecord(StrictModel):
    epoch: int = Field(ge=1)
    loss: Annotated[float, Field(allow_inf_nan=True)]  # a diverged run still writes its checkpoint
    samples: int = Field(ge=0)
    lr: float
    val: SplitScores


class PythonRng(StrictModel):
    version: int
    state: list[Annotated[int, Field(ge=0, lt=2**32)]] = Field(min_length=625, max_length=625)
    gauss_next: float | None = None


class NumpyRng(StrictModel):
    name: Literal["MT19937"]
    keys: NumpyKeys
    pos: int = Field(ge=0, le=624)
    has_gauss: int = Field(ge=0, le=1)
    cached_gaussian: float


class RngStates(StrictModel):
    python: PythonRng
    numpy: NumpyRng
    torch: ByteTensor
    cuda: list[ByteTensor] | None = None


class LastState(StrictModel):
    """`last.pt`: the model, optimiser, schedule, scaler and RNG states after `epoch`, with the history."""

    model: Weights
    optimizer: dict[Any, Any]
    scheduler: dict[Any, Any]
    scaler: dict[Any, Any]
    rng: RngStates
    epoch: int = Field(ge=0)
    history: list[EpochRecord]
    best: EpochRecord | None = None
    train_errors: dict[str, str | None] | None = None  # key -> group, misclassified in the last pass
    settings: dict[str, Any]
    epoch_seconds: list[Annotated[float, Field(ge=0)] | None] | None = None  # absent before they were kept

    @field_validator("epoch_seconds")
    @classmethod
    def _one_per_epoch(cls, seconds: list | None, info: ValidationInfo) -> list | None:
        if seconds is not None and len(seconds) != info.data.get("epoch"):
            raise PydanticCustomError("per_epoch", "expected one wall time (seconds, or null) per epoch run")
        return seconds


class BestState(StrictModel):
    """`best.pt`: the weights `--select` kept, their epoch, the run's settings and the labels."""

    model: Weights
    epoch: int = Field(ge=1)
    val: SplitScores | None = None
    settings: dict[str, Any]
    wnids: list[Annotated[str, Field(pattern=r"^n\d{8}$")]] | None = None


def checked(model: type[StrictModel], payload: dict, source: Path | str) -> dict:
    """`payload` itself (state dicts keep their torch metadata), refused in one line unless it is a `model`."""
    parse_model(model, payload, source)
    return payload


def read_last(path: Path, hint: str = "") -> dict:
    return checked(LastState, load_torch(path, "training state", hint), path)


def read_best(path: Path, hint: str = "") -> dict:
    return checked(BestState, load_torch(path, "selected weights", hint), path)


def recorded_epoch_seconds(state: dict) -> list[float | None]:
    """Each epoch's wall time from a checked `last.pt` (None for those of a state from before they were kept)."""
    return list(state.get("epoch_seconds") or [None] * state["epoch"])


def plain(value: Any) -> Any:
    """`value` with numpy scalars and tuples made plain python (what `weights_only` loads)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def rng_states() -> dict:
    import torch

    version, mt, gauss_next = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    states = {
        "python": {"version": int(version), "state": [int(v) for v in mt], "gauss_next": gauss_next},
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = list(torch.cuda.get_rng_state_all())
    return states


def set_rng_states(states: dict) -> None:
    import torch

    python, numpy_state = states["python"], states["numpy"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss_next"]))
    keys = numpy_state["keys"].numpy().astype(np.uint32)
    np.random.set_state(
        (numpy_state["name"], keys, numpy_state["pos"], numpy_state["has_gauss"], numpy_state["cached_gaussian"])
    )
    torch.set_rng_state(states["torch"])
    if states.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def restore(state: dict, path: Path, *parts: tuple[str, Any], rng: bool = True) -> None:
    """Load each (key, object with `load_state_dict`) of `state`, and (with `rng`) the RNG states; a
    state that does not fit (weights of another model, an optimiser of another kind) is one line."""
    for key, target in parts:
        try:
            target.load_state_dict(state[key])
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as error:
            first = str(error).strip().splitlines()[0][:160] if str(error).strip() else type(error).__name__
            raise TrainingStateError(
                f"{path}: {key} does not fit this run ({first}); train into a new --out, or pass --overwrite"
            ) from None
    if rng:
        try:
            set_rng_states(state["rng"])
        except (RuntimeError, ValueError, TypeError) as error:
            raise UntrustedInput(f"{path}: rng: not a random state this run can restore ({error})") from None
