from __future__ import annotations

import pytest
from planted_spurious import compose_planted


@pytest.fixture(scope="session")
def small_planted(tmp_path_factory):
    """A small planted spurious set (train / val / test), composed once per session."""
    return compose_planted(tmp_path_factory.mktemp("planted"), per_class=24, holdout=0.34)
