"""Neutral controls (the paper's config with gray backgrounds added), the background-class analysis
against the controls' errors, and the -10 config's label spaces (1000-way full, 1000-way over the
subset, a 10-way model whose outputs are the config's labels)."""

from __future__ import annotations

import json

import pytest
import torch
from eval_cli import eval_args
from parts_factory import compose_images, compose_quietly
from planted import flat_images, save_planted

from builder.compose.spec import load_variant
from builder.core.classes import class_of
from hsi.cli import main

SUBSET = sorted(dict(load_variant("hard-spurious-imagenet-10").subset.pairs))


@pytest.fixture(scope="module")
def subset_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ten")
    images = flat_images(SUBSET, per_class=2)  # 1 image per class to train, 1 to test
    dataset, _ = compose_images(
        root, images, 8, "hard-spurious-imagenet-10", sizes="56", positions="center,top-right", shard_size=30
    )
    planted = save_planted(root / "planted_corner.pt", images, background_on_corner=True)
    return root, dataset, planted


class SubsetColumns(torch.nn.Module):
    """A 10-way model: the planted predictor's logits of the subset's classes, in label order."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.register_buffer("columns", torch.tensor([class_of(w).index for w in SUBSET]))

    def forward(self, x):
        return self.inner(x).index_select(1, self.columns)


class PreferTench(torch.nn.Module):
    """The planted logits plus a larger one for tench (class 0, outside the subset)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        out = self.inner(x)
        return torch.cat([out[:, :1] + 30.0, out[:, 1:]], 1)


def evaluate(dataset, spec, out, *extra):
    assert main(eval_args(dataset, spec, str(out), *extra, bootstrap=200)) == 0
    folder = next(p for p in out.iterdir() if p.is_dir())
    return json.loads((folder / "eval.json").read_text())


def by_cell(rows, metric="top1"):
    return {(r["position"], r["size"], r.get("background")): r[metric]["value"] for r in rows}


def test_neutral_controls_and_background_class_against_the_controls(flat_parts, planted_corner, tmp_path):
    dataset = compose_quietly(
        flat_parts[0],
        "hard-spurious-imagenet",
        tmp_path / "gray",
        overrides={"sizes": "56", "backgrounds": "original,random,gray"},
    ).dataset_dir
    report = evaluate(dataset, f"ts:{planted_corner}", tmp_path / "out", "--split", "val")
    metrics = report["metrics"]
    assert metrics["samples"] == 6 * 2 * 3 and metrics["sources"] == 6
    groups = {r["group"]: r["top1"]["value"] for r in metrics["by_group"]}
    assert groups == {"CeO": 1.0, "CoO": 1.0, "CeR": 1.0, "CoR": 0.0, "center/gray": 1.0, "top-right/gray": 0.0}
    controls = {
        (r["position"], r["control"], r["foreign"]): (r["control_top1"], r["foreign_top1"], r["difference"]["value"])
        for r in metrics["neutral_controls"]
    }
    assert controls == {("center", "gray", "random"): (1.0, 1.0, 0.0), ("top-right", "gray", "random"): (0.0, 0.0, 0.0)}
    bg = metrics["background_class"]
    assert bg["control"] == "neutral backgrounds (gray)" and bg["control_errors"] == "errors on the control backgrounds"
    cells = {r["group"]: r for r in bg["by_group_size"]}
    assert cells["CoR"]["share_of_errors"]["value"] == 1.0 and cells["CoR"]["share_of_predictions"]["value"] == 1.0
    assert cells["CeR"]["share_of_predictions"]["value"] == 0.0
    # every control error named tench, never a background's class: the share expected by chance of
    # the model's own error habits is 0, against the 1.0 observed
    assert cells["CoR"]["expected_share_of_errors"] == 0.0
    assert bg["chance_share_of_errors"] == round(1 / 999, 6)
    md = (tmp_path / "out" / "ts_planted_corner.pt" / "eval.md").read_text()
    assert (
        "## Neutral controls" in md
        and "| top-right | 56 | gray | random | 0.000 | 0.000 | 0.000 [0.000, 0.000] |" in md
    )


def test_paired_backgrounds_of_the_subset(subset_setup, tmp_path):
    _, dataset, planted = subset_setup
    report = evaluate(dataset, f"ts:{planted}", tmp_path / "full")
    metrics = report["metrics"]
    assert report["data"]["split"] == "test" and metrics["samples"] == 10 * 2 * 2 and metrics["sources"] == 10
    groups = {r["group"]: r["top1"]["value"] for r in metrics["by_group"]}
    assert groups == {"CeO": 1.0, "CoO": 1.0, "center/paired": 1.0, "top-right/paired": 0.0}
    bg = metrics["background_class"]
    assert bg["samples"] == "backgrounds from another class (paired)" and bg["control"] == "own backgrounds"
    cells = {r["group"]: r for r in bg["by_group_size"]}
    assert cells["top-right/paired"]["share_of_errors"]["value"] == 1.0
    assert cells["center/paired"]["share_of_predictions"]["value"] == 0.0
    frame_paired = [r for r in bg["by_group_size"] if r["group"] == "top-right/paired"][0]
    assert frame_paired["mean_prob_background_class"] > 0.99
    assert report["label_space"]["name"] == "imagenet"


def test_label_spaces_subset_argmax_and_a_ten_way_model_agree(subset_setup, tmp_path):
    root, dataset, planted = subset_setup
    subset = evaluate(dataset, f"ts:{planted}", tmp_path / "subset", "--label-space", "subset")
    assert subset["label_space"] == {
        "name": "subset",
        "classes": 10,
        "description": "1000-way model, argmax over the config's 10 classes",
    }
    assert subset["metrics"]["background_class"]["chance_share_of_errors"] == round(1 / 9, 6)
    # a model whose top logit is always tench (outside the subset): wrong everywhere over 1000
    # classes, and exactly the planted predictor over the subset's 10
    prefer = root / "prefer_tench.pt"
    torch.jit.trace(PreferTench(torch.jit.load(str(planted))), torch.rand(1, 3, 224, 224)).save(str(prefer))
    full = evaluate(dataset, f"ts:{prefer}", tmp_path / "prefer-full")
    assert full["metrics"]["overall"]["top1"]["value"] == 0.0
    restricted = evaluate(dataset, f"ts:{prefer}", tmp_path / "prefer-subset", "--label-space", "subset")
    assert restricted["metrics"]["by_group"] == subset["metrics"]["by_group"]
    groups = {r["group"]: r["top1"]["value"] for r in restricted["metrics"]["by_group"]}
    assert groups == {"CeO": 1.0, "CoO": 1.0, "center/paired": 1.0, "top-right/paired": 0.0}

    ten_way = root / "ten_way.pt"
    torch.jit.trace(SubsetColumns(torch.jit.load(str(planted))), torch.rand(1, 3, 224, 224)).save(str(ten_way))
    ten = evaluate(dataset, f"ts:{ten_way}", tmp_path / "ten")
    assert ten["label_space"]["name"] == "config" and ten["label_space"]["classes"] == 10
    assert ten["metrics"]["by_group"] == subset["metrics"]["by_group"]
    assert ten["metrics"]["background_class"] == subset["metrics"]["background_class"]
