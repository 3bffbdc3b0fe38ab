from __future__ import annotations

import pytest
from planted_spurious import compose_planted


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One torch thread per test: for models this small, on 2 busy cores, the thread pool's spinning
    made the planted-set test 10x slower (220 s against 15-25 s wall)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def small_planted(tmp_path_factory):
    """A small planted spurious set (train / val / test), composed once per session."""
    return compose_planted(tmp_path_factory.mktemp("planted"), per_class=24, holdout=0.34)


@pytest.fixture(scope="session")
def tiny_planted(tmp_path_factory):
    """The planted set at 32 px, 16 photos per class: the command-line tests' data."""
    return compose_planted(
        tmp_path_factory.mktemp("tiny-planted"), per_class=16, canvas=32, sizes=(16,), majority=0.9, holdout=0.5
    )
