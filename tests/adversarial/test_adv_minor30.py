"""The smaller holes of issue 30, each refused: a user's file named like a shard under `--overwrite`,
Ctrl-C in eval and train, CSV cells a spreadsheet would run, config names that restructure Markdown,
a refused `eval --from` leaving something publishable, a stranger's huge string echoed whole, and
`--predictions` parsed leniently. Each test failed before its fix."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from parts_factory import compose_args, fake_images, write_parts
from subprocesses import REPOSITORY, hsi_command
from trusted_code import trust_flags

from hsi.cli import main

WNIDS = ["n01443537", "n02437312"]


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry below `folder` by relative path: a file's bytes, None for a folder."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))
    }


# --- 1. compose --overwrite and a user's file named like a shard -------------------------------------


@pytest.fixture()
def composed(tmp_path) -> tuple[list[str], Path]:
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=1)})
    args = compose_args(tmp_path / "parts", tmp_path / "out", "--sizes", "56", "--name", "small", "--no-progress")
    assert main(args) == 0
    return args, tmp_path / "out" / "small"


def test_overwrite_keeps_a_users_file_named_like_a_shard_and_refuses_in_one_line(composed, capsys):
    """Failed before: any `<split>-NNNNN.tar` was taken as ours and deleted with the folder."""
    args, dataset = composed
    (dataset / "val-00007.tar").write_bytes(b"my own tar, not in the manifest")
    before = tree(dataset)
    capsys.readouterr()
    assert main([*args, "--overwrite"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err]
    assert f"--overwrite would delete val-00007.tar in {dataset}, which this toolkit did not write" in err
    assert tree(dataset) == before


def test_overwrite_refuses_a_listed_shard_whose_bytes_changed(composed, capsys):
    args, dataset = composed
    shard = sorted(dataset.glob("val-*.tar"))[0]
    shard.write_bytes(shard.read_bytes() + b"\0" * 512)  # edited since the manifest recorded its sha256
    before = tree(dataset)
    capsys.readouterr()
    assert main([*args, "--overwrite"]) == 2
    assert f"--overwrite would delete {shard.name} in {dataset}" in capsys.readouterr().err
    assert tree(dataset) == before


def test_a_killed_runs_shard_vouched_for_by_its_state_record_is_ours(composed):
    """Before any manifest, a shard is ours when its `_state/` record (size and sha256) says so."""
    args, dataset = composed
    shards = {p.name: p.read_bytes() for p in dataset.glob("val-*.tar")}
    assert shards and all((dataset / "_state" / f"{name}.json").is_file() for name in shards)
    (dataset / "_info.json").unlink()  # as a run killed before its manifest leaves it
    assert main([*args, "--overwrite"]) == 0
    assert {p.name: p.read_bytes() for p in dataset.glob("val-*.tar")} == shards


# --- 2. Ctrl-C in hsi eval and hsi train: one line, exit 130, a folder the same command resumes -----


def interrupt_when(command: list, ready, timeout: float = 120) -> tuple[int, str]:
    """Run `command` in a session of its own, send the whole group SIGINT (what Ctrl-C in a terminal
    sends) once `ready()` holds, and return (exit status, stderr)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")  # torch's deprecation warnings are not ours to count
    process = subprocess.Popen(
        command, start_new_session=True, stderr=subprocess.PIPE, text=True, cwd=REPOSITORY, env=env
    )
    deadline = time.time() + timeout
    while not ready():
        assert process.poll() is None, process.stderr.read()
        assert time.time() < deadline, "the run made no progress"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGINT)
    code = process.wait(timeout=60)
    return code, process.stderr.read()


def assert_one_interrupted_line(err: str, command: str) -> str:
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hsi {command}: error: interrupted"), err
    return lines[0]


def test_ctrl_c_in_an_eval_sweep_is_one_line_and_the_same_command_resumes(tmp_path):
    """Failed before: a KeyboardInterrupt traceback and exit status 1."""
    torch = pytest.importorskip("torch")
    from release_factory import make_composed_dataset
    from tiny_models import MeanColour

    dataset = make_composed_dataset(tmp_path / "composed", splits={"test": 12}, shard_size=4)
    models = []
    for seed in range(3):
        models.append(tmp_path / f"m{seed}.pt")
        torch.jit.trace(MeanColour(seed), torch.rand(1, 3, 224, 224)).save(str(models[-1]))
    out = tmp_path / "out"
    specs = ",".join(f"ts:{m}" for m in models)
    argv = ["eval", dataset, "--models", specs, *trust_flags(specs), "--out", out]
    argv += ["--workers", "0", "--no-progress", "--bootstrap", "20", "--batch-size", "8"]

    code, err = interrupt_when(hsi_command(*argv), lambda: any(out.glob("*/eval.json")))
    line = assert_one_interrupted_line(err, "eval")
    assert code == 130 and "run the same command again to resume (evaluated models are skipped)" in line
    done = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/eval.json")}
    assert 1 <= len(done) < len(models)
    assert f"interrupted: {len(done)} of the {len(models)} models are evaluated" in line

    assert main([str(a) for a in argv]) == 0  # the folder is ours and whole: the same command goes on
    after = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/eval.json")}
    assert len(after) == len(models) and all(after[name] == stamp for name, stamp in done.items())
    with (out / "leaderboard.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == len(models)


def test_ctrl_c_in_train_is_one_line_and_resume_continues_from_last_pt(tmp_path):
    """Failed before: a KeyboardInterrupt traceback and exit status 1."""
    from planted_spurious import compose_planted

    planted = compose_planted(tmp_path / "planted", per_class=8, canvas=32, sizes=(16,), majority=0.9, holdout=0.5)
    out = tmp_path / "runs"
    argv = ["train", planted, "--out", out, "--model", "test_efficientnet", "--batch-size", "16", "--lr", "0.05"]
    argv += ["--device", "cpu", "--workers", "0", "--shuffle-buffer", "16", "--epochs", "2"]
    last = out / "erm" / "seed-0" / "last.pt"

    code, err = interrupt_when(hsi_command(*argv), last.is_file)
    line = assert_one_interrupted_line(err, "train")
    assert code == 130 and "run the same command with --resume to continue" in line
    from training.state import read_last

    assert read_last(last)["epoch"] == 1  # whole, and a checkpoint of ours the resume reads
    assert "erm/seed-0/last.pt" in json.loads((out / "_written.json").read_text())["files"]
    assert not (out / "erm" / "seed-0" / "scores.json").exists()
    assert main([*map(str, argv), "--resume"]) == 0  # the second epoch, from the checkpoint
    assert read_last(last)["epoch"] == 2 and (out / "erm" / "seed-0" / "scores.json").is_file()


# --- a model evaluated once, for the report attacks below --------------------------------------------


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> dict[str, Path]:
    torch = pytest.importorskip("torch")
    from release_factory import make_composed_dataset
    from tiny_models import MeanColour

    root = tmp_path_factory.mktemp("minor30-eval")
    dataset = make_composed_dataset(root / "data", splits={"test": 12}, shard_size=6)
    model = root / "colour.pt"
    torch.jit.trace(MeanColour(0), torch.rand(1, 3, 32, 32)).save(str(model))
    assert main(eval_command(dataset, root / "eval", f"ts:{model}")) == 0
    return {
        "root": root,
        "dataset": dataset,
        "model": model,
        "predictions": root / "eval" / "ts_colour.pt" / "predictions.parquet",
    }


def eval_command(dataset: Path, out: Path, model: str, *extra: str) -> list[str]:
    flags = ["--input-size", "32", "--mean", "0", "--std", "1", "--workers", "0", "--bootstrap", "20"]
    flags += trust_flags(model)  # the test's own TorchScript files
    return ["eval", str(dataset), "--model", model, *flags, "--out", str(out), "--no-progress", *extra]


def rewritten_predictions(predictions: Path, folder: Path, change) -> Path:
    """A copy of a run's predictions table with each row changed by `change(index, row)`, written as
    a user would with pyarrow (its `hsi` metadata kept)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    original = pq.read_table(predictions)
    rows = [change(i, dict(row)) for i, row in enumerate(original.to_pylist())]
    table = pa.Table.from_pylist(rows, schema=original.schema)
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "predictions.parquet")
    return folder / "predictions.parquet"


# --- 5. a refused `eval --from` leaves nothing publishable --------------------------------------------


def test_a_refused_from_run_leaves_no_eval_json_and_release_results_finds_nothing(evaluated, tmp_path, capsys):
    """Failed before: the entry was checked after eval.json was written, so the refused run left a
    report that `release --results` published. Two groups that differ only after 300 characters are
    one group in the entry (its labels are one line of at most 300), which its reader refuses."""
    long = "G" * 300
    path = rewritten_predictions(
        evaluated["predictions"], tmp_path / "table", lambda i, row: {**row, "group": long + "ab"[i % 2]}
    )
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["eval", "--from", str(path), "--out", str(out), "--bootstrap", "20"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hsi eval: error: ") and "is listed twice" in err
    assert not (out / "eval.json").exists() and not list(out.rglob("*.png")) and not list(out.rglob("eval.json"))
    assert main(["release", str(evaluated["dataset"]), "--out", str(tmp_path / "release"), "--results", str(out)]) == 2
    assert "no eval.json" in capsys.readouterr().err


# --- 3. CSV cells a spreadsheet would run --------------------------------------------------------------

FORMULA = "=cmd|' /C calc'!A0"


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (FORMULA, "\"'=cmd|' /C calc'!A0\""),
        ("+1+2", '"\'+1+2"'),
        ("-1+2", '"\'-1+2"'),
        ('@SUM(A1:A9) "x"', '"\'@SUM(A1:A9) ""x"""'),
        ("\tcalc", '"\'\tcalc"'),
        ("\rcalc", '"\'\rcalc"'),
        (-0.5, "-0.5"),  # a number is a number
        (-3, "-3"),
        ("-0.5000", "-0.5000"),  # a score already formatted is a number too
        ("1e-05", "1e-05"),
        ("CeO", "CeO"),
        ("a,b", '"a,b"'),  # the csv module's own quoting, unchanged
        (None, ""),
        (True, "True"),
    ],
)
def test_a_formula_like_text_cell_is_quoted_as_owasp_recommends(value, written):
    from builder.core.csv_cells import cell

    assert cell(value) == written


def test_plain_tables_keep_the_bytes_of_the_csv_module():
    import io

    from builder.core.csv_cells import dict_table_text

    rows = [{"model": "timm:a,b", "top1": 0.25, "error": "", "n": 3}, {"model": 'say "hi"', "top1": None, "n": -1}]
    handle = io.StringIO(newline="")
    writer = csv.DictWriter(handle, fieldnames=["model", "top1", "error", "n"])
    writer.writeheader()
    writer.writerows(rows)
    assert dict_table_text(["model", "top1", "error", "n"], rows) == handle.getvalue()


def test_a_group_named_like_a_formula_reaches_leaderboard_csv_defused(evaluated, tmp_path):
    """Failed before: the group name was a live formula cell (its column header and worst_group)."""
    from builder.core.manifest import Manifest
    from builder.core.shard_read import iter_shard
    from builder.core.shard_write import write_shard

    dataset = tmp_path / "data" / evaluated["dataset"].name
    shutil.copytree(evaluated["dataset"], dataset)
    manifest = Manifest.read(dataset)
    shards = manifest.splits["test"].shards
    for n, stats in enumerate(shards):
        samples = []
        for key, members in iter_shard(dataset / stats.filename):
            meta = json.loads(members["json"])
            meta["group"] = FORMULA if meta["group"] == "CeO" else meta["group"]
            samples.append((key, {**members, "json": json.dumps(meta, sort_keys=True).encode()}))
        shards[n] = write_shard(dataset / stats.filename, samples)
    manifest.write(dataset)
    out = tmp_path / "out"
    assert main(eval_command(dataset, out, f"ts:{evaluated['model']}")) == 0
    text = (out / "leaderboard.csv").read_text("utf-8")
    assert "\"'=cmd|' /C calc'!A0_top1\"" in text.splitlines()[0]
    cells = [c for row in csv.reader(text.splitlines()) for c in row]
    assert not [c for c in cells if c.startswith(("=", "+", "@"))]
    (row,) = csv.DictReader(text.splitlines())
    assert row["top1"] == repr(
        json.loads((out / "ts_colour.pt" / "eval.json").read_text())["metrics"]["overall"]["top1"]["value"]
    )


# --- 4. config names that would restructure a Markdown report, or become a path ------------------------


@pytest.mark.parametrize("config", ["hsi\n# injected heading", "../../outside", "a|b"])
@pytest.mark.parametrize("command", ["validate", "eval"])
def test_a_config_name_with_a_newline_or_a_path_is_refused_where_it_enters(
    evaluated, tmp_path, capsys, config, command
):
    """Failed before: both commands took the manifest's config as given and leaderboard.md printed it raw."""
    dataset = tmp_path / "data" / evaluated["dataset"].name
    shutil.copytree(evaluated["dataset"], dataset)
    info = json.loads((dataset / "_info.json").read_text())
    (dataset / "_info.json").write_text(json.dumps({**info, "config": config}))
    before = tree(dataset)
    argv = ["validate", str(dataset)] if command == "validate" else eval_command(dataset, tmp_path / "out", "timm:x")
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"hsi {command}: error: "), err
    assert "manifest.config" in err and "is not one safe path component for a config name" in err
    assert tree(dataset) == before and not (tmp_path / "out").exists()


def test_markdown_writers_keep_a_hostile_path_and_spec_on_their_own_line_and_cell(evaluated, tmp_path):
    """Failed before: a backtick in a model spec ended its code span in leaderboard.md (the row
    then had other cells); the heading prints the data's names through the same escaping."""
    dataset = tmp_path / "in\n# injected" / evaluated["dataset"].name
    shutil.copytree(evaluated["dataset"], dataset)
    model = tmp_path / "col`our|x.pt"
    shutil.copyfile(evaluated["model"], model)
    out = tmp_path / "out"
    assert main(eval_command(dataset, out, f"ts:{model}")) == 0
    board = (out / "leaderboard.md").read_text("utf-8").splitlines()
    assert not [line for line in board if line.startswith("# injected")]
    assert board[0] == f"# Leaderboard: {dataset.name} / test ({dataset.name})"
    (row,) = [line for line in board if "our" in line and line.startswith("| 1 |")]
    assert "| ``ts:col`our\\|x.pt`` |" in row  # one code span, one cell
    assert row.replace("\\|", "").count("|") == board[board.index(row) - 2].count("|")  # as many cells as the header


# --- 7. --predictions parsed strictly ------------------------------------------------------------------


def given_table(**columns):
    import pandas as pd

    from evaluation.predicting.given import checked_table

    return checked_table(pd.DataFrame({"key": ["val_000000", "val_000001"], **columns}), "predictions:p.csv")


@pytest.mark.parametrize(
    ("column", "values", "named"),
    [
        ("pred_class", ["7", "5_0"], "row 2 (val_000001): pred_class: '5_0' is not an ImageNet class index 0-999"),
        ("pred_class", ["7", "١٢"], "row 2 (val_000001): pred_class: '١٢' is not an ImageNet class index 0-999"),
        ("pred_class", [True, False], "row 1 (val_000000): pred_class: True is not an ImageNet class index 0-999"),
        ("pred_class", ["7", " 8"], "row 2 (val_000001): pred_class: ' 8' is not an ImageNet class index 0-999"),
        ("pred_class", ["7", "8.0"], "row 2 (val_000001): pred_class: '8.0' is not an ImageNet class index 0-999"),
        ("prob_label", ["0.5", "0_5"], "row 2 (val_000001): prob_label: '0_5' is not a probability in [0, 1]"),
        ("prob_label", ["0.5", True], "row 2 (val_000001): prob_label: True is not a probability in [0, 1]"),
    ],
)
def test_predictions_read_only_decimal_ascii_numbers(column, values, named):
    """Failed before: Python's int()/float() read `5_0` as 50, `١٢` as 12 and True as class 1."""
    from builder.core.errors import InputError

    columns = {"pred_class": ["7", "8"], column: values}
    with pytest.raises(InputError) as refused:
        given_table(**columns)
    assert str(refused.value) == f"predictions:p.csv: {named} (a decimal " + (
        "integer)" if column == "pred_class" else "number)"
    )


@pytest.mark.parametrize(
    ("probabilities", "named"),
    [
        ("0.6;0.5", "row 2 (val_000001): top5_prob sums to 1.1, more than 1"),
        ("0.2;0.3", "row 2 (val_000001): top5_prob is not best first: 0.3 (place 2) is above 0.2 (place 1)"),
    ],
)
def test_top5_probabilities_are_best_first_and_sum_to_at_most_one(probabilities, named):
    from builder.core.errors import InputError

    with pytest.raises(InputError) as refused:
        given_table(pred_class=["7", "8"], top5_class=["7;1", "8;2"], top5_prob=["0.5;0.25", probabilities])
    assert str(refused.value).startswith(f"predictions:p.csv: {named}")


def test_strict_predictions_still_take_what_a_user_writes():
    import numpy as np

    given = given_table(
        pred_class=[np.int64(7), 8], top5_class=["7;1", "8;2"], top5_prob=["0.5;0.25", f"{0.5 + 1e-7};0.5"]
    )
    assert given.pred == [7, 8] and given.top5 == [[7, 1], [8, 2]]
    assert given_table(pred_class=["007", "999"], prob_label=["1e-3", ".5"]).fields["prob_label"] == [0.001, 0.5]


def test_a_refused_predictions_file_is_one_line_naming_the_row_and_key(evaluated, tmp_path, capsys):
    import pyarrow.parquet as pq

    keys = pq.read_table(evaluated["predictions"]).column("key").to_pylist()
    table = tmp_path / "mine.csv"
    table.write_text("key,pred_class\n" + "".join(f"{k},{'5_0' if n == 3 else 5}\n" for n, k in enumerate(keys)))
    argv = ["eval", str(evaluated["dataset"]), "--predictions", str(table), "--out", str(tmp_path / "out")]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"hsi eval: error: predictions:mine.csv: row 4 ({keys[3]}): pred_class: '5_0' is not an ImageNet class "
        "index 0-999 (a decimal integer)"
    )
    assert not (tmp_path / "out").exists()


# --- 6. a stranger's huge string is shortened in an error line ---------------------------------------


def test_a_50_mb_key_is_shortened_in_the_error_line(evaluated, tmp_path, capsys):
    """Failed before: the manifest's unknown field was echoed whole, a 50 MB error line."""
    dataset = tmp_path / "data" / evaluated["dataset"].name
    shutil.copytree(evaluated["dataset"], dataset)
    info = json.loads((dataset / "_info.json").read_text())
    key = "k" * 50_000_000
    (dataset / "_info.json").write_text(json.dumps({**info, key: 1}))
    capsys.readouterr()
    assert main(["validate", str(dataset)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err) < 400 and len(err.splitlines()) == 1, len(err)
    assert f"has unknown fields ['{'k' * 60}'… (50000000 characters)]" in err


@pytest.mark.parametrize(
    ("check", "value"),
    [("check_config_name", "c" * 10_000_000), ("check_shard_filename", "s\n" * 1_000_000), ("check_size", [0] * 10**6)],
)
def test_the_name_checks_shorten_what_they_echo(check, value):
    from builder.core import names

    with pytest.raises(names.UnsafeNameError) as refused:
        getattr(names, check)(value)
    message = str(refused.value)
    assert len(message) < 400 and "\n" not in message and "characters)" in message


def test_shown_keeps_short_values_as_before_and_cuts_long_ones():
    from builder.core.errors import first_few, shown

    assert shown("../x") == "'../x'" and shown("a\nb", quote=False) == "a\\nb" and shown(7) == "7"
    assert shown("x" * 61) == f"'{'x' * 60}'… (61 characters)"
    assert shown("é" * 100, quote=False) == "é" * 60 + "… (100 characters)"
    assert first_few(["a", "b" * 1000]) == f"a, {'b' * 255}… (1000 characters)"  # a file name stays whole


@pytest.mark.parametrize("config", ["a\n# injected", "../x", "x" * 200])
def test_a_config_flag_with_a_newline_or_a_path_is_refused_in_one_line(evaluated, tmp_path, capsys, config):
    """`--config` enters through the stream reader's one check, also for a dataset folder (which has no
    configs to choose from, so the name was ignored and carried along before)."""
    capsys.readouterr()
    argv = eval_command(evaluated["dataset"], tmp_path / "out", "timm:x", "--config", config)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not one safe path component for a config name" in err, err
    assert len(err) < 500 and not (tmp_path / "out").exists()
