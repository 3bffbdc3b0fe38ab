"""The one intra-op thread rule of the stages that run torch (builder/backends/torch_threads.py): a
float sum torch splits over its threads rounds by the thread count, so a shard built in a lone
process with 2 threads and one built in a forked worker (which must use 1) differed; under the rule
both give the same bytes, and the planning process gets its own count back afterwards."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.backends.torch_threads import (
    STAGE_INTRA_OP_THREADS,
    stage_threads,
    threads_setting,
    use_stage_threads,
)
from builder.core.manifest import ShardStats
from builder.core.runner import ShardPlan, ShardResult, run_shards

torch = pytest.importorskip("torch")


def parallel_sum(seed: int) -> float:
    """A sum large enough for torch to split over its intra-op threads (2**20 floats)."""
    return torch.randn(2**20, generator=torch.Generator().manual_seed(seed)).sum().item()


@pytest.fixture
def two_threads():
    """This process with 2 intra-op threads (what a lone process gets on a 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@dataclass(frozen=True)
class SumShard:
    """A shard builder with torch arithmetic: its shard holds the float32 bytes of a parallel sum."""

    out_dir: Path

    def __call__(self, plan: ShardPlan) -> ShardResult:
        use_stage_threads()
        payload = struct.pack("<f", parallel_sum(plan.index))
        path = self.out_dir / plan.filename
        path.write_bytes(payload)
        return ShardResult(ShardStats(path.name, 1, len(payload), hashlib.sha256(payload).hexdigest()))


def shard_digests(out: Path, workers: int) -> list[str]:
    out.mkdir()
    plans = [ShardPlan("train", index, (index,)) for index in range(4)]
    with stage_threads():  # as a stage's planning process holds it around its run
        results, _ = run_shards(plans, SumShard(out), out, workers=workers, progress=False)
    return [result.stats.sha256 for result in results]


def test_the_sums_round_by_the_thread_count(two_threads):
    # the premise: without the rule a lone process (2 threads) and a forked worker (1) differ
    two = parallel_sum(0)
    torch.set_num_threads(1)
    assert parallel_sum(0) != two


def test_one_process_and_two_forked_workers_write_the_same_bytes(two_threads, tmp_path):
    assert shard_digests(tmp_path / "one", workers=1) == shard_digests(tmp_path / "two", workers=2)
    assert torch.get_num_threads() == 2  # the caller's count is back


def test_the_rule_is_one_thread_and_recorded_as_such(two_threads):
    with stage_threads():
        assert torch.get_num_threads() == STAGE_INTRA_OP_THREADS == 1
    assert torch.get_num_threads() == 2
    assert threads_setting() == {"intra_op_threads": 1}
