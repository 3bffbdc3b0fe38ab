"""`hsi probe` end to end on CPU: tiny random-init timm models (timm's own classes, saved and loaded
offline through evaluation's production loader) on a fake ImageNet val tree, a fake cue-conflict
folder and a small composed set evaluated on the fly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch
import yaml
from cue_conflict_factory import write_cue_conflict
from fake_imagenet import write_tree
from parts_factory import FakeImage, compose_quietly, distinct_color, write_parts

from hsi.cli import main

VAL_IMAGES = 2


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("probe-inputs")
    write_tree(root / "imagenet", count=4)
    checkpoints = []
    for seed in range(3):
        torch.manual_seed(seed)
        path = root / f"tiny{seed}.pth"
        torch.save(timm.create_model("test_efficientnet", pretrained=False).state_dict(), path)
        checkpoints.append(path)
    models = root / "models.yaml"
    models.write_text(yaml.safe_dump([{"model": str(p), "arch": "test_efficientnet"} for p in checkpoints]))
    images = [
        FakeImage(f"ILSVRC2012_val_{n + 1:08d}", wnid, (255, 255, 205 - 50 * n), distinct_color(n))
        for n, wnid in enumerate(["n01443537", "n02437312", "n02134084"])
    ]
    write_parts(root / "parts", {"val": images}, shard_size=3)
    composed = compose_quietly(root / "parts", "hard-spurious-imagenet", root / "composed").dataset_dir
    return {
        "imagenet": root / "imagenet",
        "cue": write_cue_conflict(root / "cue"),
        "models": models,
        "checkpoints": checkpoints,
        "composed": composed,
    }


def shape_probe(inputs, out: Path, *extra: str) -> list[str]:
    """`hsi probe` of the shape bias alone for the three test models."""
    return ["probe", "--models", str(inputs["models"]), "--probes", "shape", *_common(inputs, out), *extra]


def _common(inputs, out: Path) -> list[str]:
    return [
        "--source",
        str(inputs["imagenet"]),
        "--limit",
        str(VAL_IMAGES),
        "--cue-conflict",
        str(inputs["cue"]),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--batch-size",
        "8",
    ]


def test_one_model_runs_every_probe(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["probe", "--model", str(inputs["checkpoints"][0]), "--arch", "test_efficientnet", *_common(inputs, out)]
    assert main(args) == 0
    folders = [p for p in out.iterdir() if p.is_dir()]
    assert len(folders) == 1
    report = json.loads((folders[0] / "probes.json").read_text())
    spectral = report["spectral"]
    assert [row["cutoff"] for row in spectral["lowpass"]] == [0.01, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99]
    assert spectral["images"] == VAL_IMAGES and 0 <= spectral["clean_accuracy"] <= 1
    band = report["critical_band"]
    assert len(band["accuracy"]) == 5 and all(len(row) == 7 for row in band["accuracy"])
    assert len(band["thresholds"]) == 7 and all(0 <= t <= 4 for t in band["thresholds"])
    assert band["fit"] is not None or band["degenerate"]
    shape = report["shape"]
    assert shape["images"] == 17 and shape["dropped_same_cue"] == 1 and shape["cue_conflict_images"] == 16
    assert shape["shape_hits"] + shape["texture_hits"] + shape["neither"] == 16
    assert "1280" in " ".join(shape["notes"])
    assert report["preprocessing"]["crop_pct"] == pytest.approx(224 / 256)
    assert report["preprocessing"]["input_size"] == [224, 224]  # the published geometry, not timm's 160
    text = (folders[0] / "probes.md").read_text()
    assert "Spectral bias" in text and "Critical band" in text and "Shape bias" in text
    capsys.readouterr()
    assert main(args) == 0  # same weights and settings: read back, not re-run
    assert "already probed" in capsys.readouterr().err


@pytest.fixture(scope="module")
def evaluated(inputs, tmp_path_factory) -> Path:
    """`hsi eval` outputs of the three models, as a user would have them before `hsi probe`."""
    evals = tmp_path_factory.mktemp("evals")
    assert (
        main(
            [
                "eval",
                str(inputs["composed"]),
                "--models",
                str(inputs["models"]),
                "--out",
                str(evals),
                "--workers",
                "0",
                "--no-progress",
                "--device",
                "cpu",
                "--bootstrap",
                "20",
            ]
        )
        == 0
    )
    return evals


def test_three_models_read_from_eval_outputs(inputs, evaluated, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(shape_probe(inputs, out, "--eval-dir", str(evaluated), "--bootstrap", "50")) == 0
    table = (out / "probe_table.csv").read_text().splitlines()
    assert len(table) == 4 and "shape_bias" in table[0] and "worst_group_top1" in table[0] and "CoR_top1" in table[0]
    result = json.loads((out / "correlations.json").read_text())
    assert result["models"] == 3 and "note" not in result and result["pairs"]
    assert all(p["n"] == 3 for p in result["pairs"] if p["bias"] == "shape_bias")
    assert (out / "plots" / "probe_scatter.png").stat().st_size > 1000
    assert "correlations" in capsys.readouterr().out


def test_missing_evaluations_are_refused_before_any_probe(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(shape_probe(inputs, out, "--eval-dir", str(tmp_path / "none")))
    assert code == 2
    err = capsys.readouterr().err
    assert "run `hsi eval SOURCE` with the same --model/--models flags" in err and "--eval-source" in err
    assert not list(out.glob("*/probes.json"))


def test_two_models_evaluated_on_the_fly_say_there_is_no_correlation(inputs, tmp_path, capsys):
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump([{"model": str(p), "arch": "test_efficientnet"} for p in inputs["checkpoints"][:2]]))
    out, evals = tmp_path / "out", tmp_path / "evals"
    assert (
        main(
            [
                "probe",
                "--models",
                str(two),
                "--probes",
                "shape",
                *_common(inputs, out),
                "--eval-dir",
                str(evals),
                "--eval-source",
                str(inputs["composed"]),
                "--bootstrap",
                "20",
            ]
        )
        == 0
    )
    assert len(list(evals.glob("*/eval.json"))) == 2
    assert "at least 3 models" in (out / "correlations.md").read_text()
    assert "at least 3 models" in capsys.readouterr().out


def test_bad_inputs_are_usage_errors(inputs, tmp_path, capsys):
    bad = write_cue_conflict(tmp_path / "bad")
    (bad / "cat" / "cat1.jpg").write_bytes(b"x")
    base = [
        "probe",
        "--model",
        str(inputs["checkpoints"][0]),
        "--arch",
        "test_efficientnet",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main([*base, "--cue-conflict", str(bad)]) == 2
    assert "cat/cat1.jpg" in capsys.readouterr().err
    assert main([*base]) == 2
    assert "nothing to probe" in capsys.readouterr().err
    assert main(["probe", "--model", "timm:resnet18", "--cue-conflict", str(inputs["cue"]), "--device", "cpu"]) == 2
    assert "not available offline" in capsys.readouterr().err  # never random weights for a pretrained model


def bars(err: str, desc: str) -> list[str]:
    """The states tqdm drew of the bars whose name ends in `desc` (a bar's line has a `|`)."""
    lines = err.replace("\r", "\n").splitlines()
    return [line for line in lines if "|" in line and line.split("|")[0].rstrip(" 0123456789%").endswith(f"{desc}:")]


@pytest.mark.parametrize("progress", [True, False])
def test_each_probe_shows_a_bar_over_its_stimuli(inputs, tmp_path, capsys, progress):
    out = tmp_path / "out"
    args = ["probe", "--model", str(inputs["checkpoints"][0]), "--arch", "test_efficientnet", *_common(inputs, out)]
    assert main(args + ([] if progress else ["--no-progress"])) == 0
    err = capsys.readouterr().err
    # images x conditions: spectral 2 x 23 (clean, 11 low-pass, 11 high-pass), critical band 2 x 29
    # (noise-free once, 4 noise levels x 7 bands); shape: the 17 stimuli; and the val images decoded
    expected = {"val images": "2/2", "spectral bias": "46/46", "critical band": "58/58", "shape bias": "17/17"}
    for desc, count in expected.items():
        drawn = bars(err, desc)
        if progress:
            assert drawn and count in drawn[-1] and "100%" in drawn[-1], (desc, drawn)
        else:
            assert drawn == [], (desc, drawn)
