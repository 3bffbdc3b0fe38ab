"""Hostile fill scores: a parts json whose `fill_scores` holds NaN, a string or a negative number
is refused by `hsi compose` in one line (with or without --min-fill: its composites would record a
score nobody measured), and a predictions table whose `background_fill_score` is NaN, text or
negative is refused by `hsi eval --from` in one line."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fill_planting import plant_fill_scores, planted
from parts_factory import compose_args, fake_images, write_parts
from release_factory import composite_json

from evaluation.predicting.predictions import write_predictions
from hsi.cli import main

WNIDS = ["n01443537", "n02437312"]


def one_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"hsi {command}: error: "), err
    return err


@pytest.mark.parametrize(
    "value, needle",
    [
        ({**planted(0.5), "score": math.nan}, "fill_scores.score must be a finite number"),
        ({**planted(0.5), "texture": "0.5"}, "fill_scores.texture must be a finite number"),
        ({**planted(0.5), "score": -0.2}, "fill_scores.score must be a finite number of 0 or more"),
        ({**planted(0.5), "score": 7.0}, "fill_scores.score must lie in [0, 1]"),
        ("0.5", "fill_scores must be null or an object"),
        ({"score": 0.5}, "fill_scores must be null or an object"),
    ],
)
@pytest.mark.parametrize("threshold", [None, "0.3"])
def test_a_hostile_fill_score_in_a_parts_json_is_one_line(tmp_path, capsys, value, needle, threshold):
    images = fake_images(WNIDS, per_class=2)
    write_parts(tmp_path / "parts", {"val": images})
    plant_fill_scores(tmp_path / "parts", {images[1].source_id: value}, raw=True)
    extra = ["--min-fill", threshold] if threshold else []
    assert main(compose_args(tmp_path / "parts", tmp_path / "out", "--no-progress", *extra)) == 2
    err = one_line(capsys, "compose")
    assert needle in err and images[1].source_id in err and "re-extract" in err
    assert not (tmp_path / "out").exists()


def metadata() -> dict:
    return {
        "model": {"spec": "ts:m.pt", "checkpoint": "m.pt", "checkpoint_sha256": "0" * 64},
        "preprocessing": {"description": "canvas as is", "cropped": False},
        "label_space": {"name": "imagenet", "classes": 1000, "description": "argmax over all 1000 classes"},
        "data": {"source": "d", "config": "c", "split": "test", "fingerprint": "f", "limit": None},
        "notes": [],
    }


def rows(count: int = 8) -> list[dict]:
    out = []
    for i in range(count):
        meta = composite_json("c", "test", i, i % 3, i % 3, 0)
        top5 = [meta["class_index"], 7, 8, 9, 10]
        out.append(
            {
                "key": f"test_{i:06d}",
                "shard": "test-00000.tar",
                "status": "ok",
                "cls": i % 3,
                "label_class": meta["class_index"],
                "pred_class": top5[0],
                "top5_class": top5,
                "top5_prob": [0.5, 0.1, 0.1, 0.1, 0.1],
                "prob_label": 0.5,
                "prob_background_class": 0.5,
                "meta": meta,
            }
        )
    return out


@pytest.fixture()
def table(tmp_path):
    return write_predictions(tmp_path / "run" / "predictions.parquet", rows(), [], metadata())


def test_a_clean_table_is_analysed_with_its_tercile_table(table, tmp_path):
    assert main(["eval", "--from", str(table), "--out", str(tmp_path / "out"), "--bootstrap", "10"]) == 0
    assert "donor fill score (terciles)" in (tmp_path / "out" / "eval.md").read_text()


@pytest.mark.parametrize(
    "column, needle",
    [
        (pa.array([0.5] * 7 + [math.nan]), "row 8 (test_000007) holds nan, which is not a fill score in [0, 1]"),
        (pa.array([0.5] * 7 + [-0.25]), "holds -0.25, which is not a fill score in [0, 1]"),
        (pa.array([0.5] * 7 + [1.5]), "holds 1.5, which is not a fill score in [0, 1]"),
        (pa.array(["0.5"] * 8), "holds text values, where the predictions table holds number values"),
    ],
)
def test_a_hostile_background_fill_score_in_a_predictions_table_is_one_line(table, tmp_path, capsys, column, needle):
    original = pq.read_table(table)
    index = original.schema.get_field_index("background_fill_score")
    tampered = original.set_column(index, "background_fill_score", column)
    pq.write_table(tampered.replace_schema_metadata(original.schema.metadata), table)
    assert main(["eval", "--from", str(table), "--out", str(tmp_path / "out"), "--bootstrap", "10"]) != 0
    err = one_line(capsys, "eval")
    assert "column background_fill_score" in err and needle in err
    assert not (tmp_path / "out" / "eval.json").exists()


def test_a_table_written_before_fill_scores_reads_them_as_null(table, tmp_path):
    original = pq.read_table(table)
    older = original.drop_columns(["background_fill_score"]).replace_schema_metadata(original.schema.metadata)
    pq.write_table(older, table)
    assert main(["eval", "--from", str(table), "--out", str(tmp_path / "out"), "--bootstrap", "10"]) == 0
    assert "none of the 4 random- or paired-background samples" in (tmp_path / "out" / "eval.md").read_text()
