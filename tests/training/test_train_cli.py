"""`hsi train` through the command line: --report's Markdown, plot and per-seed eval reports go into
`hsi release --results`; JTT's eval-mode error set; data without train split or group metadata."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from builder.compose.stage import compose_dataset
from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from builder.core.stage import RunOptions
from hsi.cli import main
from validation.report import validate_dataset

TINY = ["--model", "test_efficientnet", "--batch-size", "32", "--lr", "0.05", "--device", "cpu", "--workers", "0"]


def train(dataset, out, *extra):
    return main(["train", str(dataset), "--out", str(out), *TINY, "--shuffle-buffer", "32", *extra])


@pytest.mark.slow
def test_report_is_markdown_a_plot_and_eval_reports_a_release_card_takes(tiny_planted, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert train(tiny_planted, runs, "--epochs", "1", "--seeds", "2", "--select", "mean") == 0
    dfr = ["--method", "dfr", "--select", "mean", "--dfr-refits", "2", "--erm-run", str(runs / "erm" / "seed-0")]
    assert train(tiny_planted, runs, "--epochs", "1", *dfr) == 0  # the last layer of ERM seed 0, retrained
    capsys.readouterr()
    summary = tmp_path / "summary"
    assert main(["train", "--report", str(runs), "--out", str(summary)]) == 0
    printed = capsys.readouterr().out
    markdown = (summary / "train_summary.md").read_text()
    assert printed.strip() == markdown.strip()
    scores = [json.loads((runs / "erm" / f"seed-{s}" / "scores.json").read_text()) for s in (0, 1)]
    means = [100 * s["test"]["mean"] for s in scores]
    mean, std = sum(means) / 2, abs(means[0] - means[1]) / 2**0.5  # sample std of two values
    assert f"| erm | 2 | {mean:.1f} ± {std:.1f} |" in markdown
    assert "| dfr | 1 |" in markdown and "## dfr minus erm on the all test images (the config has no tiers)" in markdown
    assert (summary / "train_summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    reports = sorted(p.name for p in (summary / "results").iterdir())
    assert reports == ["dfr-seed-0", "erm-seed-0", "erm-seed-1"]
    report = json.loads((summary / "results" / "erm-seed-1" / "eval.json").read_text())
    assert report["schema"] == "hsi-eval/1" and report["model"]["spec"] == "erm seed 1 (timm:test_efficientnet)"
    assert report["metrics"]["samples"] == scores[1]["test"]["samples"]

    dataset = tmp_path / "validated" / tiny_planted.name
    shutil.copytree(tiny_planted, dataset)
    assert validate_dataset(dataset, parts_dir=tiny_planted.parents[1] / "parts", previews=False).ok
    release = tmp_path / "release" / "planted"
    assert main(["release", str(dataset), "--out", str(release), "--results", str(summary / "results")]) == 0
    card = (release / "README.md").read_text()
    section = card[card.index("## Results") :]
    assert "`erm seed 0 (timm:test_efficientnet)`" in section and "`dfr seed 0 (timm:test_efficientnet)`" in section
    # the weights a trained model kept are named with their sha256 (issue 21, 14: they were blank, "n/a")
    from builder.core.hashing import sha256_file

    kept = sha256_file(runs / "erm" / "seed-0" / "best.pt")
    assert "erm/seed-0/best.pt, trained with hsi train (erm, seed 0)" in section and kept in section


def test_jtt_error_set_from_an_eval_pass_differs_from_the_training_pass(tiny_planted, tmp_path):
    common = ["--method", "jtt", "--epochs", "1", "--jtt-epochs", "1", "--jtt-upweight", "3", "--no-flip"]
    assert train(tiny_planted, tmp_path / "pass", *common) == 0
    assert train(tiny_planted, tmp_path / "eval", *common, "--jtt-errors", "eval") == 0
    found = {}
    for name in ("pass", "eval"):
        run = tmp_path / name / "jtt" / "seed-0"
        found[name] = json.loads((run / "jtt_error_set.json").read_text())
        info = json.loads((run / "scores.json").read_text())["info"]
        assert info["errors_from"] == found[name]["from"] == {"pass": "train-pass", "eval": "eval"}[name]
        assert info["error_set_size"] == len(found[name]["keys"])
    stage1 = [torch.load(tmp_path / n / "jtt" / "seed-0" / "stage1" / "last.pt", weights_only=True) for n in found]
    assert all(stage1[0]["model"][k].equal(v) for k, v in stage1[1]["model"].items())  # the same stage-1 model
    train_keys = {k for k, _ in _samples(tiny_planted, "train")}
    assert set(found["eval"]["keys"]) <= train_keys and set(found["pass"]["keys"]) <= train_keys
    assert found["eval"]["keys"] != found["pass"]["keys"]  # only the pass that predicts differs


def _samples(dataset, split):
    for shard in sorted(dataset.glob(f"{split}-*.tar")):
        yield from iter_shard(shard)


def test_a_config_without_a_train_split_is_refused(tiny_planted, tmp_path, capsys):
    paper = compose_dataset(
        tiny_planted.parents[1] / "parts", "hard-spurious-imagenet", tmp_path, options=RunOptions(progress=False)
    ).dataset_dir
    assert train(paper, tmp_path / "runs") == 2
    err = capsys.readouterr().err
    assert "cannot train on 'train'" in err and "--holdout train:0.1:val" in err and "--train-split" in err


@pytest.fixture
def without_groups(tiny_planted, tmp_path):
    """The planted set with every sample's group metadata null (group, tier, paired class), as the schema allows."""
    dataset = tmp_path / "plain"
    shutil.copytree(tiny_planted, dataset)
    written = {}
    for shard in sorted(dataset.glob("*.tar")):
        samples = []
        for key, members in iter_shard(shard):
            meta = {**json.loads(members["json"]), "group": None, "tier": None, "paired_wnid": None}
            members = dict(members, json=json.dumps(meta).encode())
            samples.append((key, members))
        written[shard.name] = write_shard(shard, samples)
    # the manifest vouches for the rewritten bytes (hsi train checks every shard's sha256)
    manifest = json.loads((dataset / "_info.json").read_text())
    for entry in manifest["splits"].values():
        for listed in entry["shards"]:
            listed.update(sha256=written[listed["filename"]].sha256, bytes=written[listed["filename"]].bytes)
    (dataset / "_info.json").write_text(json.dumps(manifest))
    return dataset


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        (["--method", "jtt"], "--method jtt needs each sample's group"),
        (["--method", "dfr", "--select", "mean"], "--method dfr needs each sample's group"),
        ([], "--select worst-group needs each sample's group"),
    ],
)
def test_methods_that_need_groups_refuse_data_without_them(without_groups, tmp_path, capsys, flags, why):
    assert train(without_groups, tmp_path / "runs", "--epochs", "1", *flags) == 2
    err = capsys.readouterr().err
    assert why in err and "has no group metadata" in err and "--method erm and --select mean" in err
    assert not (tmp_path / "runs").exists()  # refused before any training


def test_erm_selecting_on_the_mean_trains_on_data_without_groups(without_groups, tmp_path, capsys):
    assert train(without_groups, tmp_path / "runs", "--epochs", "1", "--select", "mean") == 0
    assert "worst n/a" in capsys.readouterr().out
    scores = json.loads((tmp_path / "runs" / "erm" / "seed-0" / "scores.json").read_text())
    assert scores["test"]["worst_group"] is None and 0 <= scores["test"]["mean"] <= 1
