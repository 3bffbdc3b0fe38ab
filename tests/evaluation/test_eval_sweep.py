"""Sweeps of several models (issue 26): `--model-workers 2`, `--runner ray` and `--runner slurm` (#45, a local
Slurm started here; skipped where it cannot start) give the predictions and
metrics of one process; a model that fails in the middle of three is a leaderboard row (and its
folder's failed.json) while the others complete, exit status 3; a later run that evaluates it removes
the row; each model's report is written as the model finishes, not at the end of the sweep."""

from __future__ import annotations

import csv
import json
import time
from dataclasses import replace

import pyarrow.parquet as pq
import pytest
import torch
from eval_cli import eval_args
from trusted_code import trusting

from builder.core.owned import OwnedFolder
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.model_formats.models import ModelOptions
from evaluation.orchestration.eval_folder import EVAL_KIND
from evaluation.orchestration.pipeline import RunSettings
from evaluation.orchestration.runs import data_revision
from evaluation.orchestration.sweep import compute_model, run_sweep, sweep_tasks
from hsi.cli import main

MODELS = ("ts_planted_corner.pt", "ts_planted_finder.pt")
TIMING = ("seconds", "images_per_second")  # what differs between two runs of one model


class FailsMidRun(torch.nn.Module):
    """Passes the one-image output probe before any work, then raises on the first real batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 1:
            raise RuntimeError("planted failure in forward")
        return torch.zeros(x.shape[0], 1000)


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    path = tmp_path_factory.mktemp("failing") / "fails_mid_run.pt"
    torch.jit.script(FailsMidRun()).save(str(path))
    return path


@pytest.fixture(scope="module")
def one_process(paper_set, planted_corner, planted_finder, tmp_path_factory):
    """The two planted models evaluated one after another in this process: the reference."""
    out = tmp_path_factory.mktemp("one-process") / "out"
    assert main(eval_args(paper_set, f"ts:{planted_corner},ts:{planted_finder}", out)) == 0
    return out


def predictions(folder):
    """(the table's rows, its metadata less the run's timing) of a predictions.parquet."""
    table = pq.read_table(folder / "predictions.parquet")
    metadata = json.loads(table.schema.metadata[b"hsi"])
    for key in TIMING:
        metadata["run"].pop(key)
    return table.replace_schema_metadata(None), metadata


def assert_same_evaluations(out, reference, models=MODELS):
    for model in models:
        rows, metadata = predictions(out / model)
        expected_rows, expected_metadata = predictions(reference / model)
        assert rows.num_rows == 72 and rows.equals(expected_rows), model
        assert metadata == expected_metadata, model
        report, expected = (json.loads((folder / model / "eval.json").read_text()) for folder in (out, reference))
        assert report["metrics"] == expected["metrics"], model


def leaderboard_rows(out) -> list[dict]:
    with open(out / "leaderboard.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_model_failing_mid_run_is_a_row_and_the_others_complete_in_two_worker_processes(
    paper_set, planted_corner, planted_finder, failing, one_process, tmp_path, capsys
):
    out = tmp_path / "out"
    specs = f"ts:{planted_corner},ts:{failing},ts:{planted_finder}"
    assert main(eval_args(paper_set, specs, out, "--model-workers", "2")) == 3
    err = capsys.readouterr().err
    assert "hsi eval: error: 1 of 3 models failed (ts:" in err and "RuntimeError: planted failure in forward" in err
    assert_same_evaluations(out, one_process)  # the others: as in one process, byte for byte but the timing
    failure = json.loads((out / "ts_fails_mid_run.pt" / "failed.json").read_text())
    assert (failure["stage"], failure["error"]) == ("evaluate", "torch.jit.Error")  # what TorchScript raises
    assert failure["reason"] == (
        "ts:fails_mid_run.pt: its forward pass failed on a 64 x 3 x 224 x 224 input: RuntimeError: planted failure "
        "in forward (check that it is the model you meant and the input size it takes, --input-size)"
    )
    assert failure["data"]["config"] == "hard-spurious-imagenet" and failure["data"]["split"] == "val"
    assert not (out / "ts_fails_mid_run.pt" / "eval.json").exists()
    rows = leaderboard_rows(out)
    assert [(r["model"], r["status"]) for r in rows] == [
        ("ts:planted_finder.pt", "ok"),
        ("ts:planted_corner.pt", "ok"),
        ("ts:fails_mid_run.pt", "failed"),
    ]
    assert rows[2]["error"] == failure["reason"] and rows[2]["worst_group_top1"] == ""
    md = (out / "leaderboard.md").read_text()
    assert "## Failed models" in md
    assert f"| `ts:fails_mid_run.pt` | ts_fails_mid_run.pt | evaluate | {failure['reason']} |" in md
    # the HTML report lists it under its data revision, after the ranked models
    assert main(["report", str(out), "--out", str(tmp_path / "site"), "--no-progress"]) == 0
    index = (tmp_path / "site" / "index.html").read_text("utf-8")
    failed = index.split("Failed models (not ranked)", 1)[1]
    assert "<code>ts:fails_mid_run.pt</code>" in failed and "RuntimeError: planted failure in forward" in failed
    assert index.index("ts:planted_finder.pt") < index.index("Failed models (not ranked)")

    # the model mended under the same name: the next run evaluates it, skips the others, drops the row
    failing.write_bytes(planted_corner.read_bytes())
    assert main(eval_args(paper_set, specs, out)) == 0
    assert capsys.readouterr().err.count("already evaluated on this data revision") == 2
    assert not (out / "ts_fails_mid_run.pt" / "failed.json").exists()
    assert [r["status"] for r in leaderboard_rows(out)] == ["ok"] * 3
    assert "Failed models" not in (out / "leaderboard.md").read_text()


def test_a_sweep_refuses_a_missing_model_file_before_any_model_runs(paper_set, planted_corner, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(eval_args(paper_set, f"ts:{planted_corner},ts:{tmp_path / 'typo.pt'}", out)) == 2
    assert "no such TorchScript file" in capsys.readouterr().err
    assert not out.exists()


def compute_after_the_first_report(task, *args, **kwargs):
    """compute_model, but the second model starts only once the first one's eval.json is written: a
    sweep that wrote its reports at the end would never let it start (it gives up after a minute)."""
    if task.position == 1:
        first = task.out.root / MODELS[0] / "eval.json"
        deadline = time.monotonic() + 60
        while not first.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not first.exists():
            raise RuntimeError("the first model's report was not written while the second model ran")
    return compute_model(task, *args, **kwargs)


def test_each_report_is_written_as_its_model_finishes(paper_set, planted_corner, planted_finder, tmp_path):
    settings = RunSettings(split="val", workers=0, progress=False)
    raw = ModelOptions(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), trust=trusting(planted_corner, planted_finder))
    specs = [(f"ts:{planted_corner}", raw), (f"ts:{planted_finder}", raw)]
    tasks = sweep_tasks(specs, paper_set, settings, parallel=True)
    written = []
    with OwnedFolder(tmp_path / "out", EVAL_KIND) as owned:
        data = data_revision(paper_set, None, "val", None)
        sweep = run_sweep(
            tasks,
            owned,
            data,
            workers=2,
            announce=lambda text: None,
            after_each=lambda: written.append(sorted(p.parent.name for p in owned.root.glob("*/eval.json"))),
            work=compute_after_the_first_report,
        )
    assert sweep.failures == [] and written == [[MODELS[0]], list(MODELS)]


@pytest.mark.slow
def test_ray_gives_the_predictions_of_one_process(paper_set, planted_corner, planted_finder, one_process, tmp_path):
    out = tmp_path / "ray"
    assert main(eval_args(paper_set, f"ts:{planted_corner},ts:{planted_finder}", out, "--runner", "ray")) == 0
    assert_same_evaluations(out, one_process)
    assert leaderboard_rows(out) == leaderboard_rows(one_process)


def test_one_model_over_two_workers_gives_the_predictions_of_one_process(
    paper_set, planted_corner, one_process, tmp_path, monkeypatch, capsys
):
    """One model, --model-workers 2: each worker predicts one part of the shards (the paper set has
    3), the parent merges them into one process's predictions.parquet and metrics."""
    import evaluation.orchestration.pipeline as pipeline

    parts_seen = []
    original = pipeline.predictions_for

    def counting(loaded, source, settings, *, plan=None, announce=print):
        run = original(loaded, source, settings, plan=plan, announce=announce)
        parts_seen.append((settings.part, len(run.rows)))
        return run

    out = tmp_path / "out"
    assert main(eval_args(paper_set, f"ts:{planted_corner}", out, "--model-workers", "2")) == 0
    assert "ts:planted_corner.pt: its data in 2 parts, one per worker" in capsys.readouterr().err
    assert_same_evaluations(out, one_process, models=("ts_planted_corner.pt",))
    # the same split in this process: disjoint parts that together hold every sample once
    monkeypatch.setattr(pipeline, "predictions_for", counting)
    from evaluation.orchestration.sweep import merged_work

    settings = RunSettings(split="val", workers=0, progress=False, bootstrap=BootstrapSettings(resamples=20))
    spec = (f"ts:{planted_corner}", ModelOptions(mean=(0.0,) * 3, std=(1.0,) * 3, trust=trusting(planted_corner)))
    task = sweep_tasks([spec], str(paper_set), settings, False)[0]
    with OwnedFolder(tmp_path / "here", EVAL_KIND) as owned:
        works = [
            compute_model(replace(task, settings=replace(task.settings, part=(index, 2))), lambda line: None, owned)
            for index in range(2)
        ]
    keys = [{row["key"] for row in work.part_run.rows} for work in works]
    assert keys[0] and keys[1] and not keys[0] & keys[1] and len(keys[0] | keys[1]) == 72
    assert sorted(parts_seen) == [((0, 2), len(keys[0])), ((1, 2), len(keys[1]))]
    assert merged_work(works).predictions is not None


def test_one_model_over_workers_refuses_the_clean_and_background_passes(
    paper_set, planted_corner, flat_parts, tmp_path, capsys
):
    out = tmp_path / "out"
    args = eval_args(paper_set, f"ts:{planted_corner}", out, "--model-workers", "2", "--parts", str(flat_parts[0]))
    assert main(args) == 2
    assert "--clean and --parts run in one process" in capsys.readouterr().err


@pytest.fixture(scope="module")
def local_slurm(tmp_path_factory):
    import os
    from pathlib import Path

    from slurm_cluster import start_local_slurm

    cluster, reason = start_local_slurm(tmp_path_factory.mktemp("slurm"))
    if cluster is None:
        pytest.skip(f"no local Slurm: {reason}")
    tests = Path(__file__).resolve().parents[1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", str(cluster.conf))
        path = [str(tests.parent), str(tests), os.environ.get("PYTHONPATH", "")]
        patch.setenv("PYTHONPATH", os.pathsep.join(p for p in path if p))
        yield cluster
    cluster.stop()


@pytest.mark.slow
def test_a_slurm_array_gives_the_predictions_of_one_process(
    local_slurm, paper_set, planted_corner, planted_finder, one_process, tmp_path
):
    out = tmp_path / "slurm"
    assert main(eval_args(paper_set, f"ts:{planted_corner},ts:{planted_finder}", out, "--runner", "slurm")) == 0
    assert_same_evaluations(out, one_process)
    assert leaderboard_rows(out) == leaderboard_rows(one_process)
