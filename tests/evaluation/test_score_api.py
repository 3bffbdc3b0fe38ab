"""`hsi.score` and `hsi eval DATA --predictions FILE`: predictions exported from an `hsi eval` run
score to the same eval.json metrics, and a broken predictions file is one line naming what broke."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from eval_cli import eval_args
from hub_server import LoopbackHub, hub_env
from release_factory import make_composed_dataset
from subprocesses import run_hsi, run_python

from builder.core.errors import HsiError
from cards.release import build_release
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.predicting.predictions import read_predictions
from evaluation.ranking.hub_results import eval_results
from hsi.cli import main


@pytest.fixture(scope="module")
def evaluated(paper_set, planted_corner, tmp_path_factory):
    """A tiny model evaluated by `hsi eval` (bootstrap 100): its eval.json and predictions table."""
    out = tmp_path_factory.mktemp("score-eval")
    assert main(eval_args(paper_set, f"ts:{planted_corner}", out)) == 0
    folder = out / "ts_planted_corner.pt"
    frame, _ = read_predictions(folder / "predictions.parquet")
    return json.loads((folder / "eval.json").read_text())["metrics"], frame[frame["status"] == "ok"]


PROBABILITIES = ("prob_label", "prob_background_class", "prob_paired_class")


def exported(frame, path, *, probabilities: bool = True):
    """The predictions as a CSV of key, pred_class, top-5 as ';'-separated text (and probabilities)."""
    table = pd.DataFrame({"key": frame["key"], "pred_class": frame["pred_class"]})
    table["top5_class"] = [";".join(str(int(c)) for c in top) for top in frame["top5_class"]]
    if probabilities:
        table["prob_background_class"] = frame["prob_background_class"]
    table.to_csv(path, index=False)
    return path


def test_score_of_a_csv_gives_the_metrics_of_hsi_eval(evaluated, paper_set, tmp_path):
    import hsi

    metrics, frame = evaluated
    csv = exported(frame, tmp_path / "predictions.csv")
    evaluation = hsi.score(csv, paper_set, bootstrap=BootstrapSettings(resamples=100))
    assert evaluation.to_dict()["metrics"] == metrics
    assert evaluation.worst_group == metrics["groups_summary"]["worst_group"]
    table = evaluation.table()
    cell = metrics["by_group_size"][0]
    assert table.loc[cell["group"], cell["size"]] == cell["top1"]["value"]
    assert table.shape == (len(metrics["by_group"]), len(metrics["by_size"]))
    folder = evaluation.save(tmp_path / "saved")
    assert json.loads((folder / "eval.json").read_text())["metrics"] == metrics
    assert (folder / "eval.md").is_file() and (folder / "predictions.parquet").is_file()
    assert (folder / "plots").is_dir() and any((folder / "plots").iterdir())


def test_score_of_a_parquet_with_list_columns_gives_the_metrics_of_hsi_eval(evaluated, paper_set, tmp_path):
    """A parquet file holds top-5 classes and probabilities as list columns (not ';'-separated text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import hsi

    metrics, frame = evaluated
    table = pa.table(
        {
            "key": pa.array(frame["key"], pa.string()),
            "pred_class": pa.array(frame["pred_class"], pa.int64()),
            "top5_class": pa.array([[int(c) for c in top] for top in frame["top5_class"]], pa.list_(pa.int64())),
            "top5_prob": pa.array([[float(p) for p in top] for top in frame["top5_prob"]], pa.list_(pa.float64())),
            **{name: pa.array(frame[name], pa.float64()) for name in PROBABILITIES},
        }
    )
    # values where they mean something; nulls where they do not (no paired backgrounds in this config)
    assert frame["prob_label"].notna().all() and frame["prob_background_class"].notna().any()
    assert frame["prob_paired_class"].isna().all()
    assert any(len(set(top)) > 1 for top in frame["top5_class"])  # top-5 is more than the top-1 here
    pq.write_table(table, tmp_path / "predictions.parquet")
    report = hsi.score(tmp_path / "predictions.parquet", paper_set, bootstrap=BootstrapSettings(resamples=100))
    assert report.metrics == metrics  # top-5 and the background-class probability are in the metrics
    assert report.to_dict()["notes"] == [] and report.to_dict()["model"]["spec"] == "predictions:predictions.parquet"
    saved, _ = read_predictions(report.save(tmp_path / "saved") / "predictions.parquet")
    saved = saved.set_index("key").loc[list(frame["key"])]
    # the probabilities no metric reads are carried into the saved rows as given
    assert [list(v) for v in saved["top5_prob"]] == [list(v) for v in frame["top5_prob"]]
    assert list(saved["prob_label"]) == list(frame["prob_label"])


def test_key_and_class_only_give_the_same_top1_metrics(evaluated, paper_set, tmp_path):
    import hsi

    metrics, frame = evaluated
    pd.DataFrame({"key": frame["key"], "pred_class": frame["pred_class"]}).to_csv(tmp_path / "p.csv", index=False)
    report = hsi.score(tmp_path / "p.csv", paper_set, bootstrap=BootstrapSettings(resamples=100)).to_dict()
    assert report["metrics"]["by_group_size"] == [
        {**row, "top5": report["metrics"]["by_group_size"][n]["top5"]} for n, row in enumerate(metrics["by_group_size"])
    ]
    assert any("top-5 = top-1" in note for note in report["notes"])


def test_cli_predictions_writes_the_same_eval_json(evaluated, paper_set, tmp_path):
    metrics, frame = evaluated
    csv = exported(frame, tmp_path / "exported.csv")
    out = tmp_path / "out"
    assert main(["eval", str(paper_set), "--predictions", str(csv), "--out", str(out), "--bootstrap", "100"]) == 0
    report = json.loads((out / "exported" / "eval.json").read_text())  # #33: named after the file's stem
    assert report["metrics"] == metrics and report["data"]["verified"] == "sha256"


SCORE_AND_SAVE = """
import sys
import hsi
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.ranking.hub_results import eval_results
hsi.score(sys.argv[1], sys.argv[2], bootstrap=BootstrapSettings(resamples=100)).save(sys.argv[3], entry_url=sys.argv[4])
"""
ENTRY_URL = "https://huggingface.co/lab/model/blob/main/entry.json"


def test_score_on_hf_data_served_by_a_hub_gives_the_metrics_of_the_local_release(tmp_path):
    import hsi

    release = build_release(
        tmp_path / "rel" / "hard-spurious-imagenet",
        [make_composed_dataset(tmp_path / "composed", splits={"test": 10}, shard_size=4)],
        version="v1.0.0",
    )
    predictions = tmp_path / "predictions.csv"
    keys = [f"test_{i:06d}" for i in range(10)]  # release_factory's sample keys
    top5 = [[i * 7 % 1000, 0, 1] for i in range(10)]  # release_factory's classes: index * 7, so some are right
    pd.DataFrame(
        {"key": keys, "pred_class": [t[0] for t in top5], "top5_class": [";".join(map(str, t)) for t in top5]}
    ).to_csv(predictions, index=False)
    local = hsi.score(predictions, release, bootstrap=BootstrapSettings(resamples=100)).save(tmp_path / "local")
    with LoopbackHub() as hub:
        env = hub_env(hub.endpoint, tmp_path / "hf")  # HF_ENDPOINT is read at import: a process of its own
        published = run_hsi(["publish", release, "--repo", "lab/hsi", "--version", "v1.0.0", "--yes"], env)
        assert published.returncode == 0, published.stderr
        address = "hf://datasets/lab/hsi@v1.0.0"
        scored = run_python(SCORE_AND_SAVE, predictions, address, tmp_path / "remote", ENTRY_URL, env=env, timeout=300)
        assert scored.returncode == 0, scored.stderr
    local_report = json.loads((local / "eval.json").read_text())
    remote_report = json.loads((tmp_path / "remote" / "eval.json").read_text())
    assert remote_report["metrics"] == local_report["metrics"]
    assert 0 < local_report["metrics"]["overall"]["top1"]["value"] < 1  # some right, some wrong
    assert remote_report["data"]["source"] == address and remote_report["data"]["verified"] == "sha256"
    assert remote_report["data"]["fingerprint"] == local_report["data"]["fingerprint"]
    assert remote_report["data"]["num_samples"] == 10
    # the Hub's evaluation-results file beside entry.json, for Hub data only (evaluation.ranking.hub_results)
    assert not (local / ".eval_results").exists()
    entry = json.loads((tmp_path / "remote" / "entry.json").read_text())
    results = yaml.safe_load((tmp_path / "remote" / ".eval_results" / "hsi.yaml").read_text())
    assert results == eval_results(entry)
    assert results[0]["dataset"] == {"id": "lab/hsi", "task_id": "hard-spurious-imagenet/test"}  # a tag: no hash
    assert results[0]["value"] == remote_report["metrics"]["groups_summary"]["worst_group"]["value"]
    assert "data revision v1.0.0" in results[0]["notes"]
    # `source` points to the entry, where its owner said it is published
    assert entry["url"] == ENTRY_URL
    assert results[0]["source"] == {
        "url": ENTRY_URL,
        "name": f"hard-spurious-imagenet leaderboard entry: {entry['name']}",
    }


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda t: t.iloc[1:], "no prediction for sample"),
        (lambda t: pd.concat([t, t.iloc[[3]]]), "appears twice"),
        (lambda t: pd.concat([t, t.iloc[[0]].assign(key="not-a-sample")]), "key not-a-sample names no sample"),
        (lambda t: t.assign(pred_class=[1000, *t["pred_class"].iloc[1:]]), "'1000' is not an ImageNet class index"),
        (
            lambda t: t.drop(columns="pred_class").assign(pred_wnid=["n99999999", *["n01440764"] * (len(t) - 1)]),
            "'n99999999' is not an ImageNet-1k wnid",
        ),
    ],
)
def test_a_broken_predictions_file_is_one_line_naming_it(evaluated, paper_set, tmp_path, change, named):
    import hsi

    _, frame = evaluated
    table = change(pd.DataFrame({"key": frame["key"], "pred_class": frame["pred_class"]}))
    table.to_csv(tmp_path / "broken.csv", index=False)
    with pytest.raises(HsiError) as caught:
        hsi.score(tmp_path / "broken.csv", paper_set)
    message = str(caught.value)
    assert named in message and "\n" not in message
    key = frame["key"].iloc[3 if "twice" in named else 0]
    if "not-a-sample" not in named:
        assert key in message


def files_of(folder) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_save_refuses_another_models_evaluation_unless_told_to_replace_it(evaluated, paper_set, tmp_path):
    """Failed before: saving a second model into the same folder silently replaced the first."""
    import hsi

    _, frame = evaluated
    settings = BootstrapSettings(resamples=50)
    first = hsi.score(exported(frame, tmp_path / "mine.csv"), paper_set, bootstrap=settings)
    other = hsi.score(exported(frame, tmp_path / "theirs.csv"), paper_set, bootstrap=settings)
    folder = first.save(tmp_path / "out", "m")
    before = files_of(tmp_path / "out")
    with pytest.raises(HsiError) as refused:
        other.save(tmp_path / "out", "m")
    message = str(refused.value)
    assert "\n" not in message and f"{folder} holds the evaluation of another model, predictions:mine.csv" in message
    assert "not of predictions:theirs.csv" in message and "overwrite=True" in message
    assert files_of(tmp_path / "out") == before  # refused before anything was written
    first.save(tmp_path / "out", "m", entry_name="Mine again")  # the same model, measured again: saved
    assert json.loads((folder / "entry.json").read_text())["name"] == "Mine again"
    other.save(tmp_path / "out", "m", overwrite=True)
    assert json.loads((folder / "eval.json").read_text())["model"]["spec"] == "predictions:theirs.csv"


def test_cli_predictions_folder_is_named_after_the_entry_or_the_files_stem(evaluated, paper_set, tmp_path, capsys):
    """Failed before: the folder was `predictions_<file name>` whatever the entry was called."""
    _, frame = evaluated
    csv = exported(frame, tmp_path / "run 7.preds.csv")
    out = tmp_path / "out"
    argv = ["eval", str(paper_set), "--predictions", str(csv), "--out", str(out), "--bootstrap", "50"]
    assert main(argv) == 0
    assert json.loads((out / "run_7.preds" / "eval.json").read_text())["model"]["spec"] == "predictions:run 7.preds.csv"
    named = "Modèle d'essai/../ " + "x" * 150  # one line of text; as a folder: ASCII, no separator, short
    assert main([*argv, "--entry-name", named]) == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir() and p.name.startswith("Mod")]
    assert folder.name == ("Mod_le_d_essai_..__" + "x" * 150)[:100] and (folder / "entry.json").is_file()
    assert json.loads((folder / "entry.json").read_text())["name"] == named
    # the same entry name from another file is another model: refused until --overwrite says to replace it
    capsys.readouterr()
    other = exported(frame, tmp_path / "other.csv")
    again = ["eval", str(paper_set), "--predictions", str(other), "--out", str(out), "--bootstrap", "50"]
    assert main([*again, "--entry-name", named]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hsi eval: error: ") and "\n" not in err
    assert "holds the evaluation of another model, predictions:run 7.preds.csv" in err and "--overwrite" in err
    assert main([*again, "--entry-name", named, "--overwrite"]) == 0
    assert json.loads((folder / "eval.json").read_text())["model"]["spec"] == "predictions:other.csv"


def test_the_rows_a_refusal_names_are_counted_from_1():
    """Failed before: the first prediction of a file was `row 0`, the first row of a table `row 0`."""
    from evaluation.predicting.given import checked_table

    def refusal(frame) -> str:
        with pytest.raises(HsiError) as refused:
            checked_table(frame, "predictions:p.csv")
        return str(refused.value)

    assert refusal(pd.DataFrame({"key": ["", "b"], "pred_class": [1, 2]})) == (
        "predictions:p.csv: row 1 has no key (got '')"
    )
    assert refusal(pd.DataFrame({"key": ["a", "b", "a"], "pred_class": [1, 2, 3]})).endswith(
        "key a appears twice (rows 1 and 3)"
    )
    assert refusal(pd.DataFrame({"key": ["a", "b"], "pred_class": [1, 1000]})).startswith(
        "predictions:p.csv: row 2 (b): pred_class: 1000"
    )
