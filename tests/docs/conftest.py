"""The world the documentation's examples assume, built once per session: a working directory that
holds the release `hard-spurious-imagenet` (the paper's config and the -10 subset, validated),
`predictions.csv` for it, a tiny classifier as `model.pt` (TorchScript) and as `model.pt2`
(`torch.export`, any batch size), a tiny random CLIP as `tiny-clip.safetensors` (open_clip's
`hsi-tiny-clip`, registered for the session), and `DIR`, the paper's config as `hsi export` image
folders. Each test gets its own copy as its working directory, with `data` naming the release, as
the README says."""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch
from parts_factory import compose_quietly, distinct_color, fake_images, write_parts
from tiny_clip import save_tiny_openclip
from torch import nn
from trusted_code import trust_flags

from builder.compose.spec import load_variant
from builder.core.classes import class_of
from evaluation.predicting.predictions import read_predictions
from hsi.cli import main

WNIDS = ("n01443537", "n02437312", "n02134084")  # goldfish, Arabian camel, ice bear
RELEASE = "hard-spurious-imagenet"  # the name the docs load it by, from its parent folder
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# what the examples' working directory holds, beside the release
FILES = ("predictions.csv", "model.pt", "model.pt2", "DIR", "tiny-clip.safetensors")


class BackgroundReader(nn.Module):
    """A classifier for the flat-colour composites of tests/parts_factory.py, with ImageNet
    normalisation: it names the class whose background colour is nearest to the canvas's
    bottom-left pixel, which no centre or top-right object covers. So it is right on own
    backgrounds (CeO, CoO) and names the background's class on foreign ones (CeR, CoR)."""

    def __init__(self, wnids):
        super().__init__()
        self.register_buffer("colours", torch.tensor([distinct_color(c) for c in range(len(wnids))], dtype=torch.float))
        self.register_buffer("classes", torch.tensor([class_of(w).index for w in wnids]))
        self.register_buffer("mean", torch.tensor([IMAGENET_MEAN]))
        self.register_buffer("std", torch.tensor([IMAGENET_STD]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pixel = (x[:, :, -1, 0] * self.std + self.mean) * 255.0
        nearest = ((pixel[:, None, :] - self.colours[None]) ** 2).sum(-1).argmin(1)
        return nn.functional.one_hot(self.classes[nearest], 1000).float() * 10.0


def save_models(folder: Path) -> None:
    """model.pt (traced) and model.pt2 (exported, any batch size): one model, two formats."""
    module = BackgroundReader(WNIDS).eval()
    example = torch.rand(2, 3, 224, 224)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit is deprecated; users still have .pt files
        torch.jit.trace(module, example).save(str(folder / "model.pt"))
    batch = torch.export.Dim("batch")
    torch.export.save(torch.export.export(module, (example,), dynamic_shapes=({0: batch},)), folder / "model.pt2")
    odd = torch.rand(5, 3, 224, 224)
    assert torch.equal(torch.export.load(folder / "model.pt2").module()(odd), module(odd))


@dataclass(frozen=True)
class Examples:
    root: Path  # the release and FILES
    release: str  # the release's folder name, relative to the working directory
    samples: int  # in the release's default config
    metrics: dict  # eval.json metrics of `hsi eval ts:model.pt` with ImageNet mean and std


@pytest.fixture(scope="session")
def doc_examples(tmp_path_factory) -> Examples:
    build = tmp_path_factory.mktemp("docs-build")
    root = tmp_path_factory.mktemp("docs-examples")
    write_parts(build / "parts", {"val": fake_images(WNIDS, per_class=2)}, shard_size=3)
    paper = compose_quietly(build / "parts", "hard-spurious-imagenet", build / "composed").dataset_dir
    ten_wnids = sorted(dict(load_variant("hard-spurious-imagenet-10").subset.pairs))
    write_parts(build / "ten-parts", {"val": fake_images(ten_wnids, per_class=2)}, shard_size=10)
    ten = compose_quietly(build / "ten-parts", "hard-spurious-imagenet-10", build / "composed").dataset_dir
    for dataset in (paper, ten):
        assert main(["validate", str(dataset), "--no-previews"]) == 0
    assert main(["release", "--out", str(root / RELEASE), str(paper), str(ten), "--version", "v1.0.0"]) == 0
    assert main(["export", str(paper), "--imagefolder", str(root / "DIR")]) == 0
    save_models(root)
    save_tiny_openclip(root / "tiny-clip.safetensors")  # and registers hsi-tiny-clip with open_clip, for zero-shot.md
    mean, std = (",".join(map(str, v)) for v in (IMAGENET_MEAN, IMAGENET_STD))
    out = build / "eval"
    model = f"ts:{root / 'model.pt'}"
    run = [
        "eval",
        str(root / RELEASE),
        "--model",
        model,
        *trust_flags(model),
        "--mean",
        mean,
        "--std",
        std,
        "--out",
        str(out),
    ]
    assert main([*run, "--workers", "0", "--no-progress"]) == 0
    (folder,) = [p.parent for p in out.glob("*/eval.json")]
    frame, _ = read_predictions(folder / "predictions.parquet")
    frame = frame[frame["status"] == "ok"]
    table = pd.DataFrame({"key": frame["key"], "pred_class": frame["pred_class"]})
    table["top5_class"] = [";".join(str(int(c)) for c in top) for top in frame["top5_class"]]
    table.to_csv(root / "predictions.csv", index=False)
    metrics = json.loads((folder / "eval.json").read_text())["metrics"]
    return Examples(root, RELEASE, len(table), metrics)


@pytest.fixture
def examples_cwd(doc_examples, tmp_path, monkeypatch) -> Path:
    """A fresh copy of the examples' world as the working directory; datasets caches inside it."""
    import datasets

    for name in (RELEASE, *FILES):
        source = doc_examples.root / name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    # load_dataset() without cache_dir, as the docs call it, must not fill the user's ~/.cache
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / ".hf-cache")
    return tmp_path
