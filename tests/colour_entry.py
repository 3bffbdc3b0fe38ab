"""An `hsi eval` entry to verify: the mean-colour classifier (tests/tiny_models.py) traced to
TorchScript and evaluated on a small composed dataset, as the leaderboard tests submit it."""

from __future__ import annotations

from pathlib import Path

from release_factory import make_composed_dataset
from tiny_models import MeanColour
from trusted_code import trust_flags

from hsi.cli import main

MODEL_FOLDER = "ts_colour.pt"


def colour_entry(root: Path, *entry_flags: str) -> tuple[Path, Path, Path]:
    """(the model folder `hsi eval ts:colour.pt` wrote under root/out, its data, the model file)."""
    import torch

    data = make_composed_dataset(root / "composed", splits={"test": 12}, shard_size=4)
    model = root / "colour.pt"
    torch.jit.trace(MeanColour(), torch.rand(1, 3, 224, 224)).save(str(model))
    argv = ["eval", str(data), "--model", f"ts:{model}", *trust_flags(f"ts:{model}"), "--out", str(root / "out")]
    assert main([*argv, "--workers", "0", "--no-progress", "--bootstrap", "20", *entry_flags]) == 0
    return root / "out" / MODEL_FOLDER, data, model
