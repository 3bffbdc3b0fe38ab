"""Training's determinism knobs: cuBLAS's workspace asked for before CUDA starts, one random stream
per DDP rank (a lone process keeps the one it always had), and --amp's dtypes."""

from __future__ import annotations

import pytest
import torch

from training import loop
from training.loop import TrainError, TrainSettings, rank_key, seed_everything


class FakeGroup:
    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    def get_rank(self) -> int:
        return self.rank

    def get_world_size(self) -> int:
        return self.world


def test_cublas_workspace_is_set_when_absent_and_a_users_own_is_kept(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    seed_everything(0)
    import os

    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    seed_everything(0)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_each_ddp_rank_draws_its_own_stream_and_a_lone_process_its_old_one(monkeypatch):
    seed_everything(7)
    alone = torch.rand(4)
    torch.manual_seed(7)
    assert torch.equal(alone, torch.rand(4))  # one process: the seed itself, as before ranks were seeded
    draws = []
    for rank in (0, 1):
        monkeypatch.setattr(loop, "distributed", lambda rank=rank: FakeGroup(rank, 2))
        assert rank_key() == ("rank", rank)
        seed_everything(7)
        draws.append(torch.rand(4))
    assert not torch.equal(draws[0], draws[1])
    monkeypatch.setattr(loop, "distributed", lambda: FakeGroup(0, 1))
    assert rank_key() == ()


def test_amp_takes_fp16_bf16_or_off_and_old_booleans():
    assert TrainSettings(source="s", out="o", amp=True).amp == "fp16"
    assert TrainSettings(source="s", out="o", amp=False).amp == "off"
    assert TrainSettings(source="s", out="o", amp="bf16").amp == "bf16"
    with pytest.raises(TrainError, match="--amp must be one of fp16, bf16, off"):
        TrainSettings(source="s", out="o", amp="fp8")
