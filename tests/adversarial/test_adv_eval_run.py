"""`hsi eval` under attack and misuse (issue 21, points 4, 5, 6, 7, 11): it writes only through its
own output folder (no link followed, no user's file replaced), one run per folder, runs with other
settings or `--limit` get folders and leaderboard rows of their own, added passes run alone, a
changed shard is refused by its sha256, and a broken eval.json of another model is one line before
any model runs. Every command runs as a user runs it, through `hsi.cli.main`."""

from __future__ import annotations

import csv
import json
import os
import random
import shutil

import pytest
from json_fuzz import mutated, value_paths
from parts_factory import fake_images, write_parts
from release_factory import make_composed_dataset
from tiny_models import MeanColour
from trusted_code import trust_flags

from builder.core.errors import HsiError
from builder.core.locks import exclusive_folder
from builder.core.owned import OwnedFolder
from hsi.cli import main

torch = pytest.importorskip("torch")

MODEL = "ts_colour.pt"  # the default folder of the model below


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("adv-eval")
    dataset = make_composed_dataset(root / "composed", splits={"test": 12}, shard_size=4)
    models = {}
    for seed, name in ((0, "colour.pt"), (1, "other.pt")):
        models[name] = root / name
        torch.jit.trace(MeanColour(seed), torch.rand(1, 3, 224, 224)).save(str(models[name]))
    parts = root / "parts"
    write_parts(parts, {"val": fake_images(["n01443537", "n01530575"], per_class=1)})
    return dataset, models, parts


def evaluate(setup, out, *extra, model="colour.pt"):
    dataset, models, _ = setup
    argv = [
        "eval",
        str(dataset),
        "--model",
        f"ts:{models[model]}",
        *trust_flags(f"ts:{models[model]}"),
        "--out",
        str(out),
    ]
    return main([*argv, "--workers", "0", "--no-progress", "--bootstrap", "20", "--batch-size", "8", *extra])


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("hsi eval: error:")]
    assert len(lines) == 1, err
    return lines[0]


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- point 4: nothing through a link -----------------------------------------------------------


def test_a_linked_leaderboard_and_a_linked_model_folder_are_refused(setup, tmp_path, capsys):
    out, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.md").write_text("the user's notes\n")
    assert evaluate(setup, out) == 0
    (out / "leaderboard.md").unlink()
    os.symlink(outside / "notes.md", out / "leaderboard.md")
    capsys.readouterr()
    assert evaluate(setup, out, model="other.pt") == 2
    assert "leaderboard.md is a link" in one_line_error(capsys)
    assert (outside / "notes.md").read_text() == "the user's notes\n"

    (out / "leaderboard.md").unlink()
    os.symlink(outside, out / "ts_other.pt")  # a planted model folder leading outside
    assert evaluate(setup, out, model="other.pt") == 2
    assert "ts_other.pt is a link" in one_line_error(capsys)
    assert sorted(p.name for p in outside.iterdir()) == ["notes.md"]


def test_eval_from_never_writes_through_a_linked_plots_folder_nor_over_a_users_file(setup, tmp_path, capsys):
    out, outside = tmp_path / "out", tmp_path / "outside"
    assert evaluate(setup, out) == 0
    folder = out / MODEL
    outside.mkdir()
    (outside / "eval.md").write_text("my own eval.md\n")
    for plot in (folder / "plots").iterdir():
        plot.unlink()
    (folder / "plots").rmdir()
    os.symlink(outside, folder / "plots")
    capsys.readouterr()
    assert main(["eval", "--from", str(folder / "predictions.parquet"), "--bootstrap", "20"]) == 2
    assert "plots is a link or not a folder" in one_line_error(capsys)
    assert snapshot(outside) == {"eval.md": b"my own eval.md\n"}
    # a report the user edited is theirs now: never overwritten, whether run again or recomputed
    (folder / "plots").unlink()
    (folder / "eval.md").write_text("edited by the user\n")
    assert main(["eval", "--from", str(folder / "predictions.parquet"), "--bootstrap", "20"]) == 2
    assert "was not written by this command" in one_line_error(capsys)
    assert evaluate(setup, out, "--overwrite") == 2
    assert "eval.md was not written by this command" in one_line_error(capsys)
    assert (folder / "eval.md").read_text() == "edited by the user\n"


# -- point 5: one run per output folder ----------------------------------------------------------


def test_a_second_run_into_the_same_folder_is_refused_even_through_a_link(setup, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    with exclusive_folder(out.resolve()):
        assert evaluate(setup, out) == 2
        assert "is being written by another hsi run" in one_line_error(capsys)
        os.symlink(out, tmp_path / "via-link")
        assert evaluate(setup, tmp_path / "via-link") == 2
        assert "is a link" in one_line_error(capsys)
    assert list(out.iterdir()) == []


# -- point 6: no report lost ---------------------------------------------------------------------


def leaderboard_rows(out) -> list[dict]:
    with open(out / "leaderboard.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_other_preprocessing_and_a_limit_trial_get_their_own_folders_and_rows(setup, tmp_path, capsys):
    out = tmp_path / "out"
    assert evaluate(setup, out) == 0
    default = snapshot(out / MODEL)
    assert evaluate(setup, out, "--crop-pct", "0.875") == 0
    assert evaluate(setup, out, "--limit", "5") == 0
    assert snapshot(out / MODEL) == default  # the default run's report is still there, byte for byte
    cropped = json.loads((out / f"{MODEL}-crop0.875" / "eval.json").read_text())
    assert cropped["preprocessing"]["crop_pct"] == 0.875
    trial = json.loads((out / f"{MODEL}-limit5" / "eval.json").read_text())
    assert trial["data"]["limit"] == 5 and trial["data"]["partial"] is True and trial["metrics"]["samples"] == 5
    full = json.loads((out / MODEL / "eval.json").read_text())
    assert full["data"]["partial"] is False and full["data"]["verified"] == "sha256"
    rows = leaderboard_rows(out)  # every folder's row, rebuilt from their eval.json, the trial last
    assert [(r["folder"], r["partial"], r["limit"]) for r in rows][-1] == (f"{MODEL}-limit5", "true", "5")
    assert sorted(r["folder"] for r in rows) == [MODEL, f"{MODEL}-crop0.875", f"{MODEL}-limit5"]
    md = (out / "leaderboard.md").read_text()
    assert "| - | `ts:colour.pt` |" in md and "partial: first 5 samples |" in md and "Partial runs" in md


def test_added_passes_run_alone_and_an_overwrite_removes_its_own_leftovers_only(setup, tmp_path, capsys):
    _, _, parts = setup
    out = tmp_path / "out"
    assert evaluate(setup, out) == 0
    predictions = (out / MODEL / "predictions.parquet").read_bytes()
    capsys.readouterr()
    assert evaluate(setup, out, "--parts", str(parts)) == 0
    assert "adding background_only from its saved predictions" in capsys.readouterr().err
    report = json.loads((out / MODEL / "eval.json").read_text())
    assert report["background_only"]["images"] == 2 and (out / MODEL / "background_accuracy.csv").is_file()
    assert (out / MODEL / "predictions.parquet").read_bytes() == predictions  # not predicted again
    assert evaluate(setup, out, "--parts", str(parts)) == 0
    assert "already evaluated" in capsys.readouterr().err
    (out / MODEL / "my_notes.txt").write_text("mine\n")
    assert evaluate(setup, out, "--overwrite") == 0
    assert not (out / MODEL / "background_accuracy.csv").exists()  # the earlier run's file, not produced now
    assert "background_only" not in json.loads((out / MODEL / "eval.json").read_text())
    assert (out / MODEL / "my_notes.txt").read_text() == "mine\n"


def test_other_weights_in_an_evaluated_folder_are_refused_without_overwrite(setup, tmp_path, capsys):
    dataset, models, _ = setup
    out = tmp_path / "out"
    assert evaluate(setup, out) == 0
    before = snapshot(out / MODEL)
    models["colour.pt"].rename(tmp_path / "kept.pt")
    try:
        models["other.pt"].rename(models["colour.pt"])  # same name, other weights
        capsys.readouterr()
        assert evaluate(setup, out) == 2
        assert "holds an evaluation of ts:colour.pt with another model" in one_line_error(capsys)
        assert snapshot(out / MODEL) == before
    finally:
        models["colour.pt"].rename(models["other.pt"])
        (tmp_path / "kept.pt").rename(models["colour.pt"])


# -- point 7: shards are proved by their sha256 before they are read ---------------------------


def test_one_flipped_byte_in_a_shard_is_refused_naming_it_and_nothing_is_written(setup, tmp_path, capsys):
    dataset, _, _ = setup
    copy = tmp_path / "data" / dataset.name
    shutil.copytree(dataset, copy)
    shard = copy / "test-00001.tar"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0x01  # inside a member: the tar still reads, a JPEG decodes to other pixels
    shard.write_bytes(bytes(data))
    out = tmp_path / "out"
    dataset_arg = [
        "eval",
        str(copy),
        "--model",
        f"ts:{setup[1]['colour.pt']}",
        *trust_flags(f"ts:{setup[1]['colour.pt']}"),
        "--out",
        str(out),
    ]
    assert main([*dataset_arg, "--workers", "0", "--no-progress", "--bootstrap", "20"]) == 2
    line = one_line_error(capsys)
    assert "test-00001.tar does not match the sha256 its manifest lists" in line
    assert not out.exists()


# -- point 11: a broken eval.json of another model, before any model runs -----------------------


@pytest.mark.parametrize(
    "damage, field",
    [
        (lambda r: r["metrics"].update(samples="abc"), "metrics.samples: expected an integer"),
        (lambda r: r["model"].pop("spec"), "model.spec: missing"),
        (lambda r: r["metrics"]["groups_summary"]["worst_group"].update(value=[1]), "worst_group.value"),
    ],
)
def test_a_broken_eval_json_in_another_models_folder_is_one_line_before_any_run(setup, tmp_path, capsys, damage, field):
    out = tmp_path / "out"
    assert evaluate(setup, out) == 0
    path = out / MODEL / "eval.json"
    report = json.loads(path.read_text())
    damage(report)
    path.write_text(json.dumps(report))
    capsys.readouterr()
    assert evaluate(setup, out, model="other.pt") == 2
    line = one_line_error(capsys)
    assert f"{path}: " in line and field in line
    assert not (out / "ts_other.pt").exists()  # refused before the other model ran


def test_fuzzed_eval_json_is_a_valid_leaderboard_or_one_line(setup, tmp_path):
    """Seeded mutations of a real eval.json: the leaderboard is built, or HsiError; nothing else."""
    from evaluation.ranking.leaderboard import model_reports, write_leaderboard

    out = tmp_path / "out"
    assert evaluate(setup, out) == 0
    original = json.loads((out / MODEL / "eval.json").read_text())
    rng = random.Random(21)
    junk = [None, "x|y\n# heading", -1, 1e308, [], {}, True, "", 0.5, 10**30]
    every = [p for p in value_paths(original) if p and len(p) < 5]
    outcomes = {"ok": 0, "refused": 0}
    for trial in range(150):
        report = mutated(original, rng, junk, every, drop=0.3)
        board = tmp_path / f"board{trial}"
        try:
            with OwnedFolder(board, "eval") as owned:
                owned.write_text("m/eval.json", json.dumps(report))
                reports = model_reports(board)
                identity = {k: reports[0][1]["data"].get(k) for k in ("source", "config", "split", "fingerprint")}
                write_leaderboard(owned, identity)
            outcomes["ok"] += 1
        except HsiError as error:
            assert "\n" not in str(error)
            outcomes["refused"] += 1
    assert outcomes["ok"] > 10 and outcomes["refused"] > 10


def test_a_hub_shard_is_proved_in_the_cache_downloaded_again_once_then_refused(tmp_path, monkeypatch):
    """hf:// shards are read from the checked cached copy; a damaged copy is fetched once more, and
    refused when the hub's bytes themselves differ from the manifest (the loopback-hub run of the
    same path is tests/evaluation/test_eval_sources.py::test_hf_source_through_the_loopback_hub...)."""
    from release_factory import write_tar

    import evaluation.predicting.verified_shards as verified
    from builder.core.hashing import sha256_file

    good, bad = tmp_path / "good" / "test-00000.tar", tmp_path / "bad" / "test-00000.tar"
    for path, data in ((good, b"the shard's bytes"), (bad, b"the shard's bytez")):
        path.parent.mkdir()
        write_tar(path, [("test_000000.cls", data)])
    listed = {"filename": good.name, "sha256": sha256_file(good), "bytes": good.stat().st_size, "num_samples": 1}
    manifest = {"splits": {"test": {"shards": [listed]}}}
    url = "hf://datasets/lab/hsi@v1/data/c/test-00000.tar"
    fetched, said = [], []

    def fake_copy(address, force):
        fetched.append(force)
        return good if force else bad  # a damaged cache, an intact hub

    monkeypatch.setattr(verified, "_hub_copy", fake_copy)
    assert verified.verify_shards([url], manifest, "test", "_info.json", said.append) == {url: str(good)}
    assert fetched == [False, True] and "downloading it again" in said[0]
    monkeypatch.setattr(verified, "_hub_copy", lambda address, force: bad)
    with pytest.raises(verified.ShardMismatch, match="test-00000.tar does not match the sha256"):
        verified.verify_shards([url], manifest, "test", "_info.json", said.append)
    del manifest["splits"]["test"]["shards"][0]["sha256"]
    with pytest.raises(HsiError, match="sha256: missing"):
        verified.verify_shards([url], manifest, "test", "_info.json", said.append)


def test_fuzzed_model_only_sections_are_carried_into_a_report_or_one_line(setup, tmp_path):
    """`--from` carries the clean and bare-background sections of the eval.json beside the
    predictions: seeded mutations of them render into eval.md, or are HsiError; nothing else."""
    from evaluation.analysis.report import render_markdown
    from evaluation.orchestration.pipeline import model_only_sections

    out = tmp_path / "out"
    assert evaluate(setup, out) == 0
    report = json.loads((out / MODEL / "eval.json").read_text())
    estimate = {"value": 0.5, "low": 0.25, "high": 0.75}
    sections = {
        "clean": {
            "images": 4,
            "top1": estimate,
            "drop_by_group": [{"group": "CoR", "drop": estimate}],
            "missing": 1,
            "errors": [{"key": "a", "reason": "undecodable-clean-image", "detail": "truncated"}],
            "file": "clean_accuracy.csv",
            "preprocessing": "the whole photo",
        },
        "background_only": {"images": 2, "top1": 0.5, "classes": 2, "file": "background_accuracy.csv", "errors": []},
    }
    rng = random.Random(7)
    junk = [None, "x|y\n## injected", -3, 1e308, [], {}, True, "", [{}], {"value": "a"}]
    outcomes = {"ok": 0, "refused": 0}
    path = tmp_path / "eval.json"
    for _ in range(200):
        mutated = json.loads(json.dumps(sections))
        name = rng.choice(sorted(mutated))
        section = mutated[name]
        key = rng.choice(sorted(section))
        if rng.random() < 0.3:
            section.pop(key)
        elif isinstance(section[key], list) and section[key] and rng.random() < 0.5:
            section[key][0] = rng.choice(junk)
        else:
            section[key] = rng.choice(junk)
        path.write_text(json.dumps({**report, **mutated}))
        try:
            kept = model_only_sections(path)
            render_markdown({**report, **kept})
            outcomes["ok"] += 1
        except HsiError as error:
            assert "\n" not in str(error)
            outcomes["refused"] += 1
    assert outcomes["ok"] > 10 and outcomes["refused"] > 50
