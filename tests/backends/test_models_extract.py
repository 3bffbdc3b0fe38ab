"""`hsi extract --masker sam --inpainter lama` end to end through the CLI and the production loaders,
with the tiny SAM and tiny big-lama saved to a temporary folder."""

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from fake_imagenet import extract_args, shard_hashes, write_tree
from PIL import Image
from tiny_models import write_tiny_lama, write_tiny_sam

from builder.core.config import load_settings
from builder.formats.parts import iter_parts
from hsi.cli import main


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    sam, lama = write_tiny_sam(folder), write_tiny_lama(folder)
    # The tiny SAM is not one of Meta's three sizes: its architecture comes from the file (`auto`).
    config = folder / "extract.yaml"
    # The LaMa stand-in is TorchScript (code): trusted by its sha256 in the config, as a user would.
    trusted = [hashlib.sha256(lama.read_bytes()).hexdigest()]
    config.write_text(yaml.safe_dump({"sam_model": "auto", "trusted_sha256": trusted}))
    return {"sam": sam, "lama": lama, "config": config}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_tree(tmp_path_factory.mktemp("imagenet"), split="val", count=7)


def sam_and_lama(models) -> list[str]:
    """The flags that extract with the tiny SAM and LaMa stand-ins of `models` (checkpoints not given)."""
    return ["--config", str(models["config"]), "--masker", "sam", "--inpainter", "lama"]


def extract_with_models(tree, models, out, *extra) -> int:
    checkpoints = ["--sam-checkpoint", str(models["sam"]), "--lama-checkpoint", str(models["lama"])]
    extra = ["--device", "cpu", "--shard-size", "3", *map(str, extra)]
    return main(extract_args(tree.root, out, *sam_and_lama(models), *checkpoints, *extra))


@pytest.fixture(scope="module")
def reference_run(tree, models, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    assert extract_with_models(tree, models, out, "--batch-size", 3) == 0
    return out / "parts"


def test_manifest_records_both_models_and_their_checkpoint_hashes(reference_run, models, tree):
    manifest = json.loads((reference_run / "_info.json").read_text())
    masker, inpainter = manifest["backends"]["masker"], manifest["backends"]["inpainter"]
    assert masker["name"] == "sam" and inpainter["name"] == "lama"
    assert masker["checkpoint"] == models["sam"].name and inpainter["checkpoint"] == models["lama"].name
    assert masker["checkpoint_sha256"] == hashlib.sha256(models["sam"].read_bytes()).hexdigest()
    assert inpainter["checkpoint_sha256"] == hashlib.sha256(models["lama"].read_bytes()).hexdigest()
    assert manifest["splits"]["val"]["num_samples"] == len(tree.good)
    text = (reference_run / "_info.json").read_text()
    assert str(models["sam"].parent) not in text  # file names only, never machine paths
    # every process runs SAM and LaMa with the run's one intra-op thread, device type and precision: a resume
    # under another is refused
    torch_setting = load_settings(reference_run)["val"]["torch"]
    assert torch_setting == {"intra_op_threads": 1, "device_type": "cpu", "precision": "fp32"}


def test_parts_keep_unerased_pixels_and_the_background_is_full_resolution(reference_run, tree):
    sources = {img.image_id: img for img in tree.good}
    erased_somewhere = False
    for parts in iter_parts(reference_run):
        source = sources[parts.key]
        path = next(tree.root.rglob(f"{parts.key}.JPEG"))
        original = np.asarray(Image.open(io.BytesIO(path.read_bytes())).convert("RGB"))
        assert parts.background.shape == original.shape == (source.size[1], source.size[0], 3)
        assert np.array_equal(parts.background[~parts.erase], original[~parts.erase])
        assert parts.meta["provenance"]["backends"]["masker"]["name"] == "sam"
        x0, y0, x1, y1 = parts.meta["object_box"]
        assert parts.mask.shape == (y1 - y0 + 1, x1 - x0 + 1)
        assert np.array_equal(parts.crop, original[y0 : y1 + 1, x0 : x1 + 1])
        # every SAM mask pixel is erased (the erase mask is the dilated union of the box masks)
        full = np.zeros(original.shape[:2], bool)
        full[y0 : y1 + 1, x0 : x1 + 1] = parts.mask
        assert not (full & ~parts.erase).any()
        erased_somewhere |= bool(parts.erase.any())
    assert erased_somewhere


def test_batch_size_and_workers_do_not_change_a_byte(reference_run, tree, models, tmp_path):
    assert extract_with_models(tree, models, tmp_path / "b1", "--batch-size", 1) == 0
    assert extract_with_models(tree, models, tmp_path / "w2", "--batch-size", 2, "--workers", 2) == 0
    expected = shard_hashes(reference_run)
    assert len(expected) == 3
    assert shard_hashes(tmp_path / "b1" / "parts") == expected
    assert shard_hashes(tmp_path / "w2" / "parts") == expected


@pytest.mark.parametrize("missing", ["sam", "lama"])
def test_missing_checkpoint_exits_2_before_any_output(tree, models, tmp_path, capsys, monkeypatch, missing):
    monkeypatch.delenv("HSI_SAM_CHECKPOINT", raising=False)
    monkeypatch.delenv("LAMA_MODEL", raising=False)
    args = extract_args(tree.root, tmp_path / "out", *sam_and_lama(models), "--device", "cpu")
    if missing == "lama":
        args += ["--sam-checkpoint", str(models["sam"])]
    else:
        args += ["--lama-checkpoint", str(models["lama"])]
    assert main(args) == 2
    err = capsys.readouterr().err
    flag, variable = (
        ("--sam-checkpoint", "HSI_SAM_CHECKPOINT") if missing == "sam" else ("--lama-checkpoint", "LAMA_MODEL")
    )
    assert "hsi extract: error:" in err and flag in err and variable in err
    assert not (tmp_path / "out" / "parts").exists()


def test_corrupt_checkpoint_exits_2_before_any_output(tree, models, tmp_path, capsys):
    corrupt = tmp_path / "sam_vit_h_4b8939.pth"
    corrupt.write_bytes(models["sam"].read_bytes()[:2000])
    code = main(
        extract_args(
            tree.root, tmp_path / "out", "--masker", "sam", "--sam-checkpoint", str(corrupt), "--device", "cpu"
        )
    )
    assert code == 2
    assert "sam_vit_h_4b8939.pth cannot be used" in capsys.readouterr().err
    assert not (tmp_path / "out" / "parts").exists()


def report_visible_gpu(plan):
    """A shard builder that writes an empty shard and reports the GPU its process was pinned to."""
    import os

    from builder.core.runner import ShardResult
    from builder.core.shard_write import write_shard

    stats = write_shard(Path(os.environ["HSI_TEST_OUT"]) / plan.filename, [])
    return ShardResult(stats, [], {"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid()})


def test_one_spawned_worker_per_gpu_each_pinned_to_its_own(tmp_path, monkeypatch):
    from builder.core.runner import plan_shards, run_shards

    monkeypatch.setenv("HSI_TEST_OUT", str(tmp_path))
    plans = plan_shards("val", list(range(8)), 1)
    results, reused = run_shards(plans, report_visible_gpu, tmp_path, progress=False, worker_devices=["3", "5"])
    assert reused == 0 and [r.stats.filename for r in results] == [p.filename for p in plans]
    pinned = {r.counts["pid"]: r.counts["gpu"] for r in results}
    assert set(pinned.values()) <= {"3", "5"} and len(set(pinned.values())) == len(pinned)  # one GPU per process
    assert len(pinned) <= 2 and os.getpid() not in pinned
