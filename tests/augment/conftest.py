"""Shared fixtures of the SCGS tests: a small planted -10-style config (train, val, test), a random
tiny timm ERM checkpoint in `hsi train`'s format, and the tiny inpainting pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest
from planted_spurious import compose_planted
from scgs_factory import write_erm_checkpoint
from tiny_sd import cached_tiny_inpaint_pipeline


@pytest.fixture(scope="session")
def planted_source(tmp_path_factory) -> Path:
    return compose_planted(tmp_path_factory.mktemp("scgs-planted"), per_class=16, holdout=0.34)


@pytest.fixture(scope="session")
def erm_checkpoint(tmp_path_factory) -> Path:
    return write_erm_checkpoint(tmp_path_factory.mktemp("scgs-erm") / "best.pt")


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory) -> Path:
    return cached_tiny_inpaint_pipeline(tmp_path_factory)
