"""`hsi eval DATA --predictions FILE` beside flags of a model run (the model, its preprocessing, its
batches, --limit, --clean, --parts): refused in one line naming them, before anything is written,
instead of scoring the file as if they had not been given. Each test failed on the code before #24."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest
from release_factory import make_composed_dataset

from hsi.cli import build_parser, main

SAMPLES = 12

# every model-run flag of hsi eval, with a value that is not its default
MODEL_RUN_FLAGS = {
    "--model": ["timm:resnet18"],
    "--models": ["timm:resnet18,tv:resnet50"],
    "--checkpoint": ["weights.pt"],
    "--arch": ["resnet18"],
    "--num-classes": ["10"],
    "--classes": ["classes.txt"],
    "--label-space": ["subset"],
    "--crop-pct": ["0.875"],
    "--mean": ["0,0,0"],
    "--std": ["1,1,1"],
    "--input-size": ["32"],
    "--interpolation": ["bilinear"],
    "--batch-size": ["8"],
    "--workers": ["0"],
    "--model-workers": ["2"],
    "--runner": ["ray"],
    "--ray-address": ["ray://head:10001"],
    "--slurm-partition": ["gpu"],
    "--slurm-gpus-per-task": ["1"],
    "--slurm-array-parallelism": ["2"],
    "--slurm-time": ["30"],
    "--slurm-config": ["slurm.yaml"],
    "--device": ["cpu"],
    "--amp": [],
    "--channels-last": [],
    "--limit": ["4"],
    "--clean": ["imagenet"],
    "--clean-split": ["train"],
    "--parts": ["parts"],
    "--trust-file": ["0" * 64],
    "--trust-code": [],
    "--templates": ["simple"],
}
# what scoring a file reads (and --from, the other input, refused beside it on its own)
SCORING_FLAGS = {"-h", "--help", "--config", "--split", "--out", "--predictions", "--bootstrap", "--seed"}
SCORING_FLAGS |= {"--overwrite"}  # #33: replaces another model's evaluation where the file's results go
SCORING_FLAGS |= {
    "--no-progress",
    "--preprocessing",
    "--from",
    "--entry-name",
    "--architecture",
    "--training-data",
    "--paper",
    "--entry-url",
}


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A composed dataset and a predictions CSV naming each of its samples."""
    root = tmp_path_factory.mktemp("predictions-flags")
    dataset = make_composed_dataset(root / "data", splits={"test": SAMPLES}, shard_size=4)
    predictions = root / "predictions.csv"
    keys = [f"test_{i:06d}" for i in range(SAMPLES)]  # release_factory's sample keys
    pd.DataFrame({"key": keys, "pred_class": [i % 7 for i in range(SAMPLES)]}).to_csv(predictions, index=False)
    return dataset, predictions


def command(scored, out: Path, *extra: str) -> list[str]:
    dataset, predictions = scored
    return ["eval", str(dataset), "--predictions", str(predictions), "--out", str(out), "--bootstrap", "10", *extra]


def refusal(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("hsi eval: error: --predictions already fixes the model's outputs"), err
    return err


def test_the_list_is_every_flag_of_hsi_eval_that_scoring_does_not_read():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["eval"]
    flags = {flag for action in sub._actions for flag in action.option_strings}
    assert flags - SCORING_FLAGS == set(MODEL_RUN_FLAGS)


@pytest.mark.parametrize("flag", sorted(MODEL_RUN_FLAGS))
def test_a_model_run_flag_beside_predictions_is_refused_by_name(scored, tmp_path, capsys, flag):
    out = tmp_path / "out"
    assert main(command(scored, out, flag, *MODEL_RUN_FLAGS[flag])) == 2
    err = refusal(capsys)
    assert f"so {flag} (for a model run) does not apply; drop it" in err
    assert not out.exists()


def test_several_are_named_together(scored, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(command(scored, out, "--model", "timm:resnet18", "--mean", "0,0,0", "--amp")) == 2
    assert "so --model, --mean, --amp (for a model run) do not apply; drop them" in refusal(capsys)
    assert not out.exists()


def test_from_beside_predictions_is_refused(scored, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(command(scored, out, "--from", str(tmp_path / "predictions.parquet"))) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "hsi eval: error: --from recomputes an hsi eval predictions.parquet, --predictions scores a file made "
        "elsewhere: pass one"
    )
    assert not out.exists()


def test_flags_at_their_defaults_and_scoring_flags_are_accepted(scored, tmp_path, capsys):
    """Only flags a user changed are refused: the same values as the defaults change nothing."""
    out = tmp_path / "out"
    defaults = ["--batch-size", "64", "--workers", "2", "--device", "auto", "--label-space", "imagenet"]
    assert main(command(scored, out, *defaults, "--split", "test", "--seed", "3", "--no-progress")) == 0
    report = json.loads((out / "predictions" / "eval.json").read_text())  # #33: named after the file's stem
    assert report["metrics"]["samples"] == SAMPLES and report["data"]["split"] == "test"
