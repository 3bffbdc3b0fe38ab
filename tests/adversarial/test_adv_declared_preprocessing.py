"""Hostile preprocessing declarations and forged preprocessing claims (issue 33): a bad
`--preprocessing` value is one line naming the field, before anything is read or written; the same
through `hsi.score(preprocessing=...)`; an entry claiming a crop its status says nobody knows, or a
status outside the three, is refused by the reader in one line."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from release_factory import make_composed_dataset

from builder.core.errors import HsiError
from evaluation.ranking.entries import check_entry, read_entry
from hsi.cli import main

SAMPLES = 8


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("declared")
    dataset = make_composed_dataset(root / "data", splits={"test": SAMPLES}, shard_size=4)
    keys = [f"test_{i:06d}" for i in range(SAMPLES)]
    pd.DataFrame({"key": keys, "pred_class": [i % 5 for i in range(SAMPLES)]}).to_csv(root / "p.csv", index=False)
    out = root / "out"
    argv = ["eval", str(dataset), "--predictions", str(root / "p.csv"), "--out", str(out), "--bootstrap", "10"]
    assert main([*argv, "--preprocessing", "crop_pct=0.875,size=224"]) == 0
    return dataset, root / "p.csv", out / "p"


BAD = {
    "crop_pct=1.5": "--preprocessing: crop_pct is the crop's share of the resized side, in (0, 1], got 1.5",
    "crop_pct=0": "--preprocessing: crop_pct is the crop's share of the resized side, in (0, 1], got 0",
    "crop_pct=nan": "--preprocessing: crop_pct is a finite number, got 'nan'",
    "crop_pct=much": "--preprocessing: crop_pct is a number, got 'much'",
    "size=0": "--preprocessing: size is a side of 1 to 8192 pixels, got 0",
    "size=99999": "--preprocessing: size is a side of 1 to 8192 pixels, got 99999",
    "size=224x224x3": "--preprocessing: size is a side or HEIGHTxWIDTH, e.g. 224 or 224x256, got '224x224x3'",
    "size=-224": "--preprocessing: size is a whole number of pixels, got '-224'",
    "resize=2.5e2": "--preprocessing: resize is a whole number of pixels, got '2.5e2'",
    "mean=123.7/116.3/103.5": "--preprocessing: mean is in [0, 1] units (at least 0, at most 1), got '123.7/",
    "std=0": "--preprocessing: std is in [0, 1] units (above 0, at most 1), got '0'",
    "mean=0.5/0.5": "--preprocessing: mean takes 3 values (R/G/B) or one for all three, got '0.5/0.5'",
    "interpolation=magic": "--preprocessing: interpolation is one of nearest, bilinear, bicubic, lanczos, box, hamming",
    "resize=256,crop_pct=0.9,size=224": "--preprocessing: resize 256 does not follow from size 224 and crop_pct 0.9",
    "resize=200,size=224": "--preprocessing: resize 200 is below the input height 224",
    "centre=yes": "--preprocessing: unknown field 'centre'; the fields are resize, crop_pct, size",
    "crop_pct": "--preprocessing: 'crop_pct' is not FIELD=VALUE; e.g. --preprocessing resize=256,",
    "size=224,size=256": "--preprocessing: size is given twice; give each field once",
    "crop_pct=0.875,": "--preprocessing: '' is not FIELD=VALUE",
}


@pytest.mark.parametrize("value", sorted(BAD))
def test_a_bad_declaration_is_one_line_and_nothing_is_written(scored, tmp_path, capsys, value):
    dataset, predictions, _ = scored
    out = tmp_path / "out"
    argv = ["eval", str(dataset), "--predictions", str(predictions), "--out", str(out), "--preprocessing", value]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"hsi eval: error: {BAD[value]}"), err
    assert not out.exists()


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ({"crop_pct": True}, "preprocessing=: crop_pct is a number, got True"),
        ({"size": [224, "x"]}, "preprocessing=: size is a whole number of pixels, got 'x'"),
        ({"mean": None}, "preprocessing= declares nothing: give at least one of resize, crop_pct"),
        ({}, "preprocessing= declares nothing"),
        (0.875, "preprocessing= is FIELD=VALUE text or a mapping of resize, crop_pct"),
        ("crop_pct", "preprocessing=: 'crop_pct' is not FIELD=VALUE; e.g. preprocessing=\"resize=256,"),
    ],
)
def test_a_bad_declaration_from_python_is_refused_before_the_data_is_read(scored, declaration, message):
    import hsi

    _, predictions, _ = scored
    with pytest.raises(HsiError) as refused:
        hsi.score(predictions, "no-such-folder", preprocessing=declaration)  # the data is never opened
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def _forged(folder, change) -> dict:
    entry = json.loads((folder / "entry.json").read_text())
    change(entry["preprocessing"])
    return entry


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda pre: pre.update(status="unknown", description="unknown"),
            "preprocessing: claims cropped of a preprocessing whose status is unknown; an unknown one is null",
        ),
        (lambda pre: pre.update(status="verified"), "preprocessing.status: 'verified' is not one of"),
        (lambda pre: pre.pop("status"), "preprocessing.status: missing"),
        (lambda pre: pre.update(cropped="yes"), "preprocessing.cropped: expected true or false"),
        (lambda pre: pre.update(resize=0), "preprocessing.resize: 0 is below the smallest allowed value 1"),
        (lambda pre: pre.update(guessed=True), "preprocessing: unknown key 'guessed'"),
    ],
)
def test_a_forged_preprocessing_claim_in_an_entry_is_refused(scored, change, message):
    _, _, folder = scored
    assert read_entry(folder / "entry.json")["preprocessing"]["status"] == "declared"
    with pytest.raises(HsiError) as refused:
        check_entry(_forged(folder, change), "entry.json")
    assert str(refused.value).startswith(f"entry.json: {message}"), str(refused.value)


def test_a_version_1_entry_cannot_claim_a_status_or_an_identity(scored):
    _, _, folder = scored
    entry = json.loads((folder / "entry.json").read_text())
    entry["schema_version"] = 1
    with pytest.raises(HsiError, match="entry.json: model: unknown key 'identity'"):
        check_entry(entry, "entry.json")
    del entry["model"]["identity"]
    with pytest.raises(HsiError, match="entry.json: preprocessing: unknown key 'resize'"):
        check_entry(entry, "entry.json")
