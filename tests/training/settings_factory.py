"""The settings of the small `fit` runs in these tests: two epochs of a tiny timm model on the CPU,
model selection on the mean accuracy. Shared by the pytest tests and the torchrun probe (which finds
this module beside itself, as a script does)."""

from __future__ import annotations

from training.loop import TrainSettings

SMALL_RUN = dict(
    model="test_efficientnet_gn", epochs=2, batch_size=32, lr=0.05, device="cpu", shuffle_buffer=32, select="mean"
)


def small_run(source, out, **changes) -> TrainSettings:
    """The settings of a small run from the dataset `source` into the folder `out`; `changes` replace any field."""
    return TrainSettings(**{**SMALL_RUN, "source": str(source), "out": str(out), **changes})
