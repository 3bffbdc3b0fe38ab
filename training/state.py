"""A training run's checkpoints as data: `last.pt` (everything a resume needs) and `best.pt` (the
selected weights) hold tensors and plain values only, so they load with `weights_only=True`
(`builder.core.untrusted.load_torch`) and a crafted file cannot run code.

The RNG states are stored as plain values: python's Mersenne Twister as its tuple of ints, numpy's
as its key array (a tensor) and its counters, torch's as the byte tensors torch gives; restoring
them gives the same streams bit for bit, so a resumed run reaches the weights of an uninterrupted one.

A file that loads but is not a training state of the shape written here (a missing key, a wrong
type, weights of another model) is refused in one line naming the file and what is wrong.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from builder.core.errors import InputError
from builder.core.untrusted import Fields, UntrustedInput, load_torch

LAST, BEST, SETTINGS_NAME = "last.pt", "best.pt", "train_settings.json"
LAST_KEYS = (
    "model",
    "optimizer",
    "scheduler",
    "scaler",
    "rng",
    "epoch",
    "history",
    "best",
    "train_errors",
    "settings",
)


class TrainingStateError(InputError, ValueError):
    """A `last.pt` or `best.pt` that is not a training state this run can use."""


def plain(value: Any) -> Any:
    """`value` with numpy scalars and tuples made plain python (what `weights_only` loads)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


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
    """Restore what `rng_states` saved (`read_last` has checked its shape)."""
    import torch

    python, numpy_state = states["python"], states["numpy"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss_next"]))
    keys = numpy_state["keys"].numpy().astype(np.uint32)
    np.random.set_state(
        (numpy_state["name"], keys, numpy_state["pos"], numpy_state["has_gauss"], numpy_state["cached_gaussian"])
    )
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _tensor_dict(fields: Fields, key: str) -> dict:
    import torch

    value = fields.raw(key)
    if not isinstance(value, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in value.items()):
        raise fields.error("expected the model's weights (names -> tensors)", key)
    return value


def _check_rng(fields: Fields) -> None:
    import torch

    python = fields.object("python")
    python.integer("version")
    state = python.list("state")
    if len(state) != 625 or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32 for v in state):
        raise python.error("expected 625 integers of python's Mersenne Twister", "state")
    gauss = python.raw("gauss_next", None)
    if gauss is not None:
        python.number("gauss_next")
    numpy_state = fields.object("numpy")
    numpy_state.string("name", choices=("MT19937",))
    keys = numpy_state.raw("keys")
    if not torch.is_tensor(keys) or tuple(keys.shape) != (624,) or keys.dtype != torch.int64:
        raise numpy_state.error("expected 624 int64 keys of numpy's Mersenne Twister", "keys")
    if int(keys.min()) < 0 or int(keys.max()) >= 2**32:
        raise numpy_state.error("keys outside 0 .. 2**32 - 1", "keys")
    numpy_state.integer("pos", low=0, high=624)
    numpy_state.integer("has_gauss", low=0, high=1)
    numpy_state.number("cached_gaussian")
    generator = fields.raw("torch")
    if not torch.is_tensor(generator) or generator.dtype != torch.uint8:
        raise fields.error("expected torch's RNG state (a uint8 tensor)", "torch")
    if fields.has("cuda"):
        cuda = fields.list("cuda")
        if not all(torch.is_tensor(v) and v.dtype == torch.uint8 for v in cuda):
            raise fields.error("expected one uint8 tensor per CUDA device", "cuda")


def read_last(path: Path, hint: str = "") -> dict:
    """The checked training state of a `last.pt`: tensors and plain values only (never unpickled)."""
    state = load_torch(path, "training state", hint)
    fields = Fields(state, path)
    for key in LAST_KEYS:
        if key not in ("best", "train_errors"):
            fields.raw(key)  # "missing" by name
    _tensor_dict(fields, "model")
    for key in ("optimizer", "scheduler", "scaler"):
        fields.object(key)
    _check_rng(fields.object("rng"))
    fields.integer("epoch", low=0)
    for record in fields.objects("history"):
        record.integer("epoch", low=1)
    if state.get("best") is not None:
        fields.object("best").integer("epoch", low=1)
    errors = state.get("train_errors")
    if errors is not None and (
        not isinstance(errors, dict)
        or not all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in errors.items())
    ):
        raise fields.error("expected sample keys -> group names", "train_errors")
    fields.object("settings")
    if state.get("epoch_seconds") is not None:
        seconds = fields.list("epoch_seconds")
        timed = [v for v in seconds if v is not None]
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf for v in timed)
        if len(seconds) != state["epoch"] or not numbers:
            raise fields.error("expected one wall time (seconds, or null) per epoch run", "epoch_seconds")
    return state


def recorded_epoch_seconds(state: dict) -> list[float | None]:
    """The wall time of each epoch a checked `last.pt` ran (None for each epoch of a state written
    before they were kept): what a resumed run's timings start from."""
    seconds = state.get("epoch_seconds")
    return list(seconds) if seconds is not None else [None] * state["epoch"]


def read_best(path: Path, hint: str = "") -> dict:
    """The checked payload of a `best.pt`: the selected weights, their epoch and the run's settings."""
    payload = load_torch(path, "selected weights", hint)
    fields = Fields(payload, path)
    _tensor_dict(fields, "model")
    fields.integer("epoch", low=1)
    fields.object("settings")
    return payload


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
    if not rng:
        return
    try:
        set_rng_states(state["rng"])
    except (RuntimeError, ValueError, TypeError) as error:
        raise UntrustedInput(f"{path}: rng: not a random state this run can restore ({error})") from None
