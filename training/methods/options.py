"""What a method's trainer takes besides TrainSettings and its folder: its own knobs (`MethodOptions`)
and how the run treats its folder and reports (`RunControl`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

C_GRID = (1.0, 0.7, 0.3, 0.1, 0.07, 0.03, 0.01)  # DFR's grid of inverse L1 strengths (the authors')


@dataclass(frozen=True)
class MethodOptions:
    method: str = "erm"
    jtt_epochs: int = 1
    jtt_upweight: int = 50
    jtt_errors: str = "train-pass"
    dfr_c: tuple[float, ...] = C_GRID
    dfr_refits: int = 20
    dfr_scaler: str = "train"
    erm_run: Path | None = None


@dataclass(frozen=True)
class RunControl:
    """What a run does with a folder that already holds one (continue it with `resume`, start again
    with `overwrite`, else refuse) and where its progress lines go."""

    resume: bool = False
    overwrite: bool = False
    announce: Callable[[str], None] = print

    def fit_keywords(self) -> dict:
        """The keywords `training.loop.fit` takes for them."""
        return {"resume": self.resume, "overwrite": self.overwrite, "announce": self.announce}
