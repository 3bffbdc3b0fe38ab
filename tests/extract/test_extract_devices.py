"""Where extract's models run, decided before anything loads: CUDA devices and `--gpus` indexes
this machine lacks are one-line refusals that write nothing; the settings record the device type
and precision, and a folder begun under another is refused; Ray gives one actor per cluster GPU."""

import hashlib
import os
import time

import pytest
import torch
import yaml
from fake_imagenet import extract_args, write_tree
from tiny_models import write_tiny_lama, write_tiny_sam

from builder.backends.registry import BackendUnavailable
from builder.core.config import load_settings
from builder.core.errors import UsageError
from builder.core.stage import RunOptions
from builder.extract.shard_builder import ExtractConfig
from builder.extract.stage import place_models
from hsi.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="these refusals are for a machine without CUDA")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_tree(tmp_path_factory.mktemp("imagenet"), split="val", count=3)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    sam, lama = write_tiny_sam(folder), write_tiny_lama(folder)
    config = folder / "extract.yaml"
    trusted = [hashlib.sha256(lama.read_bytes()).hexdigest()]
    config.write_text(yaml.safe_dump({"sam_model": "auto", "trusted_sha256": trusted}))
    return ["--config", str(config), "--masker", "sam", "--sam-checkpoint", str(sam)]


def never_load(*args, **kwargs):
    raise AssertionError("a model was loaded before the refusal")


@no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
@pytest.mark.parametrize("with_sam", [False, True])
def test_device_cuda_without_cuda_is_one_line_in_seconds_and_writes_nothing(
    tree, models, tmp_path, capsys, monkeypatch, device, with_sam
):
    monkeypatch.setattr("builder.backends.sam.load_sam", never_load)
    out = tmp_path / "out"
    started = time.perf_counter()
    code = main(extract_args(tree.root, out, *(models if with_sam else []), "--device", device))
    seconds = time.perf_counter() - started
    err = capsys.readouterr().err
    assert code == 2 and seconds < 5
    assert err.splitlines() == [f"hsi extract: error: --device {device} was asked for but torch sees no CUDA device"]
    assert not out.exists()


@no_cuda
@pytest.mark.parametrize("gpus", ["0", "0,1"])
def test_gpus_that_do_not_exist_are_refused_never_run_on_the_cpu(tree, models, tmp_path, capsys, monkeypatch, gpus):
    monkeypatch.setattr("builder.backends.sam.load_sam", never_load)
    out = tmp_path / "out"
    assert main(extract_args(tree.root, out, *models, "--gpus", gpus)) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"hsi extract: error: --gpus {gpus} names GPU(s) {gpus}, but torch sees no CUDA device: pass indexes below 0 "
        "or leave --gpus out to run on the CPU"
    ]
    assert not out.exists()


def test_settings_record_device_type_and_precision_and_another_precision_is_refused(tree, models, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(extract_args(tree.root, out, *models, "--device", "cpu", "--precision", "fp32")) == 0
    recorded = load_settings(out / "parts")["val"]
    assert recorded["torch"] == {"intra_op_threads": 1, "device_type": "cpu", "precision": "fp32"}
    assert recorded["backends"]["masker"]["params"]["precision"] == "fp32"
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (out / "parts").iterdir())
    capsys.readouterr()
    assert main(extract_args(tree.root, out, *models, "--device", "cpu", "--precision", "bf16")) == 2
    err = capsys.readouterr().err
    # refused as any changed setting is
    assert err.startswith("hsi extract: error: ") and "torch.precision: 'fp32' -> 'bf16'" in err
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (out / "parts").iterdir()) == before
    # the default on the CPU is fp32: the same folder resumes (nothing to do)
    assert main(extract_args(tree.root, out, *models, "--device", "cpu")) == 0
    assert "already complete" in capsys.readouterr().out


def test_a_classical_run_records_no_torch_setting_and_refuses_a_precision(tree, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(extract_args(tree.root, out, "--precision", "bf16")) == 2
    assert capsys.readouterr().err.splitlines() == [
        "hsi extract: error: --precision applies to the model backends (--masker sam, --inpainter lama)"
    ]
    assert not out.exists()


def test_place_models_pins_auto_and_the_precision_and_counts_the_clusters_gpus():
    sam = ExtractConfig(masker="sam", device="auto")
    config, options = place_models(sam, RunOptions(runner="ray"), cluster_gpus=2)
    assert (config.device, config.precision, options.gpus) == ("cuda", "bf16", (0, 1))
    config, options = place_models(sam, RunOptions(runner="ray", workers=1), cluster_gpus=0)
    assert (config.device, config.precision, options.gpus) == ("cpu", "fp32", ())
    _, options = place_models(sam, RunOptions(runner="ray", workers=3), cluster_gpus=8)
    assert options.gpus == (0, 1, 2)  # --workers caps the GPU actors
    with pytest.raises(BackendUnavailable, match="the Ray cluster has no GPU"):
        place_models(ExtractConfig(masker="sam", device="cuda"), RunOptions(runner="ray"), cluster_gpus=0)
    with pytest.raises(UsageError, match="leave --gpus out"):
        place_models(sam, RunOptions(runner="ray", gpus=(0,)), cluster_gpus=2)
    with pytest.raises(UsageError, match="names one GPU"):
        place_models(ExtractConfig(masker="sam", device="cuda:1"), RunOptions(runner="ray"), cluster_gpus=2)
    with pytest.raises(BackendUnavailable, match="tf32 is a CUDA math mode"):
        place_models(ExtractConfig(masker="sam", device="cpu", precision="tf32"), RunOptions())


def test_ray_extract_on_a_cluster_declaring_two_gpus_starts_two_gpu_actors(tree, tmp_path, monkeypatch):
    """Ray declares 2 GPUs on this CPU machine: extract with SAM and `--device auto` takes one
    actor per GPU, each holding its own (the builder is swapped for one that reports the GPU ids
    Ray gave its actor: no CUDA is here to run SAM on)."""
    import ray

    from builder.extract.stage import ExtractStage, run_extract

    def report_gpu(plan):
        import ray

        from builder.core.runner import ShardResult
        from builder.core.shard_write import write_shard

        stats = write_shard(out / "parts" / plan.filename, [])
        time.sleep(1.0)  # each actor takes a shard before either finishes
        gpus = ",".join(map(str, ray.get_gpu_ids()))
        return ShardResult(stats, [], {"gpus": gpus, "pid": os.getpid()})

    out = tmp_path / "out"
    monkeypatch.setattr(ExtractStage, "shard_builder", lambda self: report_gpu)
    sam = write_tiny_sam(tmp_path)
    config = ExtractConfig(masker="sam", sam_model="auto", sam_checkpoint=str(sam), shard_size=1, max_skip_fraction=1)
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = run_extract(tree.root, out, config, options=RunOptions(runner="ray", progress=False))
        state = sorted((out / "parts" / "_state").glob("*.json"))
    finally:
        ray.shutdown()
    assert summary.shards_built == 3
    recorded = load_settings(out / "parts")["val"]["torch"]
    assert recorded == {"intra_op_threads": 1, "device_type": "cuda", "precision": "bf16"}
    import json

    counts = [json.loads(path.read_text())["counts"] for path in state]
    held = {c["pid"]: c["gpus"] for c in counts}
    assert len(held) == 2 and sorted(held.values()) == ["0", "1"]  # two actors, one GPU each
