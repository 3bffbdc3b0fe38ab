"""`hsi train --method`, one table (`--help`, dispatch and errors read it): a method is one module here and one
row of `METHODS`; trainers are imported only when a run uses them, so `hsi train --help` never imports torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module

from builder.core.errors import UsageError


@dataclass(frozen=True)
class Method:
    name: str
    trainer: str  # "module:function"
    needs_groups: bool  # it reweights or refits by group, so the data must say each sample's group
    summary: str

    def load(self) -> Callable:
        module, function = self.trainer.split(":")
        return getattr(import_module(module), function)


JTT = "Just Train Twice: upweight the errors of a short ERM run (Liu et al., ICML 2021)"
DFR = "deep feature reweighting: refit the last layer on group-balanced held-out data (Kirichenko et al., ICLR 2023)"
METHODS: dict[str, Method] = {
    row.name: row
    for row in (
        Method("erm", "training.methods.erm:train_erm", False, "empirical risk minimisation"),
        Method("jtt", "training.methods.jtt:train_jtt", True, JTT),
        Method("dfr", "training.methods.dfr:train_dfr", True, DFR),
    )
}


def method(name: str) -> Method:
    """The method called `name`, or a refusal naming the ones there are."""
    if name not in METHODS:
        raise UsageError(f"--method must be one of {', '.join(METHODS)}, got {name!r}")
    return METHODS[name]
