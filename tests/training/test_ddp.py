"""DDP through torchrun: 2 CPU ranks (gloo) train one epoch; each rank streams its own, disjoint half
of the train split (stream() splits the samples by rank) and both end with the same weights
(gradients are averaged every step)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("ddp_probe.py")


@pytest.mark.slow
def test_two_ranks_stream_disjoint_halves_and_end_with_the_same_weights(tiny_planted, tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed beside this python")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [torchrun, "--standalone", "--nproc-per-node", "2", str(PROBE), str(tiny_planted), str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world_size"] for r in ranks} == {2}
    first, second = (set(r["keys"]) for r in ranks)
    assert first and second and not first & second
    train = json.loads((tiny_planted / "_info.json").read_text())["splits"]["train"]
    assert len(first) == len(second) == train["num_samples"] // 2
    assert ranks[0]["weights"] == ranks[1]["weights"]
    assert ranks[0]["samples_trained"] == len(first)  # rank 0 trained on its half only
