"""What the zero-shot and answers paths read from a stranger, attacked: a `--templates` YAML file
that is a link, malformed, huge, an alias bomb or full of bad templates; `--templates` with no
zero-shot model; a `pred_text` column holding control characters, text that is not UTF-8, or no
text at all; a VLM callable returning the wrong kind or count of answers; and predictions tables
whose prompt-set or answer columns lie. Each is refused in one line before the first write, or,
for answers that are merely odd, stored and shown escaped."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from recompute import recompute
from release_factory import make_composed_dataset
from tiny_clip import save_tiny_openclip, tiny_openclip_spec

from builder.core.errors import HsiError
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.zero_shot.published import simple_templates
from evaluation.zero_shot.templates import MAX_FILE_BYTES
from hsi.cli import main

QUICK = {"bootstrap": BootstrapSettings(resamples=20), "announce": lambda _: None}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("adv-zero-shot")
    dataset = make_composed_dataset(root / "data", splits={"test": 8}, shard_size=4)
    spec = tiny_openclip_spec(save_tiny_openclip(root / "tiny" / "tiny-clip.safetensors"))
    return {"root": root, "dataset": dataset, "spec": spec}


def refused(capsys, args: list[str], out: Path, *needles: str) -> str:
    """`hsi eval ARGS` exits 2 with one line holding every needle, and `out` was never created."""
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not out.exists()
    return err


def eval_args(world: dict, out: Path, templates: str, model: str | None = None) -> list[str]:
    model = model or world["spec"]
    return ["eval", str(world["dataset"]), "--model", model, "--templates", templates, "--out", str(out)]


def write(path: Path, text: str) -> Path:
    path.write_text(text, "utf-8")
    return path


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        ("sets: [a, b\n", ("template file is not valid YAML", "line 2")),
        ("just a string\n", ("template file holds 'just a string'; give a list of templates",)),
        ("- a photo of a {}.\n- a photo of a {} and a {}.\n", ("has 2 {} placeholders",)),
        ("- a photo of a {}.\n- a {0} photo.\n", ("has no {} placeholder",)),
        ('- "a photo of a {}.\\n# injected"\n', ("is not one line of printable text",)),
        ("- a photo of a {}.\n- a photo of a {}.\n", ("is listed twice",)),
        ("openai: ['a {}.']\n", ("the set name 'openai' is a built-in set's",)),
        ("'bad name!': ['a {}.']\n", ("is not 1-64 letters, digits",)),
        (yaml.safe_dump([f"photo {n} of a {{}}." for n in range(1001)]), ("lists 1001 templates, more than 1000",)),
        # an alias bomb: nine levels of nine references; refused at its first entry, never expanded
        (
            f"a: &a [{', '.join(repr(f'x{n} {{}}') for n in range(9))}]\n"
            + "".join(f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join(['*' + chr(97 + n)] * 9)}]\n" for n in range(8)),
            ("expected a template string, got a list",),
        ),
    ],
)
def test_a_malformed_template_file_is_refused_in_one_line_before_any_write(world, tmp_path, capsys, content, needles):
    own = write(tmp_path / "own.yaml", content)
    refused(capsys, eval_args(world, tmp_path / "out", f"simple,{own}"), tmp_path / "out", "own.yaml", *needles)


def test_a_template_file_that_is_a_link_or_huge_is_refused_unread(world, tmp_path, capsys):
    real = write(tmp_path / "real.yaml", yaml.safe_dump(list(simple_templates())))
    os.symlink(real, tmp_path / "link.yaml")
    refused(capsys, eval_args(world, tmp_path / "out", str(tmp_path / "link.yaml")), tmp_path / "out", "is a link")
    huge = tmp_path / "huge.yaml"
    with open(huge, "w") as handle:
        handle.write("- a photo of a {}.\n")
        handle.write("# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    refused(capsys, eval_args(world, tmp_path / "out", str(huge)), tmp_path / "out", "more than 4194304")
    refused(
        capsys,
        eval_args(world, tmp_path / "out", "simple,simple"),
        tmp_path / "out",
        "names the prompt set simple twice",
    )
    refused(capsys, eval_args(world, tmp_path / "out", "cupola"), tmp_path / "out", "'cupola' is no prompt set")


def test_templates_without_a_zero_shot_model_is_refused(world, tmp_path, capsys):
    refused(
        capsys,
        eval_args(world, tmp_path / "out", "simple", model="timm:resnet18"),
        tmp_path / "out",
        "--templates sets the prompt sets of zero-shot models",
    )


def test_odd_answers_are_stored_and_shown_escaped_and_non_text_is_refused(world, tmp_path, capsys):
    import hsi

    keys = hsi.open(world["dataset"], announce=lambda _: None).keys
    hostile = ["tench\n# injected", "\x1b[31mtench", "a | b | c", "\ud800 lone", "x" * 5000, None, "", "tench"]
    table = pd.DataFrame({"key": keys, "pred_text": pd.Series(hostile, dtype=object)})  # object: pandas keeps \ud800
    evaluation = hsi.score(table, world["dataset"], **QUICK)
    rows = {row["key"]: row for row in evaluation._rows}
    assert rows[keys[7]]["answer_status"] == "mapped" and rows[keys[0]]["answer_status"] == "unmapped"
    assert rows[keys[3]]["pred_text"] == "\\ud800 lone" and len(rows[keys[4]]["pred_text"]) == 1000
    folder = evaluation.save(tmp_path / "saved")
    markdown = (folder / "eval.md").read_text()
    assert not [line for line in markdown.splitlines() if line.startswith("# injected")]
    assert "\x1b" not in markdown and "tench\\n# injected" in markdown and "a \\| b \\| c" in markdown
    assert recompute(folder / "predictions.parquet", tmp_path / "again", bootstrap=20) is not None

    for bad, kind in ((7, "7"), (["tench"], "['tench']"), (b"tench", "b'tench'")):
        values = list(hostile)
        values[2] = bad
        with pytest.raises(HsiError, match=r"row 3 \(.*\): pred_text: .* is not text") as caught:
            hsi.score(
                pd.DataFrame({"key": keys, "pred_text": pd.Series(values, dtype=object)}), world["dataset"], **QUICK
            )
        assert kind in str(caught.value) and "\n" not in str(caught.value)
    assert capsys.readouterr().err == ""


def test_a_callable_answering_with_the_wrong_kind_or_count_is_refused(world):
    import hsi

    for answer, problem in (
        (lambda batch: "tench", "returned 'tench' for a batch"),
        (lambda batch: ["tench"] * (len(batch) + 1), "answers for a batch of"),
        (lambda batch: [3] * len(batch), "returned 3 as an answer"),
        (lambda batch: np.zeros((len(batch), 1000)), "must return a list of strings"),
    ):
        with pytest.raises(HsiError, match=problem):
            hsi.evaluate(answer, world["dataset"], outputs="text", workers=0, progress=False, **QUICK)
    with pytest.raises(HsiError, match="outputs='text' sends the canvas as it is .* drop mean, std"):
        hsi.evaluate(lambda b: ["x"] * len(b), world["dataset"], outputs="text", mean=0, std=1)


@pytest.fixture(scope="module")
def runs(world, tmp_path_factory) -> dict:
    """A zero-shot run with two prompt sets, and an answers run, each with its predictions table."""
    import hsi

    root = tmp_path_factory.mktemp("adv-zero-shot-runs")
    twins = write(root / "twins.yaml", yaml.safe_dump({"one": ["a {}."], "two": ["the {}."]}))
    run = [*eval_args(world, root / "zs", str(twins)), "--workers", "0", "--bootstrap", "20", "--no-progress"]
    assert main(run) == 0
    (zero_shot,) = (root / "zs").glob("*/predictions.parquet")
    answers = hsi.evaluate(
        lambda b: ["tench"] * len(b), world["dataset"], outputs="text", workers=0, progress=False, **QUICK
    )
    folder = answers.save(root / "answers")
    return {"zero_shot": zero_shot, "answers": folder / "predictions.parquet"}


def tampered(path: Path, out: Path, columns=None, metadata=None) -> Path:
    """The table at `path` with columns replaced (`columns(table) -> {name: array or None to drop}`)
    or its metadata changed (`metadata(dict) -> dict`)."""
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[b"hsi"])
    for name, values in (columns(table) if columns else {}).items():
        index = table.schema.get_field_index(name)
        table = table.remove_column(index) if values is None else table.set_column(index, name, values)
    if metadata is not None:
        meta = metadata(meta)
    out.mkdir(parents=True)
    pq.write_table(table.replace_schema_metadata({b"hsi": json.dumps(meta).encode()}), out / "predictions.parquet")
    return out / "predictions.parquet"


def not_first(table, column: str) -> list[list[int]]:
    """Top-5 lists whose first class is not the row's predicted class."""
    return [[(pred + 1) % 1000, pred] for pred in table.column(column).to_pylist()]


def renamed_set(meta: dict, name: str) -> dict:
    meta["zero_shot"]["sets"][1]["name"] = name
    return meta


LYING_TABLES = [
    ("zero_shot", {"metadata": lambda m: renamed_set(m, "three")}, "has no column pred_class__three"),
    ("zero_shot", {"metadata": lambda m: renamed_set(m, "one")}, "names the prompt set 'one' a second time"),
    ("zero_shot", {"metadata": lambda m: renamed_set(m, "x\n# y")}, "zero_shot.sets[1].name"),
    ("zero_shot", {"metadata": lambda m: {**m, "zero_shot": {**m["zero_shot"], "sets": []}}}, "names no prompt set"),
    (
        "zero_shot",
        {"columns": lambda t: {"pred_class__two": pa.array([1001] * t.num_rows, pa.int64())}},
        "column pred_class__two: row 1",
    ),
    (
        "zero_shot",
        {"columns": lambda t: {"top5_class__two": pa.array(not_first(t, "pred_class__two"), pa.list_(pa.int64()))}},
        "is not the first of its top5_class__two",
    ),
    (
        "zero_shot",
        {"columns": lambda t: {"top5_prob__one": pa.array([[2.0]] * t.num_rows, pa.list_(pa.float32()))}},
        "top5_prob__one",
    ),
    (
        "answers",
        {"columns": lambda t: {"answer_status": pa.array(["maybe"] * t.num_rows)}},
        "which is not one of mapped",
    ),
    (
        "answers",
        {
            "columns": lambda t: {
                "pred_class": pa.array([-1] * t.num_rows, pa.int64()),
                "top5_class": pa.array([[-1]] * t.num_rows, pa.list_(pa.int64())),
            }
        },
        "does not fit its answer_status",
    ),
    ("answers", {"columns": lambda t: {"answer_status": None}}, "has no column answer_status"),
]


@pytest.mark.parametrize(("run", "change", "needle"), LYING_TABLES)
def test_a_predictions_table_whose_prompt_sets_or_answers_lie_is_refused(runs, tmp_path, capsys, run, change, needle):
    path = tampered(runs[run], tmp_path / "lied", **change)
    assert recompute(path, tmp_path / "out", bootstrap=20) is None
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and needle in err, err
