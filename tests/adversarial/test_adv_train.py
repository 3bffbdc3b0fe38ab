"""`hsi train` under attack and in a new user's hands: a crafted or damaged `last.pt`, a linked
method folder, a user's file in the run folder, two runs at once, a resume on other data, hostile
group names and junk files for `--report`, a holdout that comes out empty, docs/train.md's DFR recipe
and the defaults `--help` shows. Each test failed on the code before its fix."""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from parts_factory import write_parts
from planted_spurious import compose_planted, planted_images
from subprocesses import REPOSITORY

from builder.core.errors import HsiError
from builder.core.hashing import sha256_file
from builder.core.shard_write import write_shard
from hsi.cli import build_parser, main

TINY = [
    *("--model", "test_efficientnet", "--batch-size", "32", "--lr", "0.05", "--device", "cpu"),
    *("--workers", "0", "--shuffle-buffer", "32", "--epochs", "1"),
]


def train(dataset, out, *extra) -> int:
    return main(["train", str(dataset), "--out", str(out), *TINY, *map(str, extra)])


def refused(capsys, args) -> str:
    """The one line a refused command prints (exit 2, no traceback)."""
    assert main([str(a) for a in args]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("hsi "), err
    return lines[0]


def files_of(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    return compose_planted(
        tmp_path_factory.mktemp("planted"), per_class=16, canvas=32, sizes=(16,), majority=0.9, holdout=0.5
    )


@pytest.fixture(scope="module")
def finished(planted, tmp_path_factory):
    """Finished runs to attack: ERM with seeds 0 and 1, and DFR seed 0 on ERM seed 0 (`--erm-run` of a
    seed folder, as the code before these fixes already took it); returns (runs, ERM's files)."""
    runs = tmp_path_factory.mktemp("finished") / "runs"
    assert train(planted, runs, "--seeds", "2") == 0
    dfr = ["--method", "dfr", "--dfr-refits", "2", "--erm-run", runs / "erm" / "seed-0"]
    assert train(planted, runs, *dfr) == 0
    return runs, files_of(runs / "erm")


def copy_runs(finished, tmp_path, *skip: str) -> Path:
    """A copy of the finished's run folder (without its summary, and without the folders named in `skip`)."""
    runs = tmp_path / "runs"
    shutil.copytree(finished[0], runs, ignore=shutil.ignore_patterns("summary", ".*.lock", *skip))
    return runs


# -- point 14: docs/train.md's DFR recipe works as written; a refused reuse says why -----------------------------


def test_readme_dfr_recipe_reuses_each_erm_seed_and_writes_nothing_into_it(finished, planted, tmp_path):
    runs = copy_runs(finished, tmp_path, "dfr")  # ERM --seeds 2 done, as the recipe's first line leaves it
    erm_files = files_of(runs / "erm")
    assert train(planted, runs, "--seeds", "2", "--method", "dfr", "--dfr-refits", "2", "--erm-run", runs / "erm") == 0
    assert files_of(runs / "erm") == erm_files  # DFR only read the ERM runs
    for seed in (0, 1):
        erm = json.loads((runs / "erm" / f"seed-{seed}" / "scores.json").read_text())
        dfr = json.loads((runs / "dfr" / f"seed-{seed}" / "scores.json").read_text())
        assert dfr["info"]["erm_best_epoch"] == erm["info"]["best_epoch"]
        assert not (runs / "dfr" / f"seed-{seed}" / "erm").exists()  # no ERM model of its own
    summary = runs / "summary"
    report = ["train", "--report", runs / "erm", runs / "dfr", "--compare", "erm", "dfr", "--out", summary]
    assert main([str(a) for a in report]) == 0
    markdown = (summary / "train_summary.md").read_text()
    assert "| erm | 2 |" in markdown and "| dfr | 2 |" in markdown


def test_reusing_an_erm_run_of_other_flags_says_what_differs(finished, planted, tmp_path, capsys):
    runs = finished[0]
    line = refused(
        capsys,
        ["train", planted, "--out", tmp_path / "dfr", *TINY, "--method", "dfr", "--erm-run", runs / "erm" / "seed-0"]
        + ["--lr", "0.01"],
    )
    assert "cannot reuse --erm-run" in line and "lr: 0.05 -> 0.01" in line and "cannot resume" not in line
    assert "same training flags" in line


def test_train_help_shows_every_default():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    text = " ".join(sub.format_help().split())
    for action in sub._actions:
        default = action.default
        if not action.option_strings or default is None or default is False or default == argparse.SUPPRESS:
            continue
        assert f"(default: {default})" in text, action.option_strings


# -- point 1: last.pt is data, never code --------------------------------------------------------------------


class RunsCode:
    """Unpickling this creates `marker`: the proof that a loader ran code from the file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def forge_record(runs: Path, relative: str) -> None:
    """What an attacker who can write the folder also does: list the planted file in our record."""
    if (runs / "_written.json").exists():  # (the code before these fixes kept no record)
        record = json.loads((runs / "_written.json").read_text())
        record["files"][relative] = sha256_file(runs / relative)
        (runs / "_written.json").write_text(json.dumps(record))


def test_a_crafted_last_pt_is_refused_without_running_code(finished, planted, tmp_path, capsys):
    runs = copy_runs(finished, tmp_path)
    marker = tmp_path / "code-ran"

    def attempt(args) -> str:
        try:
            status = main([str(a) for a in args])
        except Exception as error:  # noqa: BLE001 - what matters first is whether the file's code ran
            status = error
        assert not marker.exists(), "loading last.pt ran code from it"
        err = capsys.readouterr().err
        assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        return err

    torch.save({"model": RunsCode(marker), "epoch": 1}, runs / "erm" / "seed-0" / "last.pt")
    forge_record(runs, "erm/seed-0/last.pt")
    line = attempt(["train", planted, "--out", runs, *TINY, "--resume"])
    assert "never unpickled" in line and "last.pt" in line
    foreign = tmp_path / "foreign-erm"
    foreign.mkdir()
    torch.save({"model": RunsCode(marker)}, foreign / "last.pt")
    dfr = ["train", planted, "--out", tmp_path / "dfr", *TINY, "--method", "dfr", "--erm-run", foreign]
    assert "never unpickled" in attempt(dfr)
    real = (finished[0] / "erm" / "seed-0" / "last.pt").read_bytes()
    (foreign / "last.pt").write_bytes(real[: len(real) // 2])
    assert "truncated or not a torch file" in refused(capsys, dfr)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    damaged = bytearray(data)
    attack = rng.randrange(5)
    if attack == 0:  # a cut file
        return bytes(damaged[: rng.randrange(len(damaged))])
    if attack == 1:  # flipped bits
        for _ in range(rng.randrange(1, 4)):
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
    elif attack == 2:  # a zeroed run
        start = rng.randrange(len(damaged))
        damaged[start : start + rng.randrange(1, 64)] = bytes(min(64, len(damaged) - start))[: rng.randrange(1, 64)]
    elif attack == 3:  # bytes of the pickle itself (where the structure lives) flipped
        at = data.find(b"data.pkl")
        if at >= 0:
            offset = at + rng.randrange(30, 400)
            if offset < len(damaged):
                damaged[offset] = rng.randrange(256)
    else:  # a byte inserted
        damaged.insert(rng.randrange(len(damaged)), rng.randrange(256))
    return bytes(damaged)


def test_fuzzed_training_state_loads_or_is_one_line(finished, tmp_path):
    import timm

    from training.state import read_last, restore

    real = (finished[0] / "erm" / "seed-0" / "last.pt").read_bytes()
    saved_rng = (random.getstate(), torch.get_rng_state())
    rng, outcomes = random.Random(21), {"loaded": 0, "refused": 0}
    path = tmp_path / "last.pt"
    started = time.perf_counter()
    for _ in range(80):
        path.write_bytes(_mutate(rng, real))
        module = timm.create_model("test_efficientnet", num_classes=4)
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: 1.0)
        scaler = torch.amp.GradScaler("cuda", enabled=False)
        try:
            state = read_last(path)
            restore(
                state, path, ("model", module), ("optimizer", optimizer), ("scheduler", scheduler), ("scaler", scaler)
            )
        except HsiError as error:
            assert "\n" not in str(error)
            outcomes["refused"] += 1
        else:
            outcomes["loaded"] += 1
    random.setstate(saved_rng[0])
    torch.set_rng_state(saved_rng[1])
    assert outcomes["refused"] > 0 and time.perf_counter() - started < 20, outcomes


# -- point 4: nothing written through a link, no user's file overwritten -------------------------------------


def test_a_linked_method_folder_is_refused_and_nothing_is_written_outside(planted, tmp_path, capsys):
    out, outside = tmp_path / "runs", tmp_path / "elsewhere"
    out.mkdir()
    outside.mkdir()
    (out / "_written.json").write_text(json.dumps({"kind": "train", "files": {}}))  # a run folder of ours
    (out / "erm").symlink_to(outside, target_is_directory=True)
    line = refused(capsys, ["train", planted, "--out", out, *TINY, "--select", "mean"])
    assert "is a link" in line and "erm" in line
    assert list(outside.iterdir()) == []


def test_a_users_file_in_the_run_folder_is_never_overwritten(finished, planted, tmp_path, capsys):
    runs = copy_runs(finished, tmp_path)
    scores = runs / "erm" / "seed-0" / "scores.json"
    scores.write_text("my own notes\n")
    before = files_of(runs)
    line = refused(capsys, ["train", planted, "--out", runs, *TINY, "--overwrite"])
    assert "scores.json" in line and "never overwritten" in line
    assert files_of(runs) == before  # refused before any training: nothing else changed either


# -- point 5: one run per folder -----------------------------------------------------------------------------


def test_a_second_train_into_a_folder_in_use_is_refused_at_once(planted, tmp_path, capsys):
    out = tmp_path / "runs"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from builder.core.locks import exclusive_folder\n"
            "with exclusive_folder(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)",
            str(out),
        ],
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        line = refused(capsys, ["train", planted, "--out", out, *TINY, "--select", "mean"])
        assert "being written by another hsi run" in line and f"pid {holder.pid}" in line
        assert not out.exists() or list(out.iterdir()) == []
    finally:
        holder.kill()
        holder.wait()


# -- point 7: a resume on other data at the same path --------------------------------------------------------


def test_resume_on_another_dataset_at_the_same_path_is_refused(planted, tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "runs"
    shutil.copytree(planted, data)
    assert train(data, out, "--select", "mean") == 0
    before = files_of(out)
    other = compose_planted(tmp_path / "other", per_class=8, canvas=32, sizes=(16,), majority=0.75, holdout=0.5)
    shutil.rmtree(data)
    shutil.copytree(other, data)
    line = refused(capsys, ["train", data, "--out", out, *TINY, "--select", "mean", "--resume"])
    assert "the dataset is not the one it trained on" in line and "data.fingerprint" in line
    assert files_of(out) == before


# -- point 8: group names from someone's data stay in their table cells --------------------------------------


def test_group_names_with_pipes_and_newlines_stay_in_their_cells(finished, tmp_path, capsys):
    runs = copy_runs(finished, tmp_path, "seed-1")  # one seed of each method: half the report's work
    for scores in runs.glob("*/seed-*/scores.json"):
        data = json.loads(scores.read_text())
        groups = data["test"]["groups"]
        first, second = sorted(groups)[:2]
        groups["own|n02037110"] = groups.pop(first)
        groups["x\n# injected"] = groups.pop(second)
        scores.write_text(json.dumps(data))
    assert main(["train", "--report", str(runs / "erm"), str(runs / "dfr"), "--out", str(tmp_path / "s")]) == 0
    markdown = (tmp_path / "s" / "train_summary.md").read_text()
    assert "own\\|n02037110" in markdown and "# injected" not in markdown.splitlines()
    for line in markdown.splitlines():
        if line.startswith("| group |") or line.startswith("| own") or line.startswith("| x "):
            assert line.replace("\\|", "").count("|") == 3, line


# -- point 11: junk for --report is one line ------------------------------------------------------------------


def _junk_parquet(path: Path) -> None:
    path.write_bytes(b"PAR1 this is not a table PAR1")


def _no_metadata(path: Path) -> None:
    pq.write_table(pq.read_table(path).replace_schema_metadata({}), path)


def _correct_edited(path: Path) -> None:
    table = pq.read_table(path)
    flipped = pa.array([not v if v is not None else None for v in table.column("correct").to_pylist()])
    pq.write_table(table.set_column(table.schema.get_field_index("correct"), "correct", flipped), path)


@pytest.mark.parametrize(
    ("name", "damage", "says"),
    [
        ("scores.json", lambda p: p.write_text("[1, 2]"), "expected an object, got a list"),
        ("scores.json", lambda p: p.write_text('{"method": "../../x"}'), "method"),
        ("scores.json", lambda p: p.write_text("{oops"), "not valid JSON"),
        ("predictions.parquet", _junk_parquet, "not a readable parquet file"),
        ("predictions.parquet", _no_metadata, "no 'hsi' metadata"),
        ("predictions.parquet", _correct_edited, "says correct="),
    ],
)
def test_report_refuses_a_damaged_run_file_in_one_line(finished, tmp_path, capsys, name, damage, says):
    runs = copy_runs(finished, tmp_path)
    damage(runs / "erm" / "seed-1" / name)
    line = refused(capsys, ["train", "--report", runs / "erm", "--out", tmp_path / "s"])
    assert says in line and f"seed-1/{name}" in line
    assert not (tmp_path / "s").exists()


# -- point 14: the comparison says what is true about tiers --------------------------------------------------


def test_comparison_on_a_config_with_tiers_but_no_hard_tier_says_so(finished, tmp_path):
    runs = copy_runs(finished, tmp_path, "seed-1")  # one seed of each method: half the report's work
    for path in runs.glob("*/seed-*/predictions.parquet"):
        table = pq.read_table(path)
        tiers = pa.array(["Easy"] * table.num_rows, pa.string())
        pq.write_table(table.set_column(table.schema.get_field_index("tier"), "tier", tiers), path)
    assert main(["train", "--report", str(runs / "erm"), str(runs / "dfr"), "--out", str(tmp_path / "s")]) == 0
    markdown = (tmp_path / "s" / "train_summary.md").read_text()
    assert "| tier | accuracy |" in markdown and "| Easy |" in markdown
    assert "no test image is in the Hard tier" in markdown and "the config has no tiers" not in markdown


# -- point 10: an empty holdout is refused by compose, an empty val split by train ---------------------------


def test_a_holdout_that_leaves_val_empty_is_refused_by_compose(tmp_path, capsys):
    write_parts(tmp_path / "parts", {"val": planted_images(2)}, shard_size=64)  # 1 train image per class
    line = refused(
        capsys,
        ["compose", "--parts", tmp_path / "parts", "--variant", "hard-spurious-imagenet-10"]
        + ["--holdout", "train:0.1:val", "--allow-missing", "--out", tmp_path / "out", "--no-progress"],
    )
    assert "--holdout train:0.1:val" in line and "would hold 0 source images" in line and "at least 2 images" in line
    assert not list((tmp_path / "out").rglob("*.tar"))


def test_train_refuses_an_empty_val_split_before_training(planted, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(planted, data)
    manifest = json.loads((data / "_info.json").read_text())
    val = manifest["splits"]["val"]
    shard = data / val["shards"][0]["filename"]
    write_shard(shard, [])
    val.update(num_samples=0, shard_lengths=[0], source_images=0, counts={})
    val["shards"][0].update(num_samples=0, sha256=sha256_file(shard), bytes=shard.stat().st_size)
    (data / "_info.json").write_text(json.dumps(manifest))
    line = refused(capsys, ["train", data, "--out", tmp_path / "runs", *TINY, "--select", "mean"])
    assert "'val' split" in line and "holds 0 samples" in line and "--holdout" in line
    assert not (tmp_path / "runs").exists()


def test_fuzzed_scores_and_predictions_read_or_are_one_line(finished, tmp_path):
    from training.summary import read_scores, read_test_predictions

    seed = finished[0] / "erm" / "seed-0"
    rng, outcomes = random.Random(2111), {"read": 0, "refused": 0}
    started = time.perf_counter()
    for name, reader, rounds in (("scores.json", read_scores, 150), ("predictions.parquet", read_test_predictions, 80)):
        real, path = (seed / name).read_bytes(), tmp_path / name
        for _ in range(rounds):
            path.write_bytes(_mutate(rng, real))
            try:
                reader(path)
            except HsiError as error:
                assert "\n" not in str(error)
                outcomes["refused"] += 1
            else:
                outcomes["read"] += 1
    assert outcomes["refused"] and outcomes["read"] and time.perf_counter() - started < 20, outcomes


# -- issue 30: a shard changed under an unchanged manifest is never trained on, nor resumed on ---------------


def tamper_train_shard(data: Path) -> str:
    """Flip one byte in the middle of the first train shard (its size and the manifest unchanged)."""
    name = json.loads((data / "_info.json").read_text())["splits"]["train"]["filenames"][0]
    raw = bytearray((data / name).read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (data / name).write_bytes(bytes(raw))
    return name


def test_a_changed_train_shard_is_refused_before_any_step(planted, tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "runs"
    shutil.copytree(planted, data)
    name = tamper_train_shard(data)
    line = refused(capsys, ["train", data, "--out", out, *TINY])
    assert f"{data / name} does not match the sha256 its manifest lists" in line
    assert "no training step was taken" in line
    assert not [p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")]  # no settings, no .pt


def test_a_changed_train_shard_is_refused_on_resume(planted, tmp_path):
    from evaluation.predicting.verified_shards import ShardMismatch
    from training.loop import TrainSettings, fit

    data, out = tmp_path / "data", tmp_path / "run"
    shutil.copytree(planted, data)
    settings = TrainSettings(
        model="test_efficientnet", source=str(data), out=str(out), epochs=2, batch_size=32, lr=0.05, device="cpu",
        shuffle_buffer=32, select="mean",
    )  # fmt: skip
    killed = fit(settings, stop_after_epoch=1, announce=lambda _: None)
    assert killed.stopped_early
    before = files_of(out)
    name = tamper_train_shard(data)
    with pytest.raises(ShardMismatch, match=rf"{name} does not match the sha256 .*: no training step was taken"):
        fit(settings, resume=True, announce=lambda _: None)
    assert files_of(out) == before  # last.pt still says epoch 1: nothing was trained on the changed bytes
