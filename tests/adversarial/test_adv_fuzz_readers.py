"""Seeded mutation fuzz of what `hsi eval` reads from a stranger, the way test_adv_png_fuzz.py fuzzes
PNGs: a predictions table (its bytes, its values and its `hsi` metadata), a models.yaml and a
sample's json. Every outcome is either a valid result that the next step uses without failing (the
metrics and both reports of an accepted table, the model options of an accepted entry, the
predictions row of an accepted sample) or an HsiError: never another exception."""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from release_factory import composite_json, jpeg

from builder.core.classes import class_of, imagenet_classes
from builder.core.errors import HsiError
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.analysis.metrics import compute_metrics
from evaluation.analysis.report import _plain, build_report, render_markdown
from evaluation.model_formats.models import Preprocessing
from evaluation.orchestration.model_list import ENTRY_KEYS, model_entries
from evaluation.predicting.data import decode_member_sample
from evaluation.predicting.predictions import flatten_row, predictions_schema, read_predictions, write_predictions
from hsi.commands.eval import model_options

SETTINGS = BootstrapSettings(resamples=3, seed=0)
JUNK = [
    None,
    True,
    -1,
    0,
    5000,
    1 << 70,
    57.7,
    math.inf,
    -math.inf,
    math.nan,
    "",
    "abc",
    "x|y\n# z",
    "\ud800",
    [],
    [1, "a"],
    {},
    {"a": [None]},
]


def predictions_metadata() -> dict:
    return {
        "model": {"spec": "ts:m.pt", "checkpoint": "m.pt", "checkpoint_sha256": "0" * 64, "declared_classes": None},
        "preprocessing": {"description": "canvas as is", "cropped": False, "crop_pct": None, "input_size": [32, 32]},
        "label_space": {"name": "imagenet", "classes": 1000, "description": "argmax over all 1000 classes"},
        "data": {"source": "d", "config": "c", "split": "test", "fingerprint": "f", "num_samples": 8, "limit": None},
        "run": {"device": "cpu"},
        "toolkit": {"name": "hard-spurious-imagenet", "version": "0"},
        "notes": [],
    }


def prediction_rows(count: int = 8) -> list[dict]:
    rng = random.Random(0)
    rows = []
    for i in range(count):
        meta = composite_json("c", "test", i, i % 3, i % 3, 0)
        top5 = [meta["class_index"] if i % 2 else (meta["class_index"] + 1) % 1000, 7, 8, 9, 10]
        rows.append(
            {
                "key": f"test_{i:06d}",
                "shard": "test-00000.tar",
                "status": "ok",
                "cls": i % 3,
                "label_class": meta["class_index"],
                "pred_class": top5[0],
                "top5_class": top5,
                "top5_prob": sorted((rng.random() / 5 for _ in range(5)), reverse=True),
                "correct": top5[0] == meta["class_index"],
                "correct_top5": True,
                "prob_label": rng.random(),
                "prob_background_class": rng.random(),
                "meta": meta,
            }
        )
    return rows


@pytest.fixture(scope="module")
def table_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "predictions.parquet"
    errors = [{"key": None, "shard": "test-00001.tar", "reason": "unreadable-shard", "detail": "cut"}]
    return write_predictions(path, prediction_rows(), errors, predictions_metadata())


def analysed(path: Path) -> str:
    """'refused' (an HsiError) or 'analysed': the table read, its metrics computed, eval.json and
    eval.md rendered as `hsi eval --from` renders them."""
    try:
        frame, metadata = read_predictions(path)
    except HsiError:
        return "refused"
    metrics = compute_metrics(frame, label_space_size=metadata["label_space"]["classes"], settings=SETTINGS)
    report = build_report(metadata, metrics, {"plots": [], "files": {"predictions": path.name}})
    json.dumps(report, allow_nan=False, default=_plain).encode("utf-8")
    render_markdown(report).encode("utf-8")
    return "analysed"


def test_mutated_predictions_bytes_are_refused_or_analysed(table_file, tmp_path):
    rng = random.Random(21)
    data = table_file.read_bytes()
    outcomes = []
    for n in range(120):
        damaged = bytearray(data)
        attack = rng.randrange(4)
        if attack == 0:  # flipped bits anywhere
            for _ in range(rng.randrange(1, 4)):
                damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        elif attack == 1:  # a cut file
            damaged = damaged[: rng.randrange(len(damaged))]
        elif attack == 2:  # a byte overwritten in the footer (schema, metadata, offsets)
            damaged[rng.randrange(max(0, len(damaged) - 400), len(damaged) - 8)] = rng.randrange(256)
        else:  # a run of bytes of the data pages overwritten
            start = rng.randrange(4, len(damaged) // 2)
            damaged[start : start + rng.randrange(1, 16)] = bytes(rng.randrange(256) for _ in range(16))[:16]
        path = tmp_path / f"{n}.parquet"
        path.write_bytes(bytes(damaged))
        outcomes.append(analysed(path))
    assert "refused" in outcomes  # the mutations reach the checks, not only valid tables


def _mutate_column(rng: random.Random, table: pa.Table) -> pa.Table:
    index = rng.randrange(table.num_columns)
    name = table.column_names[index]
    values = table.column(index).to_pylist()
    row = rng.randrange(len(values))
    choice = rng.choice(JUNK + ["same-kind"])
    if choice == "same-kind" and isinstance(values[row], int) and not isinstance(values[row], bool):
        values[row] = rng.choice([-1, 999, 1000, -(1 << 63), (1 << 63) - 1])
    elif choice == "same-kind" and isinstance(values[row], float):
        values[row] = rng.choice([-0.5, 1.5, math.nan, math.inf])
    else:
        values[row] = choice
    try:
        column = pa.array(values)
    except (pa.ArrowException, OverflowError, TypeError, ValueError, UnicodeEncodeError):
        # values of mixed kinds: the column holds their text (or nothing) instead
        column = pa.array([None if v is None else repr(v) for v in values]) if rng.random() < 0.5 else None
        column = pa.nulls(len(values)) if column is None else column
    return table.set_column(index, name, column)


def _mutate_metadata(rng: random.Random, metadata: dict):
    if rng.random() < 0.1:
        return rng.choice([b"", b"[]", b"{", b"null", b'{"a": NaN}', b"\xff\xfe", b'"text"'])
    metadata = json.loads(json.dumps(metadata))
    holder, key = metadata, None
    for _ in range(rng.randrange(1, 3)):
        key = rng.choice(sorted(holder))
        if not isinstance(holder[key], dict) or not holder[key]:
            break
        holder = holder[key]
        key = None
    key = key or rng.choice(sorted(holder))
    if rng.random() < 0.3:
        del holder[key]
    else:
        holder[key] = rng.choice(JUNK)
    return json.dumps(metadata).encode("utf-8", "surrogatepass")


def test_mutated_predictions_values_and_metadata_are_refused_or_analysed(table_file, tmp_path):
    rng = random.Random(7)
    original = pq.read_table(table_file)
    metadata = json.loads(original.schema.metadata[b"hsi"])
    outcomes = []
    for n in range(100):
        table = original.replace_schema_metadata(None)
        for _ in range(rng.randrange(1, 3)):
            table = _mutate_column(rng, table)
        raw = _mutate_metadata(rng, metadata) if rng.random() < 0.4 else json.dumps(metadata).encode()
        if rng.random() < 0.1:
            table = table.drop([rng.choice(table.column_names)])
        path = tmp_path / f"{n}.parquet"
        try:
            pq.write_table(table.replace_schema_metadata({b"hsi": raw}), path)
        except pa.ArrowException:  # a mutant parquet cannot hold (a struct of no fields): no file to read
            continue
        outcomes.append(analysed(path))
    assert {"refused", "analysed"} <= set(outcomes)


# --- models.yaml ----------------------------------------------------------------------------------


def _random_entry(rng: random.Random):
    if rng.random() < 0.15:
        return rng.choice(JUNK[:13] + ["timm:resnet18"])
    keys = rng.sample(ENTRY_KEYS, rng.randrange(0, 5)) + (["model"] if rng.random() < 0.8 else [])
    if rng.random() < 0.1:
        keys.append(rng.choice(["chekpoint", "Model", "input-size", 5]))
    good = {"model": "ts:m.pt", "mean": [0.5, 0.5, 0.5], "std": "0.2,0.2,0.2", "input_size": "3,64,64", "crop_pct": 0.9}
    good.update({"num_classes": 10, "interpolation": "bicubic", "arch": "resnet18", "checkpoint": "w.pth"})
    return {key: good.get(key, "x") if rng.random() < 0.5 else rng.choice(JUNK[:13]) for key in keys}


def _arguments() -> argparse.Namespace:
    names = ("checkpoint", "arch", "num_classes", "classes", "mean", "std", "input_size", "interpolation", "crop_pct")
    return argparse.Namespace(**dict.fromkeys(names), trust_file=None, trust_code=False)


def test_fuzzed_models_yaml_is_refused_or_gives_usable_entries(tmp_path):
    rng = random.Random(5)
    valid = yaml.safe_dump([{"model": "ts:m.pt", "mean": 0, "input_size": 32}, "timm:resnet18"]).encode()
    outcomes = []
    for n in range(300):
        if n % 3 == 0:  # bytes of a valid listing, damaged
            data = bytearray(valid)
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            listing = [_random_entry(rng) for _ in range(rng.randrange(0, 3))]
            try:
                data = bytearray(yaml.safe_dump(listing, allow_unicode=True).encode("utf-8", "surrogatepass"))
            except yaml.YAMLError:
                continue
        path = tmp_path / "models.yaml"
        path.write_bytes(bytes(data))
        try:
            entries = model_entries(None, str(path))
        except HsiError:
            outcomes.append("refused")
            continue
        for entry in entries:
            entry.pop("classes", None)  # a file to read, not a value: loading it is the model's business
            model_options(entry, _arguments())
        outcomes.append("accepted")
    assert {"refused", "accepted"} <= set(outcomes)


# --- a sample's json -------------------------------------------------------------------------------


def _predictions_row(meta: dict) -> dict:
    """What evaluation.predicting.predict makes of an accepted sample's metadata, up to the table's schema."""
    paired = meta.get("paired_wnid")
    row = {"key": "k", "status": "ok", "label_class": meta.get("class_index"), "meta": meta}
    row["paired_class_index"] = class_of(paired).index if paired else None
    pa.Table.from_pylist([flatten_row(row)], schema=predictions_schema())
    return row


def test_fuzzed_sample_json_is_an_error_row_or_a_predictions_row():
    rng = random.Random(3)
    meta = composite_json("c", "test", 1, 1, 1, 0)
    valid = json.dumps(meta).encode()
    picture = jpeg(1)
    pre = Preprocessing((32, 32), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), "bicubic", None, "test")
    outcomes = []
    for n in range(400):
        if n % 4 == 0:
            data = bytearray(valid)
            for _ in range(rng.randrange(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            raw = bytes(data)
        else:
            changed = dict(meta)
            for _ in range(rng.randrange(1, 3)):
                key = rng.choice(sorted(changed) + ["extra"]) if changed else "extra"
                changed[key] = rng.choice(JUNK + [imagenet_classes()[rng.randrange(1000)].wnid])
            raw = json.dumps(rng.choice([changed, changed, [changed], "text"])).encode("utf-8", "surrogatepass")
        members = {"jpg": picture, "cls": rng.choice([b"1", b"1", b"5000", b"-1", b"abc", b"1.5"]), "json": raw}
        try:
            _, label, accepted = decode_member_sample("k", members, pre)
        except HsiError:
            outcomes.append("error row")
            continue
        assert 0 <= label <= 999
        _predictions_row(accepted)
        outcomes.append("accepted")
    assert {"error row", "accepted"} <= set(outcomes)
