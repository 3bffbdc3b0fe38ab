"""Metrics proved on planted predictors (tests/evaluation/planted.py): exact per-group accuracies,
background-class shares of exactly 1.0 and 0.0 where planted, seeded bootstrap intervals, the
crop protocol losing a corner object, and predictions -> metrics identical to a direct run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from eval_cli import eval_args
from parts_factory import compose_quietly
from trusted_code import trusting

from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.analysis.metrics import compute_metrics
from evaluation.model_formats.models import ModelOptions, load_model
from evaluation.predicting.predict import run_predictions
from evaluation.predicting.predictions import read_predictions
from hsi.cli import main


def cells(rows, *keys, metric="top1"):
    return {tuple(r[k] for k in keys): r[metric]["value"] for r in rows}


@pytest.fixture(scope="module")
def planted_run(paper_set, planted_corner, tmp_path_factory):
    out = tmp_path_factory.mktemp("planted-eval")
    assert (
        main(
            eval_args(
                str(paper_set),
                f"ts:{planted_corner}",
                str(out),
                "--split",
                "val",
                "--batch-size",
                "10",
                workers=2,
                bootstrap=300,
            )
        )
        == 0
    )
    folder = out / "ts_planted_corner.pt"
    return folder, json.loads((folder / "eval.json").read_text())


def test_planted_predictor_gives_exact_group_accuracies(planted_run):
    folder, report = planted_run
    metrics = report["metrics"]
    assert metrics["samples"] == 72 and metrics["sources"] == 6 and metrics["errors"]["total"] == 0
    assert cells(metrics["by_group"], "group") == {("CeO",): 1.0, ("CoO",): 1.0, ("CeR",): 1.0, ("CoR",): 0.0}
    assert set(cells(metrics["by_group_size"], "group", "size").items()) == {
        ((g, s), 0.0 if g == "CoR" else 1.0) for g in ("CeO", "CoO", "CeR", "CoR") for s in (56, 84, 112)
    }
    # tiers: Easy = O at 84/112; Medium = O at 56 + R at 112 (half CoR); Hard = R at 56/84 (half CoR)
    assert cells(metrics["by_tier"], "tier") == {("Easy",): 1.0, ("Medium",): 0.75, ("Hard",): 0.5}
    assert cells(metrics["by_position_size"], "position", "size") == {
        **{("center", s): 1.0 for s in (56, 84, 112)},
        **{("top-right", s): 0.5 for s in (56, 84, 112)},
    }
    assert cells(metrics["by_background"], "background") == {("original",): 1.0, ("random",): 0.5}
    summary = metrics["groups_summary"]
    assert summary["mean_over_groups"]["value"] == 0.75
    assert summary["worst_group"] == {"group": "CoR", "value": 0.0, "low": 0.0, "high": 0.0, "n": 72, "sources": 6}
    gaps = {(r["position"], r["size"]): r["gap"]["value"] for r in metrics["background_gap"]}
    assert gaps == {**{("center", s): 0.0 for s in (56, 84, 112)}, **{("top-right", s): 1.0 for s in (56, 84, 112)}}
    assert metrics["neutral_controls"] == []
    assert "no neutral controls" in (folder / "eval.md").read_text()


def test_planted_background_class_shares_are_exactly_one_and_zero(planted_run):
    _, report = planted_run
    bg = report["metrics"]["background_class"]
    assert bg["control"] == "own backgrounds" and bg["overall"]["samples"] == 36 and bg["overall"]["errors"] == 18
    assert bg["overall"]["share_of_errors"]["value"] == 1.0
    assert bg["overall"]["share_of_predictions"]["value"] == 0.5
    for row in bg["by_group_size"]:
        expected = 1.0 if row["group"] == "CoR" else 0.0
        assert row["share_of_predictions"]["value"] == expected, row
        assert row["share_of_predictions"]["low"] == row["share_of_predictions"]["high"] == expected
        if row["group"] == "CoR":
            assert row["share_of_errors"]["value"] == 1.0 and row["errors"] == 6
        else:
            assert row["errors"] == 0 and row["share_of_errors"]["value"] is None
    # no errors on the controls (own backgrounds): no expected share, and the report says so
    assert bg["overall"]["expected_share_of_errors"] is None and bg["control_errors"].startswith("none")


def test_reports_plots_and_predictions_carry_what_they_promise(planted_run):
    folder, report = planted_run
    assert sorted(p.name for p in (folder / "plots").iterdir()) == [
        "accuracy_vs_size.png",
        "background_class_share.png",
    ]
    assert report["preprocessing"]["cropped"] is False and report["preprocessing"]["crop_pct"] is None
    md = (folder / "eval.md").read_text()
    assert "not centre-cropped" in md and "| CoR | 0.000 [0.000, 0.000]" in md
    frame, meta = read_predictions(folder / "predictions.parquet")
    assert len(frame) == 72 and list(frame["key"]) == sorted(frame["key"])
    assert meta["model"]["spec"] == "ts:planted_corner.pt" and len(meta["model"]["checkpoint_sha256"]) == 64
    assert meta["data"]["source"] == "hard-spurious-imagenet"  # a folder name, never a machine path
    assert "/" not in json.dumps(meta["data"]) and str(folder.parent) not in json.dumps(report)
    row = frame[frame["group"] == "CoR"].iloc[0]
    assert row["pred_class"] == row["background_class_index"] and row["prob_background_class"] > 0.99
    assert len(row["top5_class"]) == 5 and row["top5_class"][0] == row["pred_class"]
    for field in ("source_id", "box_x", "box_y", "box_w", "box_h", "background_source_id", "tier", "seed"):
        assert frame[field].notna().all(), field


def test_recomputing_from_predictions_matches_the_direct_run(planted_run, tmp_path):
    folder, report = planted_run
    again = tmp_path / "again"
    assert main(["eval", "--from", str(folder / "predictions.parquet"), "--out", str(again), "--bootstrap", "300"]) == 0
    recomputed = json.loads((again / "eval.json").read_text())
    assert recomputed["metrics"] == report["metrics"]
    assert (again / "eval.md").read_text() == (folder / "eval.md").read_text()


def random_predictions(n_sources=30, per_source=4, seed=1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_sources):
        for i in range(per_source):
            correct = bool(rng.random() < 0.6)
            rows.append(
                {
                    "key": f"s{s}_{i}",
                    "status": "ok",
                    "source_id": f"src{s}",
                    "correct": correct,
                    "correct_top5": correct or bool(rng.random() < 0.5),
                    "group": ["CeO", "CoR"][i % 2],
                    "size": 56,
                    "position": ["center", "top-right"][i % 2],
                    "tier": None,
                    "background": ["original", "random"][i % 2],
                    "background_class_index": 3,
                    "label_class": 1,
                    "pred_class": 1 if correct else 3,
                    "prob_background_class": 0.1,
                    "detail": None,
                    "shard": "x",
                }
            )
    return pd.DataFrame(rows)


def test_bootstrap_intervals_are_deterministic_per_seed_and_over_source_images():
    frame = random_predictions()
    first = compute_metrics(frame, label_space_size=1000, settings=BootstrapSettings(500, seed=7))
    second = compute_metrics(frame, label_space_size=1000, settings=BootstrapSettings(500, seed=7))
    other = compute_metrics(frame, label_space_size=1000, settings=BootstrapSettings(500, seed=8))
    assert first == second
    overall, other_overall = first["overall"]["top1"], other["overall"]["top1"]
    assert overall["value"] == other_overall["value"] and overall["low"] < overall["value"] < overall["high"]
    assert first != other  # another seed draws other resamples: some interval moves
    assert overall["sources"] == 30 and overall["n"] == 120
    # resampling whole source images: the same rows as 120 independent sources give another interval
    independent = frame.assign(source_id=frame["key"])
    alone = compute_metrics(independent, label_space_size=1000, settings=BootstrapSettings(500, seed=7))
    assert alone["overall"]["top1"]["sources"] == 120 and alone["overall"] != first["overall"]


def test_identical_top1_and_top5_columns_get_identical_intervals_in_every_cell():
    """Failed before: top-1 and top-5 drew their own resamples (generators named :top1 and :top5), so
    predictions whose top-5 is their top-1 (a table without top5 columns) showed two intervals."""
    frame = random_predictions()
    frame["correct_top5"] = frame["correct"]
    metrics = compute_metrics(frame, label_space_size=1000, settings=BootstrapSettings(500, seed=3))
    tables = ("by_group", "by_group_size", "by_size", "by_position_size", "by_background")
    cells_with_both = [metrics["overall"]] + [row for key in tables for row in metrics[key]]
    assert len(cells_with_both) == 1 + 2 + 2 + 1 + 2 + 2
    for cell in cells_with_both:
        assert cell["top1"]["low"] is not None and cell["top1"] == cell["top5"]
    # top-1's own interval is the one it always had: its generator is still named after it
    before = compute_metrics(random_predictions(), label_space_size=1000, settings=BootstrapSettings(500, seed=3))
    assert before["overall"]["top1"] == metrics["overall"]["top1"]
    # where top-5 differs, its interval is its own (the same photos drawn, other counts)
    assert before["overall"]["top5"]["value"] > before["overall"]["top1"]["value"]
    assert before["overall"]["top5"]["low"] > before["overall"]["top1"]["low"]


def test_crop_pct_loses_the_planted_corner_object_the_default_keeps(flat_parts, planted_finder, tmp_path):
    """12 px objects flush in the top-right corner: a 0.875 crop cuts 14 px off every border."""
    dataset = compose_quietly(
        flat_parts[0],
        "hard-spurious-imagenet",
        tmp_path / "tiny",
        overrides={"sizes": [12], "positions": ["top-right"], "backgrounds": ["random"]},
    ).dataset_dir
    model = load_model(
        f"ts:{planted_finder}", ModelOptions(mean=(0, 0, 0), std=(1, 1, 1), trust=trusting(planted_finder))
    )
    default = run_predictions(model, dataset, split="val", workers=0, progress=False)
    cropped_model = load_model(
        f"ts:{planted_finder}",
        ModelOptions(mean=(0, 0, 0), std=(1, 1, 1), crop_pct=0.875, trust=trusting(planted_finder)),
    )
    cropped = run_predictions(cropped_model, dataset, split="val", workers=0, progress=False)
    assert len(default.rows) == len(cropped.rows) == 6
    assert all(r["correct"] for r in default.rows)  # the object is seen
    assert not any(r["correct"] for r in cropped.rows)  # the object is cut away: the background's class
    assert all(r["pred_class"] == r["meta"]["background_class_index"] for r in cropped.rows)
    assert (
        cropped.metadata["preprocessing"]["cropped"]
        and "centre crop 224x224 (crop_pct 0.875)" in cropped.metadata["preprocessing"]["description"]
    )
    assert default.metadata["preprocessing"]["description"].startswith("canvas as is")


def test_more_than_two_placements_get_a_position_by_size_heat_map(flat_parts, planted_corner, tmp_path):
    from PIL import Image

    dataset = compose_quietly(
        flat_parts[0],
        "hard-spurious-imagenet",
        tmp_path / "three",
        overrides={"sizes": "56,84", "positions": "center,top-right,bottom-left", "backgrounds": "original"},
    ).dataset_dir
    out = tmp_path / "out"
    assert main(eval_args(dataset, f"ts:{planted_corner}", str(out), bootstrap=50)) == 0
    folder = out / "ts_planted_corner.pt"
    metrics = json.loads((folder / "eval.json").read_text())["metrics"]
    assert sorted({r["position"] for r in metrics["by_position_size"]}) == ["bottom-left", "center", "top-right"]
    assert {r["group"] for r in metrics["by_group"]} == {"CeO", "CoO"}  # bottom-left is a flush corner: Co (taxonomy)
    assert metrics["background_class"] is None  # no foreign backgrounds: no background-class analysis
    heat_map = folder / "plots" / "position_size_heatmap.png"
    with Image.open(heat_map) as image:
        assert image.size[0] > 100 and image.size[1] > 100
    assert "position_size_heatmap.png" in (folder / "eval.md").read_text()
