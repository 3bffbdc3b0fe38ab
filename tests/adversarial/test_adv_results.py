"""Hostile and partial results folders handed to `hsi release --results` (issue 21, points 3, 6, 11):
plots and folders that are links, eval.json files that are not reports, `--limit` runs, and a fuzz
of the eval.json reader."""

from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path

import pytest
from json_fuzz import fuzz_reader, value_paths
from PIL import Image
from release_factory import composed_fingerprint, make_composed_dataset

from hsi.cli import main as hsi

CONFIG = "hard-spurious-imagenet"
FINGERPRINT = composed_fingerprint(CONFIG, 0)  # make_composed_dataset's for this config and seed 0


def estimate(value: float) -> dict:
    return {"value": value, "low": value - 0.05, "high": value + 0.05, "n": 8, "sources": 8}


def eval_report(spec: str = "timm:resnet18", **data) -> dict:
    """An eval.json of the form `hsi eval` writes, with the fields the card reads."""
    groups = ["CeO", "CoO", "CeR", "CoR"]
    return {
        "schema": "hsi-eval/1",
        "model": {"spec": spec, "checkpoint": None, "checkpoint_sha256": None, "declared_classes": None},
        "preprocessing": {"input_size": [224, 224], "interpolation": "bicubic", "crop_pct": None, "cropped": False},
        "label_space": {"name": "imagenet", "classes": 1000},
        "data": {"config": CONFIG, "split": "test", "fingerprint": FINGERPRINT, "limit": None, **data},
        "toolkit": {"name": "hard-spurious-imagenet", "version": "0.1.0"},
        "notes": [],
        "metrics": {
            "overall": {"top1": estimate(0.5)},
            "by_group": [{"group": g, "top1": estimate(0.2 * (n + 1))} for n, g in enumerate(groups)],
            "groups_summary": {
                "groups": groups,
                "mean_over_groups": estimate(0.5),
                "worst_group": {"group": "CeO", **estimate(0.2)},
            },
        },
        "plots": ["plots/accuracy_vs_size.png"],
        "files": {"predictions": "predictions.parquet"},
    }


def png_bytes(colour=(200, 30, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def model_folder(evals: Path, name: str, report: dict | None = None, plot: bool = True) -> Path:
    folder = evals / name
    (folder / "plots").mkdir(parents=True)
    (folder / "eval.json").write_text(json.dumps(report or eval_report(f"timm:{name}")))
    if plot:
        (folder / "plots" / "accuracy_vs_size.png").write_bytes(png_bytes())
    return folder


@pytest.fixture
def dataset(tmp_path):
    return make_composed_dataset(tmp_path / "sets", splits={"test": 8})


def release(dataset: Path, out: Path, *results: Path) -> int:
    return hsi(["release", str(dataset), "--out", str(out), "--results", *map(str, results)])


def files_with(root: Path, data: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p.read_bytes() == data]


# ---------------------------------------------------------------- point 3: no link is followed


@pytest.mark.parametrize("where", ["plot", "plots folder", "model folder"])
def test_a_link_on_the_way_to_a_plot_is_refused_and_nothing_is_copied(dataset, tmp_path, capsys, where):
    """Failed before: shutil.copyfile followed the link, and the secret went into results/ (and from
    there, with publish --to-git, into a commit)."""
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    secret = secret_dir / "accuracy_vs_size.png"  # what a link to /etc/passwd would read
    secret.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    evals = tmp_path / "evals"
    folder = model_folder(evals, "resnet18", plot=False)
    if where == "plot":
        (folder / "plots" / "accuracy_vs_size.png").symlink_to(secret)
    elif where == "plots folder":
        (folder / "plots").rmdir()
        (folder / "plots").symlink_to(secret_dir, target_is_directory=True)
    else:  # the model folder itself, linked into the eval folder
        real = tmp_path / "elsewhere"
        os.replace(folder, real)
        (real / "plots" / "accuracy_vs_size.png").symlink_to(secret)
        folder.symlink_to(real, target_is_directory=True)
    out = tmp_path / "rel" / CONFIG
    assert release(dataset, out, evals) == 2
    err = capsys.readouterr().err
    assert "hsi release: error:" in err and "link" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()
    leaked = files_with(tmp_path / "rel", secret.read_bytes()) if (tmp_path / "rel").exists() else []
    assert leaked == []


def test_a_plot_that_is_not_a_png_is_refused(dataset, tmp_path, capsys):
    evals = tmp_path / "evals"
    folder = model_folder(evals, "resnet18", plot=False)
    (folder / "plots" / "accuracy_vs_size.png").write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    assert release(dataset, tmp_path / "rel", evals) == 2
    assert "is not a PNG image" in capsys.readouterr().err
    assert not (tmp_path / "rel").exists()


def test_a_plain_plot_is_copied_byte_for_byte(dataset, tmp_path):
    evals = tmp_path / "evals"
    model_folder(evals, "resnet18")
    out = tmp_path / "rel"
    assert release(dataset, out, evals) == 0
    copied = out / "results" / f"{CONFIG}_resnet18_accuracy_vs_size.png"
    assert copied.read_bytes() == png_bytes()
    card = (out / "README.md").read_text()
    assert f"](results/{copied.name})" in card
    # the weights cell says what is true of a library model, never an empty cell or a bare "n/a"
    assert "| `timm:resnet18` | the library's published weights of the spec | not recorded |" in card


# ---------------------------------------------------------------- point 6: partial runs


def test_a_limit_run_never_blocks_the_release_and_is_never_shown_as_full(dataset, tmp_path, capsys):
    """Failed before: a `--limit` trial in eval/ made `release --results eval/` refuse the release."""
    evals = tmp_path / "evals"
    model_folder(evals, "resnet18")
    model_folder(evals, "resnet50-limit-240", eval_report("timm:resnet50", limit=240, partial=True))
    out = tmp_path / "rel"
    assert release(dataset, out, evals) == 0
    err = capsys.readouterr().err
    assert "note: left resnet50-limit-240 out of the card's results: a partial evaluation (the first 240" in err
    card = (out / "README.md").read_text()
    assert "`timm:resnet18`" in card and "resnet50" not in card
    assert sorted(p.name for p in (out / "results").iterdir()) == [f"{CONFIG}_resnet18_accuracy_vs_size.png"]


def test_a_report_that_says_partial_without_a_limit_is_still_left_out(dataset, tmp_path, capsys):
    evals = tmp_path / "evals"
    model_folder(evals, "resnet18", eval_report(partial=True))
    assert release(dataset, tmp_path / "rel", evals) == 0
    assert "a partial evaluation (part of the samples" in capsys.readouterr().err
    assert "## Results" not in (tmp_path / "rel" / "README.md").read_text()


# ---------------------------------------------------------------- point 11: one line per bad report


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "eval.json: eval report is not valid JSON"),
        ("[1, 2]", "eval.json: expected an object, got a list"),
        (json.dumps({**eval_report(), "model": {}}), "eval.json: model.spec: missing"),
        (json.dumps({**eval_report(), "model": {"spec": 5}}), "eval.json: model.spec: expected a string, got 5"),
        (json.dumps({**eval_report(), "schema": "other"}), "eval.json: schema: not an hsi eval report"),
        (json.dumps(eval_report(limit="abc")), "eval.json: data.limit: expected an integer, got 'abc'"),
        (json.dumps(eval_report(config="../../x")), "eval.json: data.config:"),
    ],
)
def test_a_report_that_is_not_one_is_one_line_naming_file_and_field(dataset, tmp_path, capsys, content, expected):
    """Failed before: a KeyError, AttributeError or JSONDecodeError traceback."""
    evals = tmp_path / "evals"
    folder = model_folder(evals, "resnet18")
    (folder / "eval.json").write_text(content)
    assert release(dataset, tmp_path / "rel", evals) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "rel").exists()


def test_the_eval_json_reader_survives_seeded_mutations(tmp_path):
    """Every mutation of a valid report is either read or refused as an HsiError, never a crash."""
    from evaluation.ranking.eval_reader import checked_report as read_report

    base = eval_report()
    path = tmp_path / "eval.json"
    rng = random.Random(21)
    junk = [None, -1, 0, 2.5, float("inf"), "", "x", [], {}, [1], {"a": 1}, True, "../..", 10**30]
    every = [p for p in value_paths(base) if p]
    outcomes = fuzz_reader(read_report, path, base, rng, junk, every)
    assert outcomes["read"] > 0 and outcomes["refused"] > 0


def predictions_with(folder: Path, metadata: dict) -> None:
    """A predictions table carrying `hsi` metadata, as `hsi train` writes for its runs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"key": ["a"]}).replace_schema_metadata({"hsi": json.dumps(metadata)})
    pq.write_table(table, folder / "predictions.parquet")


def test_a_trained_model_shows_its_run_not_empty_weights(dataset, tmp_path):
    """Failed before (issue 21, 14): a model of `hsi train --report` had an empty weights cell and
    sha256 "n/a"; the card now says what the run records: the method and seed, and the checkpoint
    file and its sha256 when the run records them."""
    evals = tmp_path / "evals"
    erm = model_folder(evals, "erm-seed-0", eval_report("erm seed 0 (timm:resnet18)"))
    predictions_with(erm, {"training": {"method": "erm", "seed": 0}})
    sha = "ab" * 32
    jtt = model_folder(evals, "jtt-seed-1", eval_report("jtt seed 1 (timm:resnet18)"))
    predictions_with(jtt, {"training": {"method": "jtt", "seed": 1, "checkpoint": "best.pt", "checkpoint_sha256": sha}})
    out = tmp_path / "rel"
    assert release(dataset, out, evals) == 0
    card = (out / "README.md").read_text()
    assert (
        "| `erm seed 0 (timm:resnet18)` | trained with hsi train (erm, seed 0); its run records no checkpoint" in card
    )
    assert f"| `jtt seed 1 (timm:resnet18)` | best.pt, trained with hsi train (jtt, seed 1) | `{sha}` |" in card
    assert "n/a |" not in card.split("| model | weights |")[1].split("\n\n")[0]
    # a predictions table whose metadata is not ours is one line, not a traceback
    predictions_with(erm, {"training": {"method": 5}})
    assert release(dataset, tmp_path / "rel2", evals) == 2
