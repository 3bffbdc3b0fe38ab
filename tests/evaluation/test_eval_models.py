"""The model registry with tiny random-init models built by timm's and torchvision's own classes,
saved and loaded back offline through the production loader; clear refusals otherwise."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
import torchvision
from trusted_code import trust_flags

from evaluation.model_formats.models import ModelError, ModelOptions, load_model
from hsi.cli import main

ROOT = Path(__file__).resolve().parents[2]


def same_outputs(a, b, size=160) -> bool:
    x = torch.rand(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return torch.equal(a.eval()(x), b.eval()(x))


@pytest.fixture(scope="module")
def tiny_timm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timm")
    torch.manual_seed(0)
    model = timm.create_model("test_resnet", pretrained=False)
    torch.save(model.state_dict(), folder / "test_resnet.pth")
    ten = timm.create_model("test_resnet", pretrained=False, num_classes=10)
    torch.save(ten.state_dict(), folder / "test_resnet_10.pth")
    return folder, model, ten


def test_timm_checkpoint_loads_offline_through_timms_overlay(tiny_timm):
    folder, model, _ = tiny_timm
    loaded = load_model("timm:test_resnet", ModelOptions(checkpoint=folder / "test_resnet.pth"))
    assert same_outputs(loaded.module, model)
    assert loaded.checkpoint_name == "test_resnet.pth"
    assert loaded.checkpoint_sha256 == hashlib.sha256((folder / "test_resnet.pth").read_bytes()).hexdigest()
    pre = loaded.preprocessing
    # the model's own data config (160 px input), but never its crop_pct: the canvas is only resized
    assert pre.input_size == (160, 160) and pre.crop_pct is None and pre.source == "timm data config"
    assert pre.mean == timm.data.resolve_data_config(model=model)["mean"]
    bare = load_model("test_resnet", ModelOptions(checkpoint=folder / "test_resnet.pth"))  # a bare timm name
    assert bare.spec == "timm:test_resnet" and same_outputs(bare.module, model)


def test_a_changed_class_count_needs_num_classes_in_the_overlay(tiny_timm):
    folder, _, ten = tiny_timm
    loaded = load_model("timm:test_resnet", ModelOptions(checkpoint=folder / "test_resnet_10.pth", num_classes=10))
    assert same_outputs(loaded.module, ten)
    with pytest.raises(ModelError, match="test_resnet_10.pth"):
        load_model("timm:test_resnet", ModelOptions(checkpoint=folder / "test_resnet_10.pth"))


def test_state_dict_file_with_arch(tiny_timm):
    folder, model, _ = tiny_timm
    loaded = load_model(str(folder / "test_resnet.pth"), ModelOptions(arch="test_resnet"))
    assert same_outputs(loaded.module, model) and loaded.spec == "test_resnet.pth (timm:test_resnet)"
    with pytest.raises(ModelError, match="--arch"):
        load_model(str(folder / "test_resnet.pth"))
    with pytest.raises(ModelError, match="no such file"):
        load_model("timm:test_resnet", ModelOptions(checkpoint=folder / "missing.pth"))


def test_torchvision_checkpoint_and_offline_refusal(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = torchvision.models.get_model("squeezenet1_1", weights=None)
    torch.save({"state_dict": model.state_dict()}, tmp_path / "squeeze.pth")
    loaded = load_model("tv:squeezenet1_1", ModelOptions(checkpoint=tmp_path / "squeeze.pth"))
    assert same_outputs(loaded.module, model, 224)
    assert loaded.preprocessing.input_size == (224, 224) and loaded.preprocessing.crop_pct is None
    assert loaded.preprocessing.interpolation == "bilinear"
    # offline: no cached file, and every connection refused (a closed loopback port as the proxy)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    with pytest.raises(ModelError) as caught:
        load_model("tv:squeezenet1_1")
    message = str(caught.value)
    assert "--checkpoint" in message and "TORCH_HOME" in message and "https://download.pytorch.org/models/" in message
    with pytest.raises(ModelError, match="torchvision has no model"):
        load_model("tv:no_such_net")


def test_offline_pretrained_timm_weights_error_names_flag_variable_and_hub(tmp_path, paper_set):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf-home"))
    env.pop("HF_HUB_CACHE", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hsi.cli",
            "eval",
            str(paper_set),
            "--split",
            "val",
            "--model",
            "timm:test_resnet",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("hsi eval: error: the pretrained weights of timm:test_resnet are not available offline")
    assert (
        "--checkpoint FILE" in error
        and "HF_HOME" in error
        and "HF_HUB_OFFLINE" in error
        and "https://huggingface.co/timm/test_resnet.r160_in1k" in error
    )
    assert not (tmp_path / "out").exists()  # nothing written, no model substituted


class SevenWay(torch.nn.Module):
    def forward(self, x):
        return x.mean((2, 3)).repeat(1, 3)[:, :7]


def test_outputs_that_fit_no_label_space_are_refused_before_any_work(paper_set, tmp_path, capsys):
    path = tmp_path / "seven.pt"
    torch.jit.trace(SevenWay(), torch.rand(1, 3, 224, 224)).save(str(path))
    code = main(
        [
            "eval",
            str(paper_set),
            "--split",
            "val",
            "--model",
            f"ts:{path}",
            *trust_flags(f"ts:{path}"),
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert (
        "hsi eval: error: the model has 7 outputs, which fit neither ImageNet-1k (1000) nor this config's 1000 labels"
        in err
    )
    assert "--classes FILE" in err and not (tmp_path / "out").exists()


def test_bad_model_specs_are_usage_errors(paper_set, tmp_path, capsys):
    (tmp_path / "junk.pt").write_bytes(b"not a model")
    for spec, expected in (
        (f"ts:{tmp_path / 'nope.pt'}", "no such TorchScript file"),
        (f"ts:{tmp_path / 'junk.pt'}", "junk.pt: not a TorchScript file: RuntimeError: "),
        ("timm:no_such_model_xyz", "timm has no model 'no_such_model_xyz'"),
    ):
        trusted = ["--trust-code"]  # a file torch cannot read is still refused as such when trusted
        assert (
            main(["eval", str(paper_set), "--split", "val", "--model", spec, "--out", str(tmp_path / "o"), *trusted])
            == 2
        )
        assert expected in capsys.readouterr().err
    assert main(["eval", str(paper_set), "--split", "val", "--out", str(tmp_path / "o")]) == 2
    assert "exactly one of --model" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "missing"), "--model", "x", "--out", str(tmp_path / "o")]) == 2
    assert "is not a folder" in capsys.readouterr().err
