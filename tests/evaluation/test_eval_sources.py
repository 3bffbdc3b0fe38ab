"""Sources and several models: a leaderboard of two models (sorted by worst group, a re-run skipped
unless --overwrite, a YAML model list), and an hf:// source read through the loopback Hub."""

from __future__ import annotations

import csv
import json

from eval_cli import eval_args
from hub_server import LoopbackHub, hub_env
from release_factory import make_composed_dataset
from subprocesses import run_hsi

from cards.release import build_release
from evaluation.predicting.predictions import read_predictions
from hsi.cli import main


def test_leaderboard_of_two_models_sorted_by_worst_group_and_skipped_when_done(
    paper_set, planted_corner, planted_finder, tmp_path, capsys
):
    out = tmp_path / "board"
    args = eval_args(paper_set, f"ts:{planted_corner},ts:{planted_finder}", out)
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "leaderboard (2 models)" in printed and str(out / "leaderboard.md") in printed
    with open(out / "leaderboard.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["model"] for r in rows] == ["ts:planted_finder.pt", "ts:planted_corner.pt"]
    assert [float(r["worst_group_top1"]) for r in rows] == [1.0, 0.0] and rows[1]["worst_group"] == "CoR"
    assert float(rows[1]["mean_over_groups"]) == 0.75 and float(rows[0]["CoR_top1"]) == 1.0
    assert rows[0]["preprocessing"] == "canvas as is" and len(rows[0]["checkpoint_sha256"]) == 64
    md = (out / "leaderboard.md").read_text()
    assert md.index("planted_finder") < md.index("planted_corner") and "| 2 | `ts:planted_corner.pt` |" in md

    stamp = (out / "ts_planted_corner.pt" / "predictions.parquet").stat().st_mtime_ns
    assert main(args) == 0
    assert printed_skips(capsys) == 2
    assert (out / "ts_planted_corner.pt" / "predictions.parquet").stat().st_mtime_ns == stamp
    assert main([*args, "--overwrite"]) == 0
    assert printed_skips(capsys) == 0
    assert (out / "ts_planted_corner.pt" / "predictions.parquet").stat().st_mtime_ns != stamp
    # another preprocessing is another evaluation, not a skip
    listing = tmp_path / "models.yaml"
    listing.write_text(f"- model: ts:{planted_corner.name}\n  mean: 0\n  std: 1\n  crop_pct: 0.875\n")
    (tmp_path / planted_corner.name).write_bytes(planted_corner.read_bytes())
    assert main(eval_args(paper_set, str(listing), str(tmp_path / "yaml"), raw=False)) == 0
    report = json.loads((tmp_path / "yaml" / "ts_planted_corner.pt-crop0.875" / "eval.json").read_text())
    assert report["preprocessing"]["crop_pct"] == 0.875
    assert "centre-cropped on purpose" in (tmp_path / "yaml" / "ts_planted_corner.pt-crop0.875" / "eval.md").read_text()


def printed_skips(capsys) -> int:
    return capsys.readouterr().err.count("already evaluated on this data revision")


def test_hf_source_through_the_loopback_hub_matches_the_local_release(planted_finder, tmp_path):
    release = build_release(
        tmp_path / "rel" / "hard-spurious-imagenet",
        [make_composed_dataset(tmp_path / "composed", splits={"test": 10}, shard_size=4)],
        version="v1.0.0",
    )
    local = tmp_path / "local"
    assert main(eval_args(release, f"ts:{planted_finder}", str(local))) == 0
    with LoopbackHub() as hub:
        env = hub_env(hub.endpoint, tmp_path / "hf")

        def hsi(*args):
            return run_hsi(args, env)

        published = hsi("publish", str(release), "--repo", "lab/hsi", "--version", "v1.0.0", "--yes")
        assert published.returncode == 0, published.stderr
        remote = tmp_path / "remote"
        result = hsi(*eval_args("hf://datasets/lab/hsi@v1.0.0", f"ts:{planted_finder}", remote, workers=2))
        assert result.returncode == 0, result.stderr
        assert "hf_loopback_test_token" not in result.stdout + result.stderr
    local_frame, local_meta = read_predictions(local / "ts_planted_finder.pt" / "predictions.parquet")
    remote_frame, remote_meta = read_predictions(remote / "ts_planted_finder.pt" / "predictions.parquet")
    assert len(remote_frame) == 10 and remote_meta["data"]["source"] == "hf://datasets/lab/hsi@v1.0.0"
    assert remote_frame.drop(columns=["top5_class", "top5_prob"]).equals(
        local_frame.drop(columns=["top5_class", "top5_prob"])
    )
    assert remote_meta["data"]["fingerprint"] == local_meta["data"]["fingerprint"]
    local_report = json.loads((local / "ts_planted_finder.pt" / "eval.json").read_text())
    remote_report = json.loads((remote / "ts_planted_finder.pt" / "eval.json").read_text())
    assert remote_report["metrics"] == local_report["metrics"]
