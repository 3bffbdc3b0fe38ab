"""`--runner ray` on a cluster of two Ray nodes (two raylets on this machine, Ray's own
cluster_utils): an output folder every node sees is used, and one that another node cannot see
(simulated: that node's probe finds nothing) is refused in one line before any shard is built."""

import os
from pathlib import Path

import pytest
import ray
from slurm_cluster import BytesShardBuilder

from builder.core import ray_runner
from builder.core.ray_runner import OutputNotShared, other_nodes, run_shards_ray
from builder.core.runner import plan_shards

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        # the workers import these tests' shard builder as this process does
        path = [str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]
        patch.setenv("PYTHONPATH", os.pathsep.join(p for p in path if p))
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            cluster.wait_for_nodes()
            yield cluster
        finally:
            ray.shutdown()
            cluster.shutdown()


def test_an_output_every_node_sees_is_used(two_nodes, tmp_path):
    assert len(other_nodes(ray)) == 1
    out = tmp_path / "out"
    plans = plan_shards("val", list(range(4)), 1)
    results, reused = run_shards_ray(plans, BytesShardBuilder(str(out)), out, progress=False)
    assert reused == 0 and [r.stats.filename for r in results] == [p.filename for p in plans]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the probe file is gone


def test_an_output_another_node_cannot_see_is_refused_before_any_shard(two_nodes, tmp_path, monkeypatch):
    monkeypatch.setattr(ray_runner, "_probe_sees", lambda path, token: False)  # that node has its own disk
    out = tmp_path / "out"
    out.mkdir()
    plans = plan_shards("val", list(range(4)), 1)
    with pytest.raises(OutputNotShared) as refusal:
        run_shards_ray(plans, BytesShardBuilder(str(out)), out, progress=False)
    message = str(refusal.value)
    assert "\n" not in message and "1 of the 1 other nodes" in message and str(out) in message
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
