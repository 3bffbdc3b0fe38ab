"""`hsi.score` and `hsi eval DATA --predictions FILE`: predictions exported from an `hsi eval` run
score to the same eval.json metrics, and a broken predictions file is one line naming what broke."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from eval_cli import eval_args

from builder.core.errors import HsiError
from evaluation.bootstrap import BootstrapSettings
from evaluation.predictions import read_predictions
from hsi.cli import main


@pytest.fixture(scope="module")
def evaluated(paper_set, planted_corner, tmp_path_factory):
    """A tiny model evaluated by `hsi eval` (bootstrap 100): its eval.json and predictions table."""
    out = tmp_path_factory.mktemp("score-eval")
    assert main(eval_args(paper_set, f"ts:{planted_corner}", out)) == 0
    folder = out / "ts_planted_corner.pt"
    frame, _ = read_predictions(folder / "predictions.parquet")
    return json.loads((folder / "eval.json").read_text())["metrics"], frame[frame["status"] == "ok"]


def exported(frame, path, *, probabilities: bool = True):
    """The predictions as a CSV of key, pred_class, top-5 as ';'-separated text (and probabilities)."""
    table = pd.DataFrame({"key": frame["key"], "pred_class": frame["pred_class"]})
    table["top5_class"] = [";".join(str(int(c)) for c in top) for top in frame["top5_class"]]
    if probabilities:
        table["prob_background_class"] = frame["prob_background_class"]
    table.to_csv(path, index=False)
    return path


def test_score_of_a_csv_gives_the_metrics_of_hsi_eval(evaluated, paper_set, tmp_path):
    import hsi

    metrics, frame = evaluated
    csv = exported(frame, tmp_path / "predictions.csv")
    evaluation = hsi.score(csv, paper_set, bootstrap=BootstrapSettings(resamples=100))
    assert evaluation.to_dict()["metrics"] == metrics
    assert evaluation.worst_group == metrics["groups_summary"]["worst_group"]
    table = evaluation.table()
    cell = metrics["by_group_size"][0]
    assert table.loc[cell["group"], cell["size"]] == cell["top1"]["value"]
    assert table.shape == (len(metrics["by_group"]), len(metrics["by_size"]))
    folder = evaluation.save(tmp_path / "saved")
    assert json.loads((folder / "eval.json").read_text())["metrics"] == metrics
    assert (folder / "eval.md").is_file() and (folder / "predictions.parquet").is_file()
    assert (folder / "plots").is_dir() and any((folder / "plots").iterdir())


def test_key_and_class_only_give_the_same_top1_metrics(evaluated, paper_set, tmp_path):
    import hsi

    metrics, frame = evaluated
    pd.DataFrame({"key": frame["key"], "pred_class": frame["pred_class"]}).to_csv(tmp_path / "p.csv", index=False)
    report = hsi.score(tmp_path / "p.csv", paper_set, bootstrap=BootstrapSettings(resamples=100)).to_dict()
    assert report["metrics"]["by_group_size"] == [
        {**row, "top5": report["metrics"]["by_group_size"][n]["top5"]} for n, row in enumerate(metrics["by_group_size"])
    ]
    assert any("top-5 = top-1" in note for note in report["notes"])


def test_cli_predictions_writes_the_same_eval_json(evaluated, paper_set, tmp_path):
    metrics, frame = evaluated
    csv = exported(frame, tmp_path / "exported.csv")
    out = tmp_path / "out"
    assert main(["eval", str(paper_set), "--predictions", str(csv), "--out", str(out), "--bootstrap", "100"]) == 0
    report = json.loads((out / "predictions_exported.csv" / "eval.json").read_text())
    assert report["metrics"] == metrics and report["data"]["verified"] == "sha256"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda t: t.iloc[1:], "no prediction for sample"),
        (lambda t: pd.concat([t, t.iloc[[3]]]), "appears twice"),
        (lambda t: pd.concat([t, t.iloc[[0]].assign(key="not-a-sample")]), "key not-a-sample names no sample"),
        (lambda t: t.assign(pred_class=[1000, *t["pred_class"].iloc[1:]]), "'1000' is not an ImageNet class index"),
        (
            lambda t: t.drop(columns="pred_class").assign(pred_wnid=["n99999999", *["n01440764"] * (len(t) - 1)]),
            "'n99999999' is not an ImageNet-1k wnid",
        ),
    ],
)
def test_a_broken_predictions_file_is_one_line_naming_it(evaluated, paper_set, tmp_path, change, named):
    import hsi

    _, frame = evaluated
    table = change(pd.DataFrame({"key": frame["key"], "pred_class": frame["pred_class"]}))
    table.to_csv(tmp_path / "broken.csv", index=False)
    with pytest.raises(HsiError) as caught:
        hsi.score(tmp_path / "broken.csv", paper_set)
    message = str(caught.value)
    assert named in message and "\n" not in message
    key = frame["key"].iloc[3 if "twice" in named else 0]
    if "not-a-sample" not in named:
        assert key in message
