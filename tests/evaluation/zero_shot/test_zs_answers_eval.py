"""Answers in words, end to end: a callable that answers (a stand-in for a vision-language model)
through `hsi.evaluate`, and the same answers as a `pred_text` column through `hsi.score` and
`hsi eval --predictions`, give the same mapped predictions on a table of hand-written answers;
unmapped and ambiguous answers count as wrong, in their own column, with their share per group."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from recompute import recompute

from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.predicting.predictions import read_predictions
from hsi.cli import main

QUICK = {"bootstrap": BootstrapSettings(resamples=100), "announce": lambda _: None}

# the -10 subset's classes, each answered as a person or a model might: (answer, class it maps to or None, status)
ANSWERS = {
    "n01443537": ("Goldfish.", 1, "mapped"),  # case and trailing punctuation do not count
    "n01614925": ("an American eagle", 22, "mapped"),  # a WordNet synonym, after an article
    "n02134084": ("polar bear", 296, "mapped"),  # CLIP's curated name and a synonym
    "n02391049": ("zebras", None, "unmapped"),  # no plural forms
    "n02437312": ("dromedary", 354, "mapped"),
    "n02690373": ("a photo of an airliner", None, "unmapped"),  # no words around the name
    "n04146614": ("  SCHOOL   bus! ", 779, "mapped"),  # spaces collapse
    "n04273569": ("motorboat", 814, "mapped"),  # CLIP's name for speedboat
    "n04310018": ("locomotive", None, "unmapped"),  # part of a name is not the name
    "n04465501": ("", None, "unmapped"),  # no answer
}


def expected_rows(samples: list[dict]) -> dict[str, tuple]:
    return {s["key"]: ANSWERS[s["meta"]["wnid"]] for s in samples}


def test_a_callable_answering_in_words_is_mapped_and_scored(ten_set, tmp_path):
    import hsi

    dataset = hsi.open(ten_set, announce=lambda _: None)
    order = iter(dataset.keys)  # with workers=0 the images come in the dataset's key order
    wnid_of = {s["key"]: s["meta"]["wnid"] for s in dataset.samples}
    seen = []

    def vlm(batch: np.ndarray) -> list[str]:
        seen.append((batch.dtype, batch.shape[1:]))
        return [ANSWERS[wnid_of[next(order)]][0] for _ in range(len(batch))]

    evaluation = hsi.evaluate(vlm, ten_set, outputs="text", workers=0, progress=False, **QUICK)
    assert set(seen) == {(np.dtype(np.uint8), (224, 224, 3))}  # the canvas as it is
    expected = expected_rows(dataset.samples)
    for row in evaluation._rows:
        answer, label, status = expected[row["key"]]
        assert (row["pred_text"], row["answer_status"]) == (answer or None, status), row["key"]  # "": no answer
        assert row["pred_class"] == (label if label is not None else -1)
        assert row["correct"] == (label is not None)  # every mapped answer here names the right class
    report = evaluation.to_dict()
    section = report["answers"]
    total = len(evaluation._rows)
    unmapped = sum(1 for row in evaluation._rows if row["answer_status"] == "unmapped")
    assert section["overall"] == {
        "answers": total,
        "unmapped": unmapped,
        "ambiguous": 0,
        "unmapped_share": round(unmapped / total, 6),
        "ambiguous_share": 0.0,
    }
    assert unmapped == total * 4 // 10  # four of the ten classes are answered unmappably
    assert [row["group"] for row in section["by_group"]] == ["CeO", "CoO", "center/paired", "top-right/paired"]
    assert section["prompt"] == "What is the main object in this image? Answer with its name only."
    assert section["vocabulary"]["classes"] == 10 and len(section["vocabulary"]["sha256"]) == 64
    keys = [row["key"] for row in section["sample"]]
    assert keys == sorted(keys) and len(keys) == 20 and section["sample_of"] == unmapped
    assert report["metrics"]["overall"]["top1"]["value"] == pytest.approx(0.6)
    assert report["label_space"]["name"] == "answers" and report["label_space"]["classes"] == 10

    # the same answers as a file: hsi.score maps them alike
    table = pd.DataFrame({"key": list(expected), "pred_text": [expected[key][0] for key in expected]})
    scored = hsi.score(table, ten_set, **QUICK)
    columns = ("key", "pred_class", "pred_text", "answer_status", "correct")
    assert [tuple(r[c] for c in columns) for r in scored._rows] == [
        tuple(r[c] for c in columns) for r in evaluation._rows
    ]
    assert scored.metrics == evaluation.metrics
    assert scored.to_dict()["answers"]["overall"] == section["overall"]
    assert scored.to_dict()["answers"]["prompt"] is None  # a file's prompt is not known

    # and recomputed from the saved predictions alone
    folder = evaluation.save(tmp_path / "saved")
    frame, _ = read_predictions(folder / "predictions.parquet")
    assert set(frame["answer_status"]) == {"mapped", "unmapped"}
    again = recompute(folder / "predictions.parquet", tmp_path / "again")
    assert again["answers"] == json.loads((folder / "eval.json").read_text())["answers"]
    markdown = (folder / "eval.md").read_text()
    assert "## Answers in words" in markdown and "| zebras |" in markdown


def test_an_answer_naming_two_classes_is_ambiguous_and_counts_wrong(paper_set, tmp_path):
    """On all 1000 classes "crane" names the bird and the machine; counted ambiguous, never a guess."""
    import hsi

    keys = hsi.open(paper_set, announce=lambda _: None).keys
    table = pd.DataFrame({"key": keys, "pred_text": ["crane"] * len(keys)})
    table.to_csv(tmp_path / "answers.csv", index=False)
    out = tmp_path / "out"
    assert (
        main(
            [
                "eval",
                str(paper_set),
                "--predictions",
                str(tmp_path / "answers.csv"),
                "--out",
                str(out),
                "--bootstrap",
                "100",
            ]
        )
        == 0
    )
    report = json.loads((out / "answers" / "eval.json").read_text())
    assert report["answers"]["overall"]["ambiguous"] == len(keys) and report["metrics"]["overall"]["top1"]["value"] == 0
    frame, _ = read_predictions(out / "answers" / "predictions.parquet")
    assert set(frame["pred_class"]) == {-1} and set(frame["answer_status"]) == {"ambiguous"}
