"""`--runner ray` on a cluster of two Ray nodes (two raylets on this machine, Ray's own
cluster_utils): an output folder every node sees is used, and one that another node cannot see
(simulated: that node's probe finds nothing) is refused in one line before any shard is built; with
an s3:// output (moto's server on loopback) the actors send their shards to the store, the driver
fetches them from there, and the bytes are the local run's, even where no node sees another's disk."""

import hashlib
import os
from pathlib import Path

import pytest
import ray
from fake_imagenet import shard_hashes, write_tree
from s3_server import loopback_s3
from slurm_cluster import BytesShardBuilder

from builder.core import ray_runner
from builder.core.object_store import StoreFolder
from builder.core.ray_runner import OutputNotShared, other_nodes, run_shards_ray
from builder.core.runner import plan_shards
from hsi.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as patch, loopback_s3(patch) as bucket:
        patch.setenv("HSI_STAGING", str(tmp_path_factory.mktemp("staging")))
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        # the workers import these tests' shard builder as this process does
        path = [str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]
        patch.setenv("PYTHONPATH", os.pathsep.join(p for p in path if p))
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            cluster.wait_for_nodes()
            yield bucket
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


def test_actors_send_their_shards_to_the_store_and_the_bytes_are_the_local_runs(two_nodes, tmp_path, monkeypatch):
    tree = write_tree(tmp_path / "imagenet", split="val", count=4)
    extract = ["extract", "--no-progress", "--source", str(tree.root), "--out", str(tmp_path), "--shard-size", "2"]
    assert main(extract) == 0
    flags = ["--sizes", "40,56", "--shard-size", "3", "--name", "small", "--no-progress"]
    assert main(["compose", "--parts", str(tmp_path / "parts"), "--out", str(tmp_path / "local"), *flags]) == 0
    monkeypatch.setattr(ray_runner, "_probe_sees", lambda path, token: False)  # no node sees another's disk
    sent_by_driver = []
    upload = StoreFolder.upload  # this process only: the actors' own uploads are not counted

    def counted(self, local, name):
        sent_by_driver.append(name)
        upload(self, local, name)

    monkeypatch.setattr(StoreFolder, "upload", counted)
    url = f"{two_nodes}/ray"
    args = ["compose", "--parts", str(tmp_path / "parts"), "--out", url, "--runner", "ray", *flags]
    assert main(args) == 0
    assert sent_by_driver[-1] == "_info.json"
    assert not [name for name in sent_by_driver if name.endswith(".tar") or name.startswith("_state/")]
    local = tmp_path / "local" / "small"
    store = StoreFolder(f"{url}/small")
    listed = store.files()
    for name, digest in shard_hashes(local).items():
        assert listed[name] == (local / name).stat().st_size
        assert hashlib.sha256(store.read_bytes(name)).hexdigest() == digest
    for name in ("_info.json", "errors.jsonl"):
        assert store.read_bytes(name) == (local / name).read_bytes()
