"""Leaderboard entries (issue 25): `hsi eval` writes OUT/<model>/entry.json with every headline
figure of its eval.json and the description it was given (null where none), `--from`,
`--predictions` and `hsi.Evaluation.save` write the same figures, `hsi leaderboard verify` accepts
the entry, and the reader refuses a malformed entry in one line naming the file and the field."""

from __future__ import annotations

import json
import random
import shutil

import pandas as pd
import pytest
from eval_cli import eval_args
from json_fuzz import fuzz_reader, value_paths

from builder.core.errors import HsiError
from builder.core.hashing import sha256_file
from builder.core.owned import RECORD_NAME
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.predicting.predictions import read_predictions
from evaluation.ranking.entries import ENTRY_SCHEMA_VERSION, EntryInfo, carried_info, check_entry, read_entry
from hsi.cli import main

FOLDER = "ts_planted_corner.pt"
DESCRIBED = [
    "--entry-name",
    "Planted corner",
    "--architecture",
    "flat-colour rule",
    "--paper",
    "https://arxiv.org/abs/2505.03569",
]


@pytest.fixture(scope="module")
def evaluated(paper_set, planted_corner, tmp_path_factory):
    """The planted corner rule evaluated by `hsi eval` (bootstrap 100), described by three of the four
    entry flags (no --training-data)."""
    out = tmp_path_factory.mktemp("entries")
    assert main(eval_args(paper_set, f"ts:{planted_corner}", out, *DESCRIBED)) == 0
    return out


def test_hsi_eval_writes_an_entry_with_every_headline_figure(evaluated):
    folder = evaluated / FOLDER
    entry = read_entry(folder / "entry.json")
    report = json.loads((folder / "eval.json").read_text())
    metrics = report["metrics"]
    assert entry["schema_version"] == ENTRY_SCHEMA_VERSION and entry["name"] == "Planted corner"
    assert entry["model"]["spec"] == "ts:planted_corner.pt"
    assert entry["model"]["architecture"] == "flat-colour rule"
    assert entry["model"]["paper"] == "https://arxiv.org/abs/2505.03569"
    assert entry["model"]["training_data"] is None  # not given: null, never guessed
    assert entry["model"]["weights"] == {"file": "planted_corner.pt", "sha256": report["model"]["checkpoint_sha256"]}
    assert entry["predictions"] == {
        "file": "predictions.parquet",
        "sha256": sha256_file(folder / "predictions.parquet"),
    }
    assert entry["bootstrap"] == {"resamples": 100, "seed": 0, "level": 0.95}
    data = entry["data"]
    assert (data["config"], data["split"], data["fingerprint"]) == (
        report["data"]["config"],
        report["data"]["split"],
        report["data"]["fingerprint"],
    )
    assert data["toolkit_version"] == report["toolkit"]["version"] and data["verified"] == "sha256"
    assert entry["preprocessing"]["mean"] == [0.0, 0.0, 0.0] and entry["preprocessing"]["cropped"] is False
    figures = entry["figures"]
    assert figures["samples"] == metrics["samples"] == 72 and figures["error_rows"] == 0
    assert figures["top1"] == metrics["overall"]["top1"] and figures["top5"] == metrics["overall"]["top5"]
    assert figures["by_group"] == [{"group": row["group"], "top1": row["top1"]} for row in metrics["by_group"]]
    assert figures["mean_over_groups"] == metrics["groups_summary"]["mean_over_groups"]
    # the corner rule: CeO, CoO and CeR all right, CoR all wrong, every CoR error names the background
    assert figures["worst_group"]["group"] == "CoR" and figures["worst_group"]["value"] == 0.0
    assert figures["mean_over_groups"]["value"] == 0.75
    gap = figures["background_gap"]
    assert gap["largest"]["value"] == 1.0 and gap["largest"]["position"] == "top-right"
    assert gap["cells"] == len(metrics["background_gap"])
    assert gap["mean"] == pytest.approx(sum(c["gap"]["value"] for c in metrics["background_gap"]) / gap["cells"])
    assert figures["background_class"]["share_of_errors"]["value"] == 1.0
    assert figures["clean_top1"] is None
    record = json.loads((evaluated / RECORD_NAME).read_text())
    assert f"{FOLDER}/entry.json" in record["files"]  # written through the folder's own writes


def test_the_entry_of_hsi_eval_verifies(evaluated, paper_set, capsys):
    capsys.readouterr()
    assert main(["leaderboard", "verify", str(evaluated / FOLDER), "--data", str(paper_set)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("re-scored: Planted corner (ts:planted_corner.pt)")
    assert "worst group CoR 0.000" in out and "mismatch" not in out


def test_from_keeps_the_description_and_gives_the_same_figures(evaluated, tmp_path):
    source = evaluated / FOLDER
    assert main(["eval", "--from", str(source / "predictions.parquet"), "--out", str(tmp_path / "again")]) == 0
    original = read_entry(source / "entry.json")
    again = read_entry(tmp_path / "again" / "entry.json")
    assert again["name"] == "Planted corner" and again["model"]["paper"] == original["model"]["paper"]
    # --from's default bootstrap is 1000 resamples: the same values, intervals of its own settings
    assert again["bootstrap"]["resamples"] == 1000
    assert [row["top1"]["value"] for row in again["figures"]["by_group"]] == [
        row["top1"]["value"] for row in original["figures"]["by_group"]
    ]
    assert (
        main(
            [
                "eval",
                "--from",
                str(source / "predictions.parquet"),
                "--out",
                str(tmp_path / "same"),
                "--bootstrap",
                "100",
            ]
        )
        == 0
    )
    assert read_entry(tmp_path / "same" / "entry.json")["figures"] == original["figures"]
    # a flag given to --from changes its field; the others keep what the entry said
    argv = ["eval", "--from", str(source / "predictions.parquet"), "--out", str(tmp_path / "renamed")]
    assert main([*argv, "--training-data", "none"]) == 0
    renamed = read_entry(tmp_path / "renamed" / "entry.json")
    assert renamed["model"]["training_data"] == "none" and renamed["name"] == "Planted corner"
    assert renamed["model"]["paper"] == original["model"]["paper"]
    # another model's entry beside the predictions describes nothing of this one
    weights = original["model"]["weights"]["sha256"]
    assert carried_info(source / "entry.json", {"spec": "timm:resnet50", "checkpoint_sha256": weights}) == EntryInfo()
    other_weights = {"spec": "ts:planted_corner.pt", "checkpoint_sha256": "0" * 64}
    assert carried_info(source / "entry.json", other_weights) == EntryInfo()
    kept = carried_info(source / "entry.json", {"spec": "ts:planted_corner.pt", "checkpoint_sha256": weights})
    assert kept.name == "Planted corner" and kept.training_data is None


def test_scored_predictions_and_save_write_entries_that_verify(evaluated, paper_set, tmp_path, capsys):
    import hsi

    frame, _ = read_predictions(evaluated / FOLDER / "predictions.parquet")
    ok = frame[frame["status"] == "ok"]
    table = pd.DataFrame({"key": ok["key"], "pred_class": ok["pred_class"]})
    table["top5_class"] = [";".join(str(int(c)) for c in top) for top in ok["top5_class"]]
    table.to_csv(tmp_path / "mine.csv", index=False)
    argv = ["eval", str(paper_set), "--predictions", str(tmp_path / "mine.csv"), "--out", str(tmp_path / "out")]
    assert main([*argv, "--bootstrap", "100", "--entry-name", "My JAX model", "--training-data", "ImageNet-1k"]) == 0
    folder = tmp_path / "out" / "My_JAX_model"  # #33: named after the entry
    entry = read_entry(folder / "entry.json")
    assert entry["name"] == "My JAX model" and entry["model"]["training_data"] == "ImageNet-1k"
    assert entry["model"]["weights"]["file"] == "mine.csv"  # what was scored: the predictions file
    original = read_entry(evaluated / FOLDER / "entry.json")["figures"]
    assert entry["figures"]["by_group"] == original["by_group"]
    capsys.readouterr()
    assert main(["leaderboard", "verify", str(folder / "entry.json"), "--data", str(paper_set)]) == 0
    assert capsys.readouterr().out.startswith("re-scored: My JAX model")

    evaluation = hsi.score(table, paper_set, bootstrap=BootstrapSettings(resamples=100))
    saved = evaluation.save(
        tmp_path / "saved", entry_name="From Python", paper="https://openreview.net/forum?id=Yqf2BhqfyZ"
    )
    entry = read_entry(saved / "entry.json")
    assert entry["name"] == "From Python" and entry["model"]["architecture"] is None
    assert entry["figures"]["worst_group"] == original["worst_group"]
    with pytest.raises(HsiError, match=r"^Evaluation\.save: paper: 'javascript:alert\(1\)' is not an http\(s\) link"):
        evaluation.save(tmp_path / "refused", paper="javascript:alert(1)")


def test_a_skipped_model_gets_its_new_description_and_nothing_else_changes(
    evaluated, paper_set, planted_corner, tmp_path
):
    out = tmp_path / "out"
    shutil.copytree(evaluated, out)
    before = (out / FOLDER / "eval.json").read_bytes()
    assert main(eval_args(paper_set, f"ts:{planted_corner}", out, "--entry-name", "Renamed")) == 0
    entry = read_entry(out / FOLDER / "entry.json")
    assert entry["name"] == "Renamed" and entry["model"]["paper"] == "https://arxiv.org/abs/2505.03569"
    assert (out / FOLDER / "eval.json").read_bytes() == before
    # no flags: the description stays as it is
    assert main(eval_args(paper_set, f"ts:{planted_corner}", out)) == 0
    assert read_entry(out / FOLDER / "entry.json")["name"] == "Renamed"


def test_models_yaml_describes_each_model_and_bad_descriptions_are_refused_before_any_work(
    paper_set, planted_corner, tmp_path, capsys
):
    listing = tmp_path / "models.yaml"
    listing.write_text(f"- model: ts:{planted_corner}\n  entry_name: From YAML\n  training_data: none at all\n")
    assert main(eval_args(paper_set, str(listing), tmp_path / "out", "--paper", "https://example.org/p")) == 0
    entry = read_entry(tmp_path / "out" / FOLDER / "entry.json")
    assert (entry["name"], entry["model"]["training_data"], entry["model"]["paper"]) == (
        "From YAML",
        "none at all",
        "https://example.org/p",
    )
    refusals = [
        (["--paper", "arxiv 2505.03569"], "--paper: 'arxiv 2505.03569' is not an http(s) link"),
        (["--entry-name", "two\nlines"], "--entry-name: 'two\\nlines' holds a line break"),
        (["--architecture", ""], "--architecture: is empty"),
        (["--entry-url", "lab/entry.json"], "--entry-url: 'lab/entry.json' is not an http(s) link"),
    ]
    for flags, message in refusals:
        capsys.readouterr()
        assert main(eval_args(paper_set, f"ts:{planted_corner}", tmp_path / "refused", *flags)) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"hsi eval: error: {message}" or err.startswith(f"hsi eval: error: {message}"), err
        assert "\n" not in err
    assert not (tmp_path / "refused").exists()
    listing.write_text(f"- model: ts:{planted_corner}\n  paper: ftp://x\n")
    assert main(eval_args(paper_set, str(listing), tmp_path / "refused")) == 2
    assert "models.yaml: [0].paper: 'ftp://x' is not an http(s) link" in capsys.readouterr().err
    listing.write_text(f"- model: ts:{planted_corner}\n  entry_url: file:///etc/passwd\n")
    assert main(eval_args(paper_set, str(listing), tmp_path / "refused")) == 2
    assert "models.yaml: [0].entry_url: 'file:///etc/passwd' is not an http(s) link" in capsys.readouterr().err
    several = f"ts:{planted_corner},ts:{planted_corner}"
    assert main(eval_args(paper_set, several, tmp_path / "refused", "--entry-name", "Both")) == 2
    assert "--entry-name names one model" in capsys.readouterr().err


# --- the reader ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda e: e["figures"]["top1"].update(value=1.5),
            "figures.top1.value: 1.5 is above the largest allowed value 1",
        ),
        (lambda e: e.update(schema_version=3), "schema_version: 3 is newer than this toolkit reads (2)"),
        (
            lambda e: e["predictions"].update(file="../x.parquet"),
            "predictions.file: '../x.parquet' is a path; an entry names a file beside it",
        ),
        (
            lambda e: e["model"].update(paper="javascript:alert(1)"),
            "model.paper: 'javascript:alert(1)' is not an http(s) link",
        ),
        (lambda e: e["figures"].update(top_1=None), "figures: unknown key 'top_1'"),
        (lambda e: e["data"].pop("fingerprint"), "data.fingerprint: missing"),
        (lambda e: e["bootstrap"].update(resamples=10**9), "bootstrap.resamples: 1000000000 is above the largest"),
        (
            lambda e: e["figures"]["by_group"][1].update(group="CeO"),
            "figures.by_group[1].group: group 'CeO' is listed twice",
        ),
        (lambda e: e["figures"]["worst_group"].update(low=None), "figures.worst_group: low and high come together"),
    ],
)
def test_a_malformed_entry_is_one_line_naming_the_file_and_field(evaluated, tmp_path, change, message):
    entry = json.loads((evaluated / FOLDER / "entry.json").read_text())
    change(entry)
    path = tmp_path / "entry.json"
    path.write_text(json.dumps(entry))
    with pytest.raises(HsiError) as caught:
        read_entry(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: {message}") and "\n" not in text, text


def test_fuzzed_entries_are_read_or_refused_never_a_traceback(evaluated, tmp_path):
    base = json.loads((evaluated / FOLDER / "entry.json").read_text())
    junk = [None, True, -1, 0, 2.5, 1e308, "", "x" * 400, "a\nb", [], {}, [1, 2], {"value": 2}, "\ud800"]
    paths = [path for path in value_paths(base) if path]
    outcomes = fuzz_reader(read_entry, tmp_path / "entry.json", base, random.Random(25), junk, paths, trials=300)
    assert outcomes["refused"] > 0 and outcomes["read"] > 0
    check_entry(base, "entry.json")  # the unmutated entry reads


def test_names_from_the_data_become_one_line_in_the_entry(evaluated):
    """Group and position names come from someone's data and may hold anything: the entry holds each
    as one printable line, which its reader accepts."""
    from evaluation.ranking.entries import build_entry

    folder = evaluated / FOLDER
    report = json.loads((folder / "eval.json").read_text())
    metrics = report["metrics"]
    metrics["by_group"][0]["group"] = "CeO\n# injected"
    metrics["groups_summary"]["worst_group"]["group"] = "CoR\r\n| a |"
    metrics["background_gap"][0]["position"] = "top-right\n## pos"
    entry = check_entry(json.loads(json.dumps(build_entry(report, folder / "predictions.parquet", EntryInfo()))), "e")
    figures = entry["figures"]
    assert figures["by_group"][0]["group"] == "CeO\\n# injected"
    assert figures["worst_group"]["group"] == "CoR\\r\\n| a |"
    assert all("\n" not in cell for cell in json.dumps(entry).split('"'))
