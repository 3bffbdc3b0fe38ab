"""The background's fill score in `hsi eval`: every prediction row carries `background_fill_score`
(the composite json's), and the report's table of the R groups' top-1 by donor fill tercile has
the planted accuracies; without scores it says so in one line."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from eval_cli import eval_args
from fill_planting import plant_fill_scores
from parts_factory import compose_quietly, write_parts
from planted import flat_images, save_planted

from builder.core.shard_read import iter_shard
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.analysis.metrics import fill_terciles, prepare
from evaluation.analysis.report import fill_tercile_markdown
from evaluation.predicting.predictions import read_predictions
from hsi.cli import main

SETTINGS = BootstrapSettings(resamples=50, seed=0)


def planted_frame(scores, correct, background="random", group="CeR") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "status": "ok",
            "key": [f"k{i}" for i in range(len(scores))],
            "source_id": [f"s{i}" for i in range(len(scores))],
            "correct": correct,
            "correct_top5": correct,
            "background": background,
            "group": group,
            "background_fill_score": scores,
        }
    )


def test_terciles_of_planted_scores_have_the_planted_accuracies():
    scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    correct = [False, False, False, False, True, True, True, True, True]
    own = planted_frame([0.05] * 3, [True] * 3, background="original", group="CeO")  # never in the table
    frame, _ = prepare(pd.concat([planted_frame(scores, correct), own], ignore_index=True))
    section = fill_terciles(frame, SETTINGS)
    assert section["samples"] == 9 and section["unscored"] == 0 and section["note"] is None
    assert section["edges"] == pytest.approx([0.3667, 0.6333], abs=1e-4)
    rows = {r["tercile"]: r for r in section["rows"]}
    assert {t: rows[t]["top1"]["value"] for t in rows} == {"low": 0.0, "mid": 0.666667, "high": 1.0}
    assert [(rows[t]["score_min"], rows[t]["score_max"], rows[t]["samples"]) for t in ("low", "mid", "high")] == [
        (0.1, 0.3, 3),
        (0.4, 0.6, 3),
        (0.7, 0.9, 3),
    ]
    assert rows["mid"]["top1"]["low"] is not None  # a bootstrap interval over source images
    assert [(r["group"], r["tercile"]) for r in section["by_group"]] == [("CeR", t) for t in ("low", "mid", "high")]
    text = "\n".join(fill_tercile_markdown(section))
    assert "| all R | mid | 0.400-0.600 | 3 | 0.667 [" in text


def test_without_scores_the_table_says_so_in_one_line():
    frame, _ = prepare(planted_frame([None, None], [True, False]))
    section = fill_terciles(frame, SETTINGS)
    assert section["rows"] == [] and "carries a background fill score" in section["note"]
    lines = [line for line in fill_tercile_markdown(section) if line]
    assert len(lines) == 2 and lines[0].startswith("## ") and "none of the 2" in lines[1]
    frame, _ = prepare(planted_frame([0.5], [True], background="original", group="CeO"))
    assert "no sample has a random or paired background" in fill_terciles(frame, SETTINGS)["note"]


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory):
    """The planted corner rule (CeR right, CoR wrong) on composites whose parts have planted fills."""
    root = tmp_path_factory.mktemp("fill-eval")
    images = flat_images()
    write_parts(root / "parts", {"val": images}, shard_size=3)
    plant_fill_scores(root / "parts", {im.source_id: round(0.15 * (n + 1), 2) for n, im in enumerate(images)})
    dataset = compose_quietly(root / "parts", "hard-spurious-imagenet", root / "data").dataset_dir
    model = save_planted(root / "planted_corner.pt", images, background_on_corner=True)
    assert main(eval_args(str(dataset), f"ts:{model}", str(root / "eval"), "--split", "val", bootstrap=50)) == 0
    return dataset, root / "eval" / "planted_corner.pt"


def test_prediction_rows_carry_the_background_fill_score_of_their_composite(scored_run):
    dataset, _ = scored_run
    folder = scored_run[1].parent / f"ts_{scored_run[1].name}"
    frame, _ = read_predictions(folder / "predictions.parquet")
    recorded = {
        key: json.loads(members["json"])["background_fill_score"]
        for shard in sorted(dataset.glob("val-*.tar"))
        for key, members in iter_shard(shard)
    }
    assert len(frame) == len(recorded) == 72
    assert dict(zip(frame["key"], frame["background_fill_score"], strict=True)) == recorded
    assert set(recorded.values()) == {round(0.15 * (n + 1), 4) for n in range(6)}


def test_eval_report_has_the_tercile_table_with_the_planted_accuracies(scored_run):
    folder = scored_run[1].parent / f"ts_{scored_run[1].name}"
    report = json.loads((folder / "eval.json").read_text())
    section = report["metrics"]["fill_terciles"]
    assert section["samples"] == 36 and section["unscored"] == 0
    # each donor's CeR composites are right and its CoR composites wrong: 0.5 in every tercile
    assert {r["tercile"]: r["top1"]["value"] for r in section["rows"]} == {"low": 0.5, "mid": 0.5, "high": 0.5}
    assert sum(r["samples"] for r in section["rows"]) == 36
    by_group = {(r["group"], r["tercile"]): r["top1"]["value"] for r in section["by_group"]}
    assert by_group == {(g, t): 1.0 if g == "CeR" else 0.0 for g in ("CeR", "CoR") for t in ("low", "mid", "high")}
    markdown = (folder / "eval.md").read_text()
    assert "## Foreign backgrounds by donor fill score (terciles)" in markdown and "| all R | low |" in markdown
