"""Hostile `background_status` in a composite (#46: own, none, or null on gray and noise): every
reader refuses any other value in one line, naming the field: `stream()`, validate's schema row,
eval's sample reader (an error row) and a predictions table (`hsi eval --from`). A composite of an
older schema without the key still reads, and one of schema 4 without it does not."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from release_factory import composite_json, make_composed_dataset

from builder.core.manifest import Manifest
from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from builder.core.untrusted import UntrustedInput
from builder.formats.composites import check_composite_json, composite_background_status
from builder.formats.stream import StreamError, stream
from evaluation.predicting.data import sample_json
from evaluation.predicting.predictions import write_predictions
from hsi.cli import main
from validation.integrity import check_dataset

HOSTILE = [
    ("maybe", "background_status must be one of own, none or null, got 'maybe'"),
    ("NONE", "background_status must be one of own, none or null, got 'NONE'"),
    ("", "background_status must be one of own, none or null, got ''"),
    (5, "background_status must be a string, got int"),
    (["own"], "background_status must be a string, got list"),
]


def meta(**fields) -> dict:
    return {**composite_json("c", "test", 0, 0, 0, 0), **fields}


def planted(tmp_path: Path, value) -> Path:
    """A composed dataset whose sample test_000001 has `background_status` = value (manifest refreshed)."""
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 4}, shard_size=4)
    manifest = Manifest.read(dataset)
    split = manifest.splits["test"]
    shard = dataset / split.shards[0].filename
    samples = []
    for key, members in iter_shard(shard):
        if key == "test_000001":
            data = json.loads(members["json"])
            data["background_status"] = value
            members = {**members, "json": json.dumps(data, sort_keys=True).encode()}
        samples.append((key, members))
    shard.unlink()
    split.shards[0] = write_shard(shard, samples)
    manifest.write(dataset)
    return dataset


@pytest.mark.parametrize("value, needle", HOSTILE)
def test_the_schema_check_names_a_hostile_status_in_one_line(value, needle):
    problems = check_composite_json(meta(background_status=value))
    assert len(problems) == 1 and needle in problems[0] and "\n" not in problems[0]


def test_a_status_must_fit_the_schema_version_it_claims():
    assert check_composite_json(meta()) == []
    assert check_composite_json(meta(background_status=None)) == []  # gray and noise
    without = meta()
    del without["background_status"]
    assert check_composite_json(without) == ["missing keys ['background_status']"]
    older = composite_json("c", "test", 0, 0, 0, 0, schema_version=3)
    assert "background_status" not in older and check_composite_json(older) == []
    assert check_composite_json({**older, "background_status": "own"}) == ["unexpected keys ['background_status']"]
    assert check_composite_json(meta(schema_version=5)) == [
        "schema_version 5 is not a composite schema version 1-4"
    ]
    assert check_composite_json(meta(schema_version=True))[-1].startswith("schema_version True is not")


def test_the_reader_takes_an_older_composite_as_own_and_refuses_a_hostile_one():
    older = composite_json("c", "test", 0, 0, 0, 0, schema_version=3)
    assert composite_background_status(older) == "own"
    assert composite_background_status({**older, "background_source_id": None}) is None  # gray, noise
    assert composite_background_status(meta(background_status="none")) == "none"
    with pytest.raises(ValueError, match="^json background_status must be one of own, none or null, got 'maybe'$"):
        composite_background_status(meta(background_status="maybe"))


def test_stream_refuses_a_hostile_status_in_one_line_naming_the_sample(tmp_path):
    dataset = planted(tmp_path, "maybe")
    seen = []
    with pytest.raises(StreamError) as caught:
        for sample in stream(dataset, split="test"):
            seen.append((sample["key"], sample["background_status"]))
    assert seen == [("test_000000", "own")]
    line = str(caught.value)
    assert "\n" not in line and "sample 'test_000001' failed to decode" in line
    assert "background_status must be one of own, none or null, got 'maybe'" in line


@pytest.mark.parametrize("value, needle", HOSTILE[:1] + HOSTILE[3:4])
def test_validate_makes_a_hostile_status_a_schema_row(tmp_path, value, needle):
    found = check_dataset(planted(tmp_path, value)).failures
    (row,) = [f for f in found if f.reason == "schema"]
    assert row.key == "test_000001" and needle in row.detail and "\n" not in row.detail


def test_validate_names_a_status_on_the_wrong_kind_of_background(tmp_path):
    found = check_dataset(planted(tmp_path, None)).failures  # an original background
    (row,) = [f for f in found if "background_status" in f.detail]  # the factory's samples break others
    assert (row.reason, row.key) == ("background-source", "test_000001")
    assert "original background has background_status None: null only on gray and noise" in row.detail


@pytest.mark.parametrize(
    "value, needle",
    [
        ("maybe", "json member: background_status: 'maybe' is not one of"),
        ("", "json member: background_status: '' is not one of"),
        (5, "json member: background_status: expected a string, got 5"),
        (["own"], "json member: background_status: expected a string, got a list"),
    ],
)
def test_eval_makes_a_hostile_status_an_error_row(value, needle):
    with pytest.raises(UntrustedInput) as caught:  # the reader's callers make it the sample's error row
        sample_json(json.dumps(meta(background_status=value)).encode())
    line = str(caught.value)
    assert needle in line and "\n" not in line
    assert sample_json(json.dumps(meta(background_status="none")).encode())["background_status"] == "none"


def predictions(tmp_path: Path) -> Path:
    rows = []
    for i in range(6):
        data = composite_json("c", "test", i, i % 3, i % 3, 0)
        top5 = [data["class_index"], 7, 8, 9, 10]
        rows.append(
            {
                "key": f"test_{i:06d}",
                "shard": "test-00000.tar",
                "status": "ok",
                "cls": i % 3,
                "label_class": data["class_index"],
                "pred_class": top5[0],
                "top5_class": top5,
                "top5_prob": [0.5, 0.1, 0.1, 0.1, 0.1],
                "prob_label": 0.5,
                "prob_background_class": 0.5,
                "meta": data,
            }
        )
    metadata = {
        "model": {"spec": "ts:m.pt", "checkpoint": "m.pt", "checkpoint_sha256": "0" * 64},
        "preprocessing": {"description": "canvas as is", "cropped": False},
        "label_space": {"name": "imagenet", "classes": 1000, "description": "argmax over all 1000 classes"},
        "data": {"source": "d", "config": "c", "split": "test", "fingerprint": "f", "limit": None},
        "notes": [],
    }
    return write_predictions(tmp_path / "run" / "predictions.parquet", rows, [], metadata)


def test_a_predictions_table_with_a_hostile_status_is_one_line(tmp_path, capsys):
    table = predictions(tmp_path)
    original = pq.read_table(table)
    assert original.column("background_status").to_pylist() == ["own"] * 4 + ["none", "own"]
    index = original.schema.get_field_index("background_status")
    tampered = original.set_column(index, "background_status", pa.array(["own"] * 5 + ["maybe"]))
    pq.write_table(tampered.replace_schema_metadata(original.schema.metadata), table)
    assert main(["eval", "--from", str(table), "--out", str(tmp_path / "out"), "--bootstrap", "10"]) != 0
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "column background_status" in err and "row 6 (test_000005) holds 'maybe'" in err


def test_a_predictions_table_written_before_the_status_reads_it_as_null(tmp_path):
    from evaluation.predicting.predictions import read_predictions

    table = predictions(tmp_path)
    original = pq.read_table(table)
    older = original.drop_columns(["background_status"]).replace_schema_metadata(original.schema.metadata)
    pq.write_table(older, table)
    frame, _ = read_predictions(table)
    assert frame["background_status"].isna().all() and len(frame) == 6


def test_a_predictions_table_with_null_statuses_reads(tmp_path):
    """Gray and noise samples, and error rows, hold null: not a hostile value (is_in(null) is false)."""
    from evaluation.predicting.predictions import read_predictions

    table = predictions(tmp_path)
    original = pq.read_table(table)
    index = original.schema.get_field_index("background_status")
    nulls = original.set_column(index, "background_status", pa.array([None, "own", None, "none", None, "own"]))
    pq.write_table(nulls.replace_schema_metadata(original.schema.metadata), table)
    frame, _ = read_predictions(table)
    read = [value if isinstance(value, str) else None for value in frame["background_status"]]
    assert read == [None, "own", None, "none", None, "own"] and frame["background_status"].isna().sum() == 3
