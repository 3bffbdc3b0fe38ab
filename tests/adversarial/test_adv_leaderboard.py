"""`hsi leaderboard verify` against tampered submissions (issue 25): a true entry verifies; an entry
with a changed figure, a predictions file with a changed prediction (its sha256, and with the entry's
sha256 updated too, the figures that no longer follow), a prediction row whose copy of its sample was
changed, a withheld or missing prediction, predictions of another model, an entry naming another
data revision, a changed shard and a malformed entry are each refused, with one line per mismatch
naming the field, the claimed value and the value found. Every command runs through `hsi.cli.main`."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from colour_entry import colour_entry
from release_factory import composed_fingerprint, make_composed_dataset
from tiny_models import MeanColour
from trusted_code import trust_flags

from builder.core.hashing import sha256_file
from builder.core.manifest import Manifest
from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from hsi.cli import main

torch = pytest.importorskip("torch")

MODEL = "ts_colour.pt"


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """(model folder of an `hsi eval` run, its data, the same config composed with another seed)."""
    root = tmp_path_factory.mktemp("adv-leaderboard")
    folder, data, _ = colour_entry(root, "--entry-name", "Mean colour")
    other = make_composed_dataset(root / "other", splits={"test": 12}, shard_size=4, seed=1)
    return folder, data, other


@pytest.fixture
def submission(evaluated, tmp_path):
    """A copy of the entry and its predictions, as a submitter sends them."""
    folder = tmp_path / "submitted"
    shutil.copytree(evaluated[0], folder)
    return folder


def verify(folder, data, capsys, *extra) -> tuple[int, list[str], str]:
    """(exit status, the mismatch lines, stderr) of `hsi leaderboard verify`."""
    capsys.readouterr()
    status = main(["leaderboard", "verify", str(folder / "entry.json"), "--data", str(data), *extra])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = [line.removeprefix("mismatch: ") for line in captured.out.splitlines() if line.startswith("mismatch: ")]
    return status, lines, captured.err


def refused(folder, data, capsys, *extra) -> list[str]:
    status, lines, err = verify(folder, data, capsys, *extra)
    assert status == 1, err
    errors = [line for line in err.splitlines() if line.startswith("hsi leaderboard: error:")]
    assert len(errors) == 1 and f"{len(lines)} mismatches" in errors[0] and "is refused" in errors[0], err
    return lines


def edit_entry(folder, change) -> dict:
    entry = json.loads((folder / "entry.json").read_text())
    change(entry)
    (folder / "entry.json").write_text(json.dumps(entry))
    return entry


def resign(folder) -> None:
    """The entry's predictions sha256 set to the file's: a tamperer who covers their tracks."""
    digest = sha256_file(folder / "predictions.parquet")
    edit_entry(folder, lambda entry: entry["predictions"].update(sha256=digest))


def edit_rows(folder, change, metadata=None) -> list[dict]:
    """Rewrite predictions.parquet with `change(rows)` applied (its schema and run metadata kept,
    or the metadata replaced by `metadata(old)`)."""
    path = folder / "predictions.parquet"
    table = pq.read_table(path)
    rows = table.to_pylist()
    change(rows)
    schema = table.schema
    if metadata is not None:
        old = json.loads(schema.metadata[b"hsi"])
        schema = schema.with_metadata({b"hsi": json.dumps(metadata(old)).encode()})
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return rows


def test_a_true_entry_verifies(evaluated, submission, capsys):
    status, lines, err = verify(submission, evaluated[1], capsys)
    assert status == 0 and lines == [], err
    assert main(["leaderboard", "verify", str(submission), "--data", str(evaluated[1])]) == 0  # the folder works too
    printed = capsys.readouterr().out
    assert printed.startswith("re-scored: Mean colour (ts:colour.pt) on hard-spurious-imagenet/test")
    assert "12 samples (0 error rows)" in printed and "worst group" in printed


def test_a_changed_figure_in_the_entry_is_refused_naming_it(evaluated, submission, capsys):
    entry = json.loads((submission / "entry.json").read_text())
    true = entry["figures"]["worst_group"]["value"]
    edit_entry(submission, lambda e: e["figures"]["worst_group"].update(value=0.5))
    assert refused(submission, evaluated[1], capsys) == [f"figures.worst_group.value: entry 0.5, recomputed {true:.6g}"]
    edit_entry(submission, lambda e: e["figures"]["worst_group"].update(value=true))
    edit_entry(submission, lambda e: e["figures"]["by_group"][3]["top1"].update(n=4))
    group = entry["figures"]["by_group"][3]["group"]
    assert refused(submission, evaluated[1], capsys) == [f"figures.by_group[{group}].top1.n: entry 4, recomputed 3"]


def test_a_changed_prediction_fails_the_sha256_and_then_the_figures(evaluated, submission, capsys):
    old = sha256_file(submission / "predictions.parquet")

    def make_correct(rows):
        row = rows[0]
        row["pred_class"] = row["label_class"]
        row["top5_class"] = [row["label_class"], *row["top5_class"][1:]]

    edit_rows(submission, make_correct)
    new = sha256_file(submission / "predictions.parquet")
    lines = refused(submission, evaluated[1], capsys)
    assert lines[0] == f"predictions.sha256: entry '{old}', predictions.parquet '{new}'"
    assert "figures.top1.value: entry 0, recomputed 0.083333" in lines
    resign(submission)  # the sha256 now matches: the figures still do not follow
    lines = refused(submission, evaluated[1], capsys)
    assert "figures.top1.value: entry 0, recomputed 0.083333" in lines
    assert not any(line.startswith(("predictions", "model", "data")) for line in lines)


@pytest.mark.parametrize("column", ["label_class", "group", "size"])
def test_a_row_whose_copy_of_its_sample_was_changed_is_refused(evaluated, submission, capsys, column):
    def tamper(rows):
        row = rows[4]
        changed = {"label_class": row["pred_class"], "group": "CeO" if row["group"] != "CeO" else "CoR"}
        changed["size"] = 56 if row["size"] != 56 else 112
        tamper.key, tamper.was, tamper.now = row["key"], row[column], changed[column]
        row[column] = changed[column]

    edit_rows(submission, tamper)
    resign(submission)
    # scored against the shards' own labels and metadata, the figures follow: only the row is named
    assert refused(submission, evaluated[1], capsys) == [
        f"predictions[{tamper.key}].{column}: predictions {tamper.now!r}, shard {tamper.was!r}"
    ]


def test_a_withheld_and_a_missing_prediction_are_refused(evaluated, submission, capsys):
    def withhold(rows):
        row = rows[2]
        withhold.key = row["key"]
        for name in ("pred_class", "top5_class", "top5_prob", "correct", "correct_top5", "prob_label"):
            row[name] = None
        row.update(status="undecodable-sample", detail="OSError: broken data stream")

    edit_rows(submission, withhold)
    resign(submission)
    lines = refused(submission, evaluated[1], capsys)
    assert (
        f"predictions[{withhold.key}].status: predictions 'undecodable-sample', shard a sample that decodes "
        "(its prediction is missing)"
    ) in lines
    assert "figures.samples: entry 12, recomputed 11" in lines

    def drop(rows):
        drop.key = rows.pop(5)["key"]

    edit_rows(submission, drop)
    resign(submission)
    lines = refused(submission, evaluated[1], capsys)
    assert f"predictions[{drop.key}]: predictions no prediction row, data a sample" in lines


def test_predictions_of_another_run_are_refused(evaluated, submission, capsys):
    def other_model(metadata):
        metadata["model"]["spec"] = "timm:resnet50"
        return metadata

    edit_rows(submission, lambda rows: None, metadata=other_model)
    resign(submission)
    assert refused(submission, evaluated[1], capsys) == [
        "model.spec: entry 'ts:colour.pt', predictions 'timm:resnet50'"
    ]


def test_an_entry_naming_another_data_revision_is_refused_before_scoring(evaluated, submission, capsys):
    _, data, other = evaluated
    status, lines, err = verify(submission, other, capsys)
    entry, data_given = composed_fingerprint(seed=0), composed_fingerprint(seed=1)
    assert status == 1 and lines == [f"data.fingerprint: entry {entry!r}, --data {data_given!r}"]
    assert err.strip().endswith(
        "1 mismatches (stopped before re-scoring): the entry does not follow from its "
        "predictions and data, and is refused"
    )


def test_a_changed_shard_is_refused_by_its_sha256(evaluated, submission, capsys, tmp_path):
    data = tmp_path / "data" / evaluated[1].name
    shutil.copytree(evaluated[1], data)
    shard = sorted(data.glob("test-*.tar"))[1]
    raw = bytearray(shard.read_bytes())
    raw[2000] ^= 0xFF
    shard.write_bytes(bytes(raw))
    status, lines, err = verify(submission, data, capsys)
    errors = [line for line in err.splitlines() if line.startswith("hsi leaderboard: error:")]
    assert status == 2 and lines == [] and len(errors) == 1
    assert shard.name in errors[0] and "sha256" in errors[0]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda e: e["figures"].update(top1="0.9"), "figures.top1: expected an object, got '0.9'"),
        (lambda e: e.pop("bootstrap"), "bootstrap: missing"),
        (
            lambda e: e["predictions"].update(file="/etc/passwd"),
            "predictions.file: '/etc/passwd' is a path; an entry names a file beside it",
        ),
        (
            lambda e: e["model"]["weights"].update(sha256="abc"),
            "model.weights.sha256: 'abc' is not of the expected form",
        ),
    ],
)
def test_a_malformed_entry_is_one_line(evaluated, submission, capsys, change, named):
    edit_entry(submission, change)
    status, lines, err = verify(submission, evaluated[1], capsys)
    assert status == 2 and lines == []
    assert err.strip() == f"hsi leaderboard: error: {submission / 'entry.json'}: {named}"


def test_local_data_and_predictions_elsewhere_must_be_named(evaluated, submission, capsys, tmp_path):
    capsys.readouterr()
    assert main(["leaderboard", "verify", str(submission)]) == 2
    err = capsys.readouterr().err.strip()
    assert "its data is the local folder 'hard-spurious-imagenet': pass --data" in err and "\n" not in err
    moved = tmp_path / "elsewhere.parquet"
    (submission / "predictions.parquet").rename(moved)
    assert verify(submission, evaluated[1], capsys)[0] == 2
    assert main(["leaderboard", "verify", str(submission), "--data", str(evaluated[1])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("its predictions file predictions.parquet is not beside it: pass --predictions FILE")
    status, lines, _ = verify(submission, evaluated[1], capsys, "--predictions", str(moved))
    assert status == 0 and lines == []


def test_error_rows_of_samples_that_do_not_decode_verify(evaluated, tmp_path, capsys):
    """A sample whose picture does not decode and one whose json is broken are error rows of the run;
    verification decodes them again and accepts the entry."""
    data = make_composed_dataset(tmp_path / "data", splits={"test": 8}, shard_size=4)
    manifest = Manifest.read(data)
    split = manifest.splits["test"]
    shard = data / split.shards[0].filename
    samples = [(key, dict(members)) for key, members in iter_shard(shard)]
    samples[1][1]["jpg"] = b"not a jpeg at all"
    samples[2][1]["json"] = b"[1, 2]"
    split.shards[0] = write_shard(shard, samples)
    manifest.write(data)
    model = tmp_path / "colour.pt"
    torch.jit.trace(MeanColour(), torch.rand(1, 3, 224, 224)).save(str(model))
    out = tmp_path / "out"
    argv = [
        "eval",
        str(data),
        "--model",
        f"ts:{model}",
        *trust_flags(f"ts:{model}"),
        "--out",
        str(out),
        "--workers",
        "0",
        "--no-progress",
    ]
    assert main([*argv, "--bootstrap", "20"]) == 0
    capsys.readouterr()
    assert main(["leaderboard", "verify", str(out / MODEL), "--data", str(data)]) == 0
    assert "6 samples (2 error rows)" in capsys.readouterr().out
