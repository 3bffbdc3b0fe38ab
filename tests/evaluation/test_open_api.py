"""`hsi.open(data)`: one split's metadata, groups and `.eval(predictions)`; predictions as arrays in
key order (class indices, 1000-way probabilities or logits) with planted answers; the `Evaluation`'s
tables and figures; the clean-photo and background passes of `hsi.evaluate`."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from eval_cli import eval_args
from test_eval_spuriosity import write_clean_tree
from test_score_api import evaluated  # noqa: F401 (a fixture)
from trusted_code import sha256

from builder.core.errors import HsiError
from evaluation.analysis.bootstrap import BootstrapSettings
from hsi.cli import main

QUICK = BootstrapSettings(resamples=100)


@pytest.fixture(scope="module")
def opened(paper_set):
    import hsi

    return hsi.open(paper_set, announce=lambda line: None)


def test_open_gives_the_samples_metadata_and_groups(opened, paper_set):
    manifest = json.loads((paper_set / "_info.json").read_text())
    frame = opened.metadata
    assert len(opened) == len(frame) == manifest["splits"][opened.split]["num_samples"] == 72
    assert list(frame["key"]) == opened.keys and frame["key"].is_unique
    assert {"group", "size", "position", "tier", "background", "background_class_index", "source_id"} <= set(frame)
    assert opened.groups == ["CeO", "CoO", "CeR", "CoR"]
    assert frame.groupby("group").size().to_dict() == {"CeO": 18, "CeR": 18, "CoO": 18, "CoR": 18}
    assert opened.config == manifest["config"] and opened.fingerprint == manifest["fingerprint"]
    assert opened.errors == []


def test_eval_of_a_table_is_score(opened, evaluated, paper_set):  # noqa: F811
    import hsi

    metrics, frame = evaluated
    table = pd.DataFrame({"key": frame["key"], "pred_class": frame["pred_class"], "top5_class": frame["top5_class"]})
    assert opened.eval(table, bootstrap=QUICK).metrics == hsi.score(table, paper_set, bootstrap=QUICK).metrics
    assert hsi.score(table, opened, bootstrap=QUICK).metrics == opened.eval(table, bootstrap=QUICK).metrics
    # the predicted class and top-5 are the model run's, so are its accuracies
    scored = opened.eval(table, bootstrap=QUICK).metrics
    assert scored["overall"] == metrics["overall"] and scored["by_group_size"] == metrics["by_group_size"]


def planted_probabilities(metadata: pd.DataFrame) -> np.ndarray:
    """Every sample on its own background gets its label at 0.6; on another class's background, the
    background's class at 0.6 (so those are all wrong and all name the background); the rest of the
    mass spread evenly."""
    probs = np.full((len(metadata), 1000), 0.4 / 999)
    foreign = metadata["background_class_index"].notna() & (metadata["background_class_index"] != metadata["label"])
    for row, (label, background, away) in enumerate(
        zip(metadata["label"], metadata["background_class_index"], foreign)
    ):
        probs[row, int(background) if away else int(label)] = 0.6
    return probs


def test_an_array_of_probabilities_scores_the_planted_answer(opened):
    metadata = opened.metadata
    probs = planted_probabilities(metadata)
    foreign = metadata["background"].isin(["random", "paired"]) & (
        metadata["background_class_index"] != metadata["label"]
    )
    evaluation = opened.eval(probs, bootstrap=QUICK)
    metrics = evaluation.metrics
    assert metrics["overall"]["top1"]["value"] == pytest.approx(1 - foreign.mean())
    assert evaluation.frame("background")["top1"].tolist() == [
        0.0 if kind in ("random", "paired") else 1.0 for kind in evaluation.frame("background")["background"]
    ]
    overall = metrics["background_class"]["overall"]
    assert overall["share_of_errors"]["value"] == 1.0 and overall["errors"] == int(foreign.sum())
    assert overall["mean_prob_background_class"] == 0.6
    # the label's probability comes from the vector: 0.6 where right, 0.4/999 where wrong
    rows = {r["key"]: r for r in evaluation._rows}
    key = metadata["key"][int(np.flatnonzero(~foreign.to_numpy())[0])]
    assert rows[key]["prob_label"] == pytest.approx(0.6) and len(rows[key]["top5_class"]) == 5


def test_logits_and_a_probs_column_score_as_their_probabilities(opened):
    probs = planted_probabilities(opened.metadata)
    reference = opened.eval(probs, bootstrap=QUICK)
    logits = np.log(probs) + 3.0  # softmax(log p + c) = p
    as_logits = opened.eval(logits, bootstrap=QUICK)
    assert as_logits.metrics == reference.metrics
    assert "read as logits" in " ".join(as_logits.to_dict()["notes"])
    column = pd.DataFrame({"key": opened.keys, "probs": list(probs)})
    assert opened.eval(column, bootstrap=QUICK).metrics == reference.metrics
    classes = probs.argmax(axis=1)
    by_index = opened.eval(classes, bootstrap=QUICK)
    assert by_index.metrics["overall"]["top1"] == reference.metrics["overall"]["top1"]
    assert by_index.metrics["overall"]["top5"] == by_index.metrics["overall"]["top1"]  # no top-5 given


@pytest.mark.parametrize(
    "make, outputs, reason",
    [
        (lambda n: np.zeros((n, 999)), None, "999 scores a sample"),
        (lambda n: np.zeros((n - 1, 1000)), None, "for 72 samples"),
        (lambda n: np.full((n, 1000), 0.5), "probabilities", "sum to 500.0000, not 1"),
        (lambda n: np.full((n, 1000), np.nan), None, "not a finite number"),
        (lambda n: np.full(n, 1000), None, "is not an ImageNet class index"),
        (lambda n: np.zeros((n, 1000)), "scores", "outputs must be one of logits, probabilities"),
        (lambda n: np.zeros(n, dtype=int), "logits", "outputs= is for a (samples, 1000) array"),
    ],
)
def test_a_wrong_array_is_one_line_naming_it(opened, make, outputs, reason):
    with pytest.raises(HsiError) as caught:
        opened.eval(make(len(opened)), outputs=outputs)
    assert reason in str(caught.value) and "\n" not in str(caught.value)


def test_a_wrong_probs_column_is_one_line(opened):
    probs = planted_probabilities(opened.metadata)
    short = pd.DataFrame({"key": opened.keys, "probs": [row[:999] for row in probs]})
    with pytest.raises(HsiError, match=r"row 1 \(.*\): probs holds 999 values"):
        opened.eval(short)
    both = pd.DataFrame({"key": opened.keys, "probs": list(probs), "pred_class": probs.argmax(axis=1)})
    with pytest.raises(HsiError, match="drop pred_class"):
        opened.eval(both)
    with pytest.raises(HsiError, match="outputs= is for an array"):
        opened.eval(both, outputs="logits")


def test_the_evaluation_tables_and_figures(opened, tmp_path):
    evaluation = opened.eval(planted_probabilities(opened.metadata), bootstrap=QUICK)
    metrics = evaluation.metrics
    table = evaluation.table()
    assert list(table.index) == ["CeO", "CoO", "CeR", "CoR"] and list(table.columns) == [56, 84, 112]
    cell = next(c for c in metrics["by_group_size"] if c["group"] == "CoR" and c["size"] == 56)
    assert table.loc["CoR", 56] == cell["top1"]["value"]
    tiers = evaluation.tiers
    assert list(tiers["tier"]) == [c["tier"] for c in metrics["by_tier"]]
    assert {"top1", "top1_low", "top1_high", "top1_n", "top5"} <= set(tiers)
    gap = evaluation.background_gap
    assert len(gap) == len(metrics["background_gap"]) > 0 and (gap["gap"] == 1.0).all()  # own right, foreign wrong
    assert evaluation.background_class["group"].iloc[0] == "all"
    assert len(evaluation.positions) == len(metrics["by_position_size"])
    assert evaluation.clean_drop is None
    # CeR and CoR are on foreign backgrounds only, all wrong: the tie goes to the paper's first
    assert (evaluation.worst_group["group"], evaluation.worst_group["value"]) == ("CeR", 0.0)
    assert evaluation.mean_over_groups["value"] == 0.5
    assert evaluation.plots == ["accuracy_vs_size", "background_class_share"]  # two placements: no heat map
    figure = evaluation.figure()
    assert figure.axes[0].get_ylabel() == "top-1 accuracy" and len(figure.axes[0].lines) >= 4
    with pytest.raises(ValueError, match="no plot 'nope'"):
        evaluation.figure("nope")
    with pytest.raises(ValueError, match="no table 'nope'"):
        evaluation.frame("nope")
    folder = evaluation.save(tmp_path / "saved")
    assert sorted(p.name for p in (folder / "plots").iterdir()) == sorted(f"{n}.png" for n in evaluation.plots)
    assert "<Evaluation predictions:array: 72 samples, worst group" in repr(evaluation)


def test_evaluate_runs_the_clean_and_background_passes_as_hsi_eval(paper_set, flat_parts, planted_corner, tmp_path):
    import hsi

    parts, images = flat_parts
    clean = write_clean_tree(tmp_path / "imagenet", images)
    out = tmp_path / "cli"
    assert (
        main(eval_args(paper_set, f"ts:{planted_corner}", str(out), "--clean", str(clean), "--parts", str(parts))) == 0
    )
    cli = json.loads((out / f"ts_{planted_corner.name}" / "eval.json").read_text())
    evaluation = hsi.evaluate(
        torch.jit.load(str(planted_corner)),
        paper_set,
        mean=0,
        std=1,
        workers=0,
        progress=False,
        bootstrap=QUICK,
        clean=clean,
        parts=parts,
        announce=lambda line: None,
    )
    report = evaluation.to_dict()
    assert report["clean"] == cli["clean"] and report["background_only"] == cli["background_only"]
    assert report["metrics"] == cli["metrics"]
    assert list(evaluation.clean_drop["group"]) == [r["group"] for r in cli["clean"]["drop_by_group"]]
    folder = evaluation.save(tmp_path / "saved")
    for name in ("clean_accuracy.csv", "background_accuracy.csv"):
        assert (folder / name).read_bytes() == (out / f"ts_{planted_corner.name}" / name).read_bytes()
    assert json.loads((folder / "eval.json").read_text())["clean"] == cli["clean"]


def test_a_spec_saved_from_python_is_the_report_of_hsi_eval(paper_set, planted_corner, tmp_path):
    """The same spec and data from Python and from the command line: the same report but for the run's
    timing, and from the same predictions the same eval.json and eval.md bytes."""
    import hsi

    out = tmp_path / "cli"
    assert main(eval_args(paper_set, f"ts:{planted_corner}", str(out))) == 0
    folder = f"ts_{planted_corner.name}"
    evaluation = hsi.evaluate(
        f"ts:{planted_corner}",
        paper_set,
        mean=0,
        std=1,
        workers=0,
        progress=False,
        bootstrap=QUICK,
        announce=print,
        trust_files=[sha256(planted_corner)],
    )
    saved = evaluation.save(tmp_path / "python", folder)
    untimed = [json.loads((where / "eval.json").read_text()) for where in (saved, out / folder)]
    for report in untimed:
        assert report["run"].pop("seconds") > 0 and report["run"].pop("images_per_second") > 0
    assert untimed[0] == untimed[1]
    again = tmp_path / "again"
    assert main(["eval", "--from", str(saved / "predictions.parquet"), "--out", str(again), "--bootstrap", "100"]) == 0
    for name in ("eval.json", "eval.md"):
        assert (again / name).read_bytes() == (saved / name).read_bytes()
