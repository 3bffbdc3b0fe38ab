"""What `hsi eval` reads from a stranger, attacked: predictions tables handed to `--from` (lying
`correct` columns, out-of-range classes, duplicated rows, odd metadata, inf probabilities, missing
columns, files that are not parquet), group names that would inject Markdown, eval datasets with
hostile sample json, `models.yaml` entries of the wrong kind, and `hsi scgs --predictions` tables
whose pred_class is not an integer. Each test failed on the code before #21's fix: a traceback, a
silent truncation, or a report that said what the table wanted it to say."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from release_factory import make_composed_dataset
from trusted_code import trust_flags

from builder.core.manifest import Manifest
from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from hsi.cli import main

CONFIG = "hard-spurious-imagenet"


class MeanColour(torch.nn.Module):
    """A 1000-way classifier of the image's mean colour: tiny, deterministic, sometimes right."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.mean((2, 3)))


@dataclass(frozen=True)
class Evaluated:
    root: Path
    dataset: Path
    model: Path
    predictions: Path


def eval_command(dataset: Path, out: Path, *extra: str, model: str | None = None) -> list[str]:
    models = ["--model", model] if model else []
    flags = ["--input-size", "32", "--mean", "0", "--std", "1", "--workers", "0", "--bootstrap", "20"]
    return [
        "eval",
        str(dataset),
        *models,
        *trust_flags(model or ""),
        *flags,
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> Evaluated:
    root = tmp_path_factory.mktemp("adv-eval")
    dataset = make_composed_dataset(root / "data", splits={"test": 12}, shard_size=4)
    model = root / "mean_colour.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(MeanColour().eval(), torch.zeros(1, 3, 32, 32)).save(str(model))
    assert main(eval_command(dataset, root / "eval", model=f"ts:{model}")) == 0
    return Evaluated(root, dataset, model, root / "eval" / "ts_mean_colour.pt" / "predictions.parquet")


def one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("hsi eval: error: "), err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# --- predictions tables handed to --from -------------------------------------------------------


def tampered(evaluated: Evaluated, folder: Path, change_rows=None, metadata=None, table=None) -> Path:
    """A copy of the run's predictions table, its rows changed by `change_rows(index, row)` or its
    `hsi` metadata by `metadata(dict)` (None: removed), written as a user would with pyarrow."""
    original = pq.read_table(evaluated.predictions)
    meta = json.loads(original.schema.metadata[b"hsi"])
    if table is None:
        rows = original.to_pylist()
        if change_rows is not None:
            rows = [r for r in (change_rows(i, dict(r)) for i, r in enumerate(rows)) if r is not None]
        table = pa.Table.from_pylist(rows, schema=original.schema.remove_metadata())
    if metadata is not None:
        meta = metadata(meta)
    raw = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    table = table.replace_schema_metadata({b"hsi": raw} if meta is not None else None)
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "predictions.parquet")
    return folder / "predictions.parquet"


def from_command(path: Path, out: Path) -> list[str]:
    return ["eval", "--from", str(path), "--out", str(out), "--bootstrap", "20"]


def test_from_derives_correct_from_the_classes_and_says_the_table_lied(evaluated, tmp_path):
    """Failed before: `correct=True` beside pred != label gave top-1 1.0."""
    frame = pq.read_table(evaluated.predictions).to_pandas()
    truth = float((frame["pred_class"] == frame["label_class"]).mean())
    assert truth < 1.0
    path = tampered(evaluated, tmp_path / "lie", lambda i, r: {**r, "correct": True, "correct_top5": True})
    assert main(from_command(path, tmp_path / "out")) == 0
    report = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert report["metrics"]["overall"]["top1"]["value"] == truth
    assert any("said otherwise" in note for note in report["notes"])


def _duplicate_first_row(rows_path: Path):
    rows = pq.read_table(rows_path).to_pylist()
    return pa.Table.from_pylist([*rows, rows[0]], schema=pq.read_table(rows_path).schema.remove_metadata())


TABLE_ATTACKS = {
    # failed before: accepted, exit 0 with wrong numbers
    "label -1": (dict(change_rows=lambda i, r: {**r, "label_class": -1} if i == 3 else r), "column label_class: row 4"),
    "label 5000": (dict(change_rows=lambda i, r: {**r, "label_class": 5000} if i == 3 else r), "holds 5000"),
    "pred 1000": (dict(change_rows=lambda i, r: {**r, "pred_class": 1000} if i == 0 else r), "column pred_class"),
    "classes 0": (
        dict(metadata=lambda m: {**m, "label_space": {**m["label_space"], "classes": 0}}),
        "hsi.label_space.classes: 0 is below",
    ),
    # failed before: a traceback
    "inf probability": (
        dict(change_rows=lambda i, r: {**r, "prob_label": math.inf} if i == 1 else r),
        "column prob_label: row 2",
    ),
    "nan top-5 probability": (
        dict(change_rows=lambda i, r: {**r, "top5_prob": [math.nan] * 5} if i == 2 else r),
        "column top5_prob: row 3",
    ),
    "no metadata": (dict(metadata=lambda m: None), "no 'hsi' schema metadata"),
    "metadata a list": (dict(metadata=lambda m: [m]), "hsi: expected an object, got a list"),
    "metadata not JSON": (dict(metadata=lambda m: b"{'model': 1"), "'hsi' schema metadata is not JSON"),
    "metadata NaN": (dict(metadata=lambda m: json.dumps({**m, "x": math.nan}).encode()), "is not JSON"),
    "metadata without a spec": (dict(metadata=lambda m: {**m, "model": {}}), "hsi.model.spec: missing"),
    "spec a number": (dict(metadata=lambda m: {**m, "model": {"spec": 5}}), "hsi.model.spec: expected a string"),
}


@pytest.mark.parametrize("attack", sorted(TABLE_ATTACKS))
def test_from_refuses_a_table_that_lies_in_one_line(evaluated, tmp_path, capsys, attack):
    change, needle = TABLE_ATTACKS[attack]
    path = tampered(evaluated, tmp_path / "in", **change)
    before = path.read_bytes()
    assert main(from_command(path, tmp_path / "out")) == 2
    one_line_error(capsys, str(path), needle)
    assert not (tmp_path / "out").exists()  # refused before any write
    assert path.read_bytes() == before


def test_from_refuses_duplicated_rows_missing_columns_and_wrong_kinds(evaluated, tmp_path, capsys):
    """Failed before: a duplicated row was counted twice; a missing column or a text pred_class was a
    KeyError / TypeError traceback."""
    table = pq.read_table(evaluated.predictions)
    text_pred = table.set_column(
        table.schema.get_field_index("pred_class"), "pred_class", pa.array([str(v) for v in table["pred_class"]])
    )
    cases = {
        "twice": (_duplicate_first_row(evaluated.predictions), "column key: the predictions table has two rows"),
        "no pred_class": (table.drop(["pred_class"]), "has no column pred_class"),
        "text pred_class": (text_pred, "column pred_class: holds text values"),
        "fractional label": (
            table.set_column(
                table.schema.get_field_index("label_class"),
                "label_class",
                pa.array([v.as_py() + 0.5 for v in table["label_class"]]),
            ),
            "column label_class: row 1",
        ),
    }
    for name, (changed, needle) in cases.items():
        path = tampered(evaluated, tmp_path / name.replace(" ", "-"), table=changed)
        assert main(from_command(path, tmp_path / "out")) == 2, name
        one_line_error(capsys, needle)
        assert not (tmp_path / "out").exists()


def test_from_refuses_a_file_that_is_not_parquet(tmp_path, capsys):
    """Failed before: a raw pyarrow traceback."""
    path = tmp_path / "predictions.parquet"
    path.write_text("key,pred_class\nx,1\n")
    assert main(from_command(path, tmp_path / "out")) == 2
    one_line_error(capsys, "is not a readable parquet file")


def headings_and_rows(markdown: str) -> list[tuple[str, int]]:
    """The structure of a Markdown report: its headings, and each table row's cell count."""
    structure = []
    for line in markdown.splitlines():
        if line.startswith("#"):
            structure.append((line, 0))
        elif line.startswith("|"):
            cells = line.replace("\\|", "").count("|") - 1
            structure.append(("row", cells))
    return structure


def test_names_from_the_data_cannot_change_the_structure_of_eval_md(evaluated, tmp_path):
    """Failed before: a group name or model spec holding a newline started a heading in eval.md (the
    worst-group line, the title)."""
    clean = tampered(evaluated, tmp_path / "clean", metadata=lambda m: {**m, "notes": ["a b"]})
    assert main(from_command(clean, tmp_path / "clean-out")) == 0
    hostile_groups = {"CeO": "CeO\n# injected group", "CoO": "Co|O", "CeR": "CeR\r\n| a | b |", "CoR": "CoR\n\n---"}
    path = tampered(
        evaluated,
        tmp_path / "hostile",
        lambda i, r: {**r, "group": hostile_groups[r["group"]], "position": r["position"] + "\n## pos"},
        metadata=lambda m: {**m, "model": {**m["model"], "spec": "ts:x\n# injected spec"}, "notes": ["a\n# b"]},
    )
    assert main(from_command(path, tmp_path / "hostile-out")) == 0
    clean_md = (tmp_path / "clean-out" / "eval.md").read_text()
    hostile_md = (tmp_path / "hostile-out" / "eval.md").read_text()
    assert not [
        line
        for line in hostile_md.splitlines()
        if "injected" in line and line.startswith("#") and not line.startswith("# Evaluation of")
    ]
    clean_structure = [(h, n) for h, n in headings_and_rows(clean_md) if not h.startswith("# Evaluation")]
    hostile_structure = [(h, n) for h, n in headings_and_rows(hostile_md) if not h.startswith("# Evaluation")]
    assert hostile_structure == clean_structure
    assert len(hostile_md.splitlines()) == len(clean_md.splitlines())


# --- hostile sample json in an eval dataset -----------------------------------------------------


def rewrite_first_shard(dataset: Path, change) -> None:
    """Rewrite the first test shard's samples with `change(index, members)` and the manifest to
    match, as a hostile dataset's author would (its sha256 then proves nothing)."""
    manifest = Manifest.read(dataset)
    split = manifest.splits["test"]
    shard = dataset / split.shards[0].filename
    samples = [(key, change(i, dict(members))) for i, (key, members) in enumerate(iter_shard(shard))]
    split.shards[0] = write_shard(shard, samples)
    manifest.write(dataset)


def test_hostile_sample_json_is_an_error_row_and_the_run_completes(evaluated, tmp_path, capsys):
    """Failed before: NaN size was an ArrowInvalid traceback, a json list an AttributeError, class_index
    5000 an IndexError; label 5000 and a paired_wnid of no class were accepted."""
    dataset = make_composed_dataset(tmp_path / "data", splits={"test": 12}, shard_size=6)

    def attack(index: int, members: dict) -> dict:
        meta = json.loads(members["json"])
        hostile = [
            {**meta, "label": 5000},
            {**meta, "size": math.nan},
            [meta],
            {**meta, "class_index": 5000},
            {**meta, "paired_wnid": "n99999999"},
        ]
        if index < len(hostile):
            members["json"] = json.dumps(hostile[index]).encode()
        return members

    rewrite_first_shard(dataset, attack)
    out = tmp_path / "out"
    assert main(eval_command(dataset, out, model=f"ts:{evaluated.model}")) == 0
    assert "Traceback" not in capsys.readouterr().err
    report = json.loads((out / "ts_mean_colour.pt" / "eval.json").read_text())
    errors = report["metrics"]["errors"]
    assert errors["by_reason"] == {"undecodable-sample": 5} and report["metrics"]["samples"] == 7
    details = " ".join(row["detail"] for row in errors["rows"])
    for needle in (
        "label: 5000 is above",
        "NaN is not a JSON number",
        "json member is a list, not an object",
        "class_index: 5000",
        "'n99999999' is not an ImageNet-1k wnid",
    ):
        assert needle in details, (needle, details)
    assert "## Error rows" in (out / "ts_mean_colour.pt" / "eval.md").read_text()


# --- models.yaml ---------------------------------------------------------------------------------

MODEL_LISTS = {
    # failed before: a TypeError / AttributeError / ValueError traceback
    "- 5\n": "models.yaml: [0]: expected a model spec or a mapping",
    "- model: 123\n": "models.yaml: [0].model: expected a string, got 123",
    "- model: null\n": "models.yaml: [0].model: expected a string, got null",
    "- model: timm:resnet18\n- model: ts:m.pt\n  input_size: abc\n": "models.yaml: [1].input_size: takes S, H,W",
    "- model: [timm:resnet18\n": "models.yaml: --models list is not valid YAML",
    # failed before: silently ignored
    "- model: timm:resnet18\n  chekpoint: w.pth\n": "models.yaml: [0]: unknown key 'chekpoint'",
    # failed before: refused, but without naming the file or the entry
    "- model: timm:resnet18\n  crop_pct: 2\n": "models.yaml: [0].crop_pct: 2 is above",
}


@pytest.mark.parametrize("listing", sorted(MODEL_LISTS))
def test_models_yaml_entries_of_the_wrong_kind_are_one_line(evaluated, tmp_path, capsys, listing):
    path = tmp_path / "models.yaml"
    path.write_text(listing)
    out = tmp_path / "out"
    assert main(["eval", str(evaluated.dataset), "--models", str(path), "--out", str(out), "--no-progress"]) == 2
    one_line_error(capsys, MODEL_LISTS[listing])
    assert not out.exists()


def test_a_models_yaml_of_valid_entries_still_evaluates(evaluated, tmp_path):
    (tmp_path / "m.pt").write_bytes(evaluated.model.read_bytes())
    path = tmp_path / "models.yaml"
    path.write_text("- model: ts:m.pt\n  input_size: 32\n  mean: [0, 0, 0]\n  std: 1\n")
    out = tmp_path / "out"
    assert (
        main(
            [
                "eval",
                str(evaluated.dataset),
                "--models",
                str(path),
                *trust_flags(path),
                "--out",
                str(out),
                "--workers",
                "0",
                "--bootstrap",
                "20",
                "--no-progress",
            ]
        )
        == 0
    )
    report = json.loads((out / "ts_m.pt" / "eval.json").read_text())
    assert report["preprocessing"]["input_size"] == [32, 32] and report["preprocessing"]["mean"] == [0.0, 0.0, 0.0]


# --- hsi scgs --predictions ----------------------------------------------------------------------


@pytest.mark.parametrize("pred", ["abc", math.inf, 57.7])
def test_scgs_predictions_with_a_pred_class_that_is_no_class_index_are_one_line(evaluated, tmp_path, pred):
    """Failed before: "abc" a ValueError traceback, inf an OverflowError traceback, 57.7 silently
    truncated to class 57."""
    from builder.augment.misclassified import PredictionsMismatch
    from evaluation.model_formats.labels import config_wnids
    from training.scgs_classifier import read_train_predictions

    table = pq.read_table(evaluated.predictions)
    column = [pred] + [float(v) if not isinstance(pred, str) else str(v) for v in table["pred_class"].to_pylist()[1:]]
    changed = table.set_column(table.schema.get_field_index("pred_class"), "pred_class", pa.array(column))
    meta = json.loads(table.schema.metadata[b"hsi"])  # of the train split, as SCGS needs
    changed = changed.replace_schema_metadata(
        {b"hsi": json.dumps({**meta, "data": {**meta["data"], "split": "train"}})}
    )
    path = tmp_path / "predictions.parquet"
    pq.write_table(changed, path)
    wnids = config_wnids(json.loads((evaluated.dataset / "_info.json").read_text()))
    with pytest.raises(PredictionsMismatch) as refused:
        read_train_predictions(path, wnids)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"--predictions {path}: column pred_class: ")
    assert ("holds text values" if pred == "abc" else f"row 1 ({table['key'][0].as_py()}) holds") in message


def test_a_classes_file_that_is_missing_or_a_link_is_one_line(tmp_path):
    """Failed before: a raw FileNotFoundError traceback from read_classes_file."""
    import os

    from evaluation.model_formats.models import ModelError, read_classes_file

    with pytest.raises(ModelError, match="--classes .*not found"):
        read_classes_file(tmp_path / "missing.txt")
    (tmp_path / "real.txt").write_text("n01440764\n")
    os.symlink(tmp_path / "real.txt", tmp_path / "link.txt")
    with pytest.raises(ModelError, match="is a link"):
        read_classes_file(tmp_path / "link.txt")
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ModelError, match="not UTF-8|codec"):
        read_classes_file(tmp_path / "binary.txt")
    assert read_classes_file(tmp_path / "real.txt") == ("n01440764",)


def test_a_cls_beyond_the_configs_labels_without_a_class_index_is_one_line():
    """Failed before: an IndexError traceback (wnids[cls]) for a -10 sample whose json had no class_index."""
    from types import SimpleNamespace

    import numpy as np

    from builder.core.errors import InputError
    from evaluation.predicting.predict import prediction_rows

    classifier = SimpleNamespace(column_of=np.arange(1000), class_index=np.arange(1000))
    rows = [{"key": "k0", "shard": "test-00000.tar", "cls": 57, "meta": {}}]
    with pytest.raises(InputError, match="cls 57 is beyond the config's 10 labels"):
        prediction_rows(np.full((1, 1000), 1e-3), rows, classifier, tuple(f"n0{i:07d}" for i in range(10)))
