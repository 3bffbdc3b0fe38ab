"""The Ray Data runner writes the local runner's shards byte for byte, records results the same way,
and resumes from either runner's finished shards. A local Ray with 2 CPUs is started here."""

import hashlib
import json
import os

import pytest
import ray

from builder.core.hashing import sha256_file
from builder.core.ray_runner import run_shards_ray
from builder.core.runner import STATE_DIR, Interrupted, load_finished, plan_shards, run_shards
from builder.extract.shard_builder import ExtractConfig, ExtractShardBuilder, load_backends

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
from fake_imagenet import write_tree  # noqa: E402
from tiny_models import write_tiny_lama, write_tiny_sam  # noqa: E402

from builder.extract.sources import load_sources  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("work")
    tree = write_tree(root / "imagenet", split="val", count=6)
    lama = write_tiny_lama(root)
    config = ExtractConfig(
        masker="sam",
        inpainter="lama",
        sam_model="auto",
        sam_checkpoint=str(write_tiny_sam(root)),
        lama_checkpoint=str(lama),
        trusted_sha256=(hashlib.sha256(lama.read_bytes()).hexdigest(),),  # the tests' own TorchScript file
        device="cpu",
        batch_size=2,
        shard_size=2,
    )
    records = load_sources(tree.root, "val", None, announce=lambda _: None).records
    load_backends(config)  # as extract does: checkpoints are checked before any work
    return config, plan_shards("val", records, config.shard_size)


def build_locally(config, plans, out):
    return run_shards(plans, ExtractShardBuilder(config, str(out)), out, workers=1, progress=False)


def test_ray_shards_equal_the_local_runner_byte_for_byte(local_ray, job, tmp_path):
    config, plans = job
    local, ray_out = tmp_path / "local", tmp_path / "ray"
    local_results, _ = build_locally(config, plans, local)
    ray_results, reused = run_shards_ray(plans, ExtractShardBuilder(config, str(ray_out)), ray_out, progress=False)
    assert reused == 0 and len(plans) == 3
    assert [r.stats for r in ray_results] == [
        r.stats for r in local_results
    ]  # names, counts, bytes, sha256, in plan order
    for plan in plans:
        assert sha256_file(ray_out / plan.filename) == sha256_file(local / plan.filename)
        assert json.loads((ray_out / STATE_DIR / f"{plan.filename}.json").read_text()) == json.loads(
            (local / STATE_DIR / f"{plan.filename}.json").read_text()
        )
    assert [r.counts for r in ray_results] == [r.counts for r in local_results]


def test_ray_resumes_from_shards_the_local_runner_finished(local_ray, job, tmp_path):
    config, plans = job
    out = tmp_path / "mixed"
    build_locally(config, plans[:1], out)  # a run that stopped after its first shard
    first = (out / plans[0].filename).stat().st_mtime_ns
    results, reused = run_shards_ray(plans, ExtractShardBuilder(config, str(out)), out, progress=False)
    assert reused == 1 and (out / plans[0].filename).stat().st_mtime_ns == first
    assert [r.stats.filename for r in results] == [p.filename for p in plans]
    again, reused_again = run_shards_ray(plans, ExtractShardBuilder(config, str(out)), out, progress=False)
    assert reused_again == 3 and [r.stats for r in again] == [r.stats for r in results]


def test_ray_patchmatch_parts_equal_the_local_runner_byte_for_byte(local_ray, tmp_path):
    """PatchMatch is seeded by image id, so Ray's actors fill each image as the local runner does."""
    tree = write_tree(tmp_path / "imagenet", split="val", count=4)
    config = ExtractConfig(inpainter="patchmatch", dilation=5, shard_size=2)
    records = load_sources(tree.root, "val", None, announce=lambda _: None).records
    plans = plan_shards("val", records, config.shard_size)
    local, ray_out = tmp_path / "local", tmp_path / "ray"
    build_locally(config, plans, local)
    run_shards_ray(plans, ExtractShardBuilder(config, str(ray_out)), ray_out, progress=False)
    assert len(plans) == 2
    for plan in plans:
        assert sha256_file(ray_out / plan.filename) == sha256_file(local / plan.filename)


def test_ctrl_c_on_ray_is_the_local_runners_interrupted_and_keeps_finished_shards(
    local_ray, job, tmp_path, monkeypatch
):
    config, plans = job
    out = tmp_path / "stopped"
    build_locally(config, plans[:1], out)  # finished by an earlier run

    def key_press_after_one_shard(ray_module, plans, todo, build, out_dir, *rest):
        build_locally(config, [plans[todo[0]]], out_dir)
        raise KeyboardInterrupt

    monkeypatch.setattr("builder.core.ray_runner._run_on_ray", key_press_after_one_shard)
    message = r"^interrupted: 1 of the 2 shards to build were finished \(and 1 from earlier runs\); run the same"
    with pytest.raises(Interrupted, match=message):
        run_shards_ray(plans, ExtractShardBuilder(config, str(out)), out, progress=False)
    assert ray.is_initialized()  # a Ray the caller started is left running
    assert [load_finished(out, plan) is not None for plan in plans] == [True, True, False]
