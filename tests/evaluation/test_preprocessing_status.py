"""A result says only what is known of its preprocessing (issue 33): a model the toolkit ran is
"applied", predictions scored from elsewhere are "unknown" unless their maker declares it
(`--preprocessing`, `hsi.score(preprocessing=...)`, then "declared", not checked), in eval.json,
eval.md, the predictions' metadata and entry.json alike; files written before the status existed
read by the one rule (evaluation.ranking.provenance), and still verify."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pyarrow.parquet as pq
import pytest
from eval_cli import eval_args

from builder.core.hashing import sha256_file
from builder.core.owned import RECORD_NAME
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.predicting.predictions import METADATA_KEY, read_predictions
from evaluation.ranking.entries import PREPROCESSING_FIELDS_V1, read_entry
from hsi.cli import main

FOLDER = "ts_planted_corner.pt"
CROPPED = "resize=256,crop_pct=0.875,size=224,interpolation=bicubic,mean=0.485/0.456/0.406,std=0.229/0.224/0.225"


@pytest.fixture(scope="module")
def evaluated(paper_set, planted_corner, tmp_path_factory):
    """The planted corner rule run by `hsi eval`, and its predictions as a CSV made "elsewhere"."""
    out = tmp_path_factory.mktemp("pre-status")
    assert main(eval_args(paper_set, f"ts:{planted_corner}", out)) == 0
    frame, _ = read_predictions(out / FOLDER / "predictions.parquet")
    ok = frame[frame["status"] == "ok"]
    table = pd.DataFrame({"key": ok["key"], "pred_class": ok["pred_class"]})
    table.to_csv(out / "elsewhere.csv", index=False)
    return out


def scored(paper_set, evaluated, out, *extra):
    argv = ["eval", str(paper_set), "--predictions", str(evaluated / "elsewhere.csv"), "--out", str(out)]
    assert main([*argv, "--bootstrap", "20", *extra]) == 0
    return out / "elsewhere"


def test_a_model_run_records_the_preprocessing_it_applied(evaluated):
    folder = evaluated / FOLDER
    report = json.loads((folder / "eval.json").read_text())
    assert report["preprocessing"]["status"] == "applied" and report["preprocessing"]["cropped"] is False
    assert read_predictions(folder / "predictions.parquet")[1]["preprocessing"]["status"] == "applied"
    entry = read_entry(folder / "entry.json")
    assert entry["preprocessing"]["status"] == "applied" and entry["preprocessing"]["resize"] is None
    assert "**Preprocessing: the 224 canvas as it is, not centre-cropped**" in (folder / "eval.md").read_text()


def test_undeclared_predictions_are_unknown_everywhere(paper_set, evaluated, tmp_path, capsys):
    folder = scored(paper_set, evaluated, tmp_path / "out")
    unknown = {"cropped", "crop_pct", "resize", "input_size", "interpolation", "mean", "std"}
    report = json.loads((folder / "eval.json").read_text())
    metadata = read_predictions(folder / "predictions.parquet")[1]
    entry = read_entry(folder / "entry.json")
    for section in (report["preprocessing"], metadata["preprocessing"], entry["preprocessing"]):
        assert section["status"] == "unknown" and section["description"].startswith("unknown")
        assert all(section[key] is None for key in unknown)
    md = (folder / "eval.md").read_text()
    assert "**Preprocessing: unknown**" in md and "canvas as it is" not in md
    capsys.readouterr()
    assert main(["leaderboard", "verify", str(folder), "--data", str(paper_set)]) == 0


def test_a_declared_crop_is_recorded_as_declared_and_said_to_be(paper_set, evaluated, tmp_path, capsys):
    folder = scored(paper_set, evaluated, tmp_path / "out", "--preprocessing", CROPPED)
    entry = read_entry(folder / "entry.json")
    pre = entry["preprocessing"]
    assert pre["status"] == "declared" and pre["cropped"] is True
    assert (pre["crop_pct"], pre["resize"], pre["input_size"]) == (0.875, 256, [224, 224])
    assert json.loads((folder / "eval.json").read_text())["preprocessing"]["status"] == "declared"
    md = (folder / "eval.md").read_text()
    assert "**Preprocessing as declared, not checked: centre-cropped (crop_pct 0.875)**" in md
    assert "canvas as it is" not in md
    capsys.readouterr()
    assert main(["leaderboard", "verify", str(folder), "--data", str(paper_set)]) == 0


def test_score_takes_a_declaration_as_text_or_a_mapping(paper_set, evaluated):
    import hsi

    table = pd.read_csv(evaluated / "elsewhere.csv")
    quick = BootstrapSettings(resamples=20)
    by_text = hsi.score(table, paper_set, bootstrap=quick, preprocessing="crop_pct=1,size=224")
    by_mapping = hsi.open(paper_set).eval(table, bootstrap=quick, preprocessing={"crop_pct": 1, "size": 224})
    for evaluation in (by_text, by_mapping):
        pre = evaluation.to_dict()["preprocessing"]
        assert pre["status"] == "declared" and pre["cropped"] is False and pre["interpolation"] is None
    assert hsi.score(table, paper_set, bootstrap=quick).to_dict()["preprocessing"]["status"] == "unknown"


def test_preprocessing_is_refused_without_predictions(paper_set, evaluated, tmp_path, capsys):
    out = tmp_path / "out"
    argv = eval_args(paper_set, "timm:resnet18", out, "--preprocessing", "crop_pct=0.875")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hsi eval: error: --preprocessing declares how predictions made elsewhere were prepared")
    assert len(err.splitlines()) == 1 and not out.exists()


def _as_written_before_the_status(folder, description: str | None = None) -> None:
    """The folder's predictions and entry as the toolkit wrote them before `status` existed: the
    metadata's section without status or resize (a scored file's saying `cropped: false`), entry
    schema version 1."""
    path = folder / "predictions.parquet"
    table = pq.read_table(path)
    metadata = json.loads(table.schema.metadata[METADATA_KEY])
    pre = metadata["preprocessing"]
    if description is not None:
        pre = {"description": description, "cropped": False}
    else:
        pre.pop("status"), pre.pop("resize")
    metadata["preprocessing"] = pre
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata).encode()}), path)
    entry = json.loads((folder / "entry.json").read_text())
    entry["schema_version"] = 1
    entry["model"].pop("identity", None)
    entry["preprocessing"] = {key: pre.get(key) for key in PREPROCESSING_FIELDS_V1}
    entry["predictions"]["sha256"] = sha256_file(path)
    (folder / "entry.json").write_text(json.dumps(entry))


def test_older_files_read_by_the_one_rule_and_still_verify(paper_set, evaluated, tmp_path, capsys):
    given = shutil.copytree(scored(paper_set, evaluated, tmp_path / "given"), tmp_path / "old-given")
    _as_written_before_the_status(given, "made by whoever made the predictions (not known here)")
    applied = shutil.copytree(evaluated / FOLDER, tmp_path / "old-applied")
    _as_written_before_the_status(applied)
    assert read_entry(given / "entry.json")["preprocessing"]["status"] == "unknown"
    assert read_entry(given / "entry.json")["preprocessing"]["cropped"] is None  # its old `false` was not known
    assert read_entry(applied / "entry.json")["preprocessing"]["status"] == "applied"
    for folder in (given, applied):
        capsys.readouterr()
        assert main(["leaderboard", "verify", str(folder), "--data", str(paper_set)]) == 0, capsys.readouterr()
    # recomputed from the old table, the report says what is known of it
    assert main(["eval", "--from", str(given / "predictions.parquet"), "--out", str(tmp_path / "again")]) == 0
    report = json.loads((tmp_path / "again" / "eval.json").read_text())
    assert report["preprocessing"]["status"] == "unknown" and report["preprocessing"]["cropped"] is None


def test_an_evaluation_written_before_the_status_is_still_the_same_evaluation(
    paper_set, planted_corner, evaluated, tmp_path, capsys
):
    """The skip check compares what was applied: an older eval.json (no status, no resize) of the same
    run is skipped, not refused as another evaluation."""
    out = shutil.copytree(evaluated, tmp_path / "out")
    report_path = out / FOLDER / "eval.json"
    report = json.loads(report_path.read_text())
    report["preprocessing"].pop("status"), report["preprocessing"].pop("resize")
    report_path.write_text(json.dumps(report))
    record = json.loads((out / RECORD_NAME).read_text())  # as the older toolkit wrote and recorded it
    record["files"][f"{FOLDER}/eval.json"] = sha256_file(report_path)
    (out / RECORD_NAME).write_text(json.dumps(record))
    capsys.readouterr()
    assert main(eval_args(paper_set, f"ts:{planted_corner}", out)) == 0
    assert "already evaluated on this data revision" in capsys.readouterr().err
