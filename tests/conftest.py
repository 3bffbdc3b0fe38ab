import os
import sys
from pathlib import Path

import pytest

# Tests never reach the network: the Hub client and datasets stay offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).parent))


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _zero_shot_cache_in_tmp(tmp_path_factory):
    """Text classifiers a test builds (zero-shot CLIP) go to a folder of the session, never to the
    user's cache ($HF_HOME/hsi/zero-shot); a test that counts cache hits points it at its own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HSI_ZERO_SHOT_CACHE", str(tmp_path_factory.mktemp("zero-shot-cache")))
        yield
