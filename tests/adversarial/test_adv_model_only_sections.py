"""Hostile clean-photo and backgrounds-alone sections, and a hostile preprocessing status, in an
eval.json (#33): the site, the leaderboard and `hsi eval --from` now show or carry these values, so a
forged section (an accuracy of 1e308 or below 0, a drop of 5, a file that is a path, a NaN, a
section of the wrong kind, a status no run writes) is one line naming the file and the field,
before anything is written; and seeded mutations of a real one are shown or refused, never a
traceback."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from json_fuzz import fuzz_reader, value_paths
from site_factory import (  # puts tests/evaluation on the path
    CORNER,
    checked_model_eval,
    eval_args,
    flat_images,
    report,
    shared_evaluation,
)
from test_eval_spuriosity import write_clean_tree

from hsi.cli import main

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    return shared_evaluation(tmp_path_factory)


@pytest.fixture(scope="module")
def with_passes(evaluation, tmp_path_factory) -> Path:
    """The shared site evaluation's corner rule, evaluated again with --clean and --parts: a model
    folder whose eval.json holds both sections."""
    root = tmp_path_factory.mktemp("passes")
    clean = write_clean_tree(root / "imagenet", flat_images())
    model = f"ts:{evaluation.root / 'planted_corner.pt'}"
    passes = ["--split", "val", "--clean", str(clean), "--parts", str(evaluation.root / "parts")]
    assert main(eval_args(evaluation.dataset, model, root / "evals", *passes, bootstrap=50)) == 0
    report_json = json.loads((root / "evals" / CORNER / "eval.json").read_text())
    assert report_json["clean"]["images"] == 6 and report_json["background_only"]["images"] == 6
    return root / "evals"


def _set(path: tuple, value):
    def change(report: dict) -> None:
        *route, last = path
        node = report
        for key in route:
            node = node[key]
        node[last] = value

    return change


def _drop(path: tuple):
    def change(report: dict) -> None:
        *route, last = path
        node = report
        for key in route:
            node = node[key]
        node.pop(last)

    return change


HOSTILE = {
    "clean top-1 huge": (_set(("clean", "top1", "value"), 1e308), "clean.top1.value: 1e+308 is above"),
    "clean top-1 negative": (_set(("clean", "top1", "low"), -0.5), "clean.top1.low: -0.5 is below"),
    "clean top-1 text": (_set(("clean", "top1", "value"), "0.9"), "clean.top1.value: expected a number"),
    "clean drop of 5": (_set(("clean", "drop_by_group", 0, "drop", "high"), 5), "clean.drop_by_group[0].drop.high"),
    "clean without drops": (_drop(("clean", "drop_by_group")), "clean.drop_by_group: missing"),
    "clean images negative": (_set(("clean", "images"), -1), "clean.images: -1 is below"),
    "clean file a path": (_set(("clean", "file"), "../../victim.csv"), "clean.file: "),
    "clean preprocessing a number": (_set(("clean", "preprocessing"), 5), "clean.preprocessing: expected a string"),
    "clean a list": (_set(("clean",), [1, 2]), "clean: expected an object"),
    "background top-1 above 1": (_set(("background_only", "top1"), 2.0), "background_only.top1: 2.0 is above"),
    "background top-1 a boolean": (_set(("background_only", "top1"), True), "background_only.top1: expected a number"),
    "background error without key": (
        _set(("background_only", "errors"), [{"detail": "x"}]),
        "background_only.errors[0].key: missing",
    ),
    "preprocessing status unknown to runs": (
        _set(("preprocessing", "status"), "guessed"),
        "preprocessing.status: 'guessed' is not one of applied, declared, unknown",
    ),
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_a_forged_section_is_one_line_for_the_site_the_leaderboard_and_from(
    attack, evaluation, with_passes, tmp_path, capsys
):
    change, field = HOSTILE[attack]
    evals = Path(shutil.copytree(with_passes, tmp_path / "evals"))
    path = evals / CORNER / "eval.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    before = {p: p.read_bytes() for p in evals.rglob("*") if p.is_file()}

    assert report(evals, out=tmp_path / "site") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hsi report: error: ") and "\n" not in err and f"{path}: {field}" in err, err
    assert not (tmp_path / "site").exists()

    # the leaderboard of another model's run into the folder: refused before that model runs
    finder = f"ts:{evaluation.root / 'planted_finder.pt'}"
    assert main(eval_args(evaluation.dataset, finder, evals, "--split", "val", bootstrap=20)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hsi eval: error: ") and "\n" not in err and field in err, err

    if attack.startswith(("clean", "background")):  # what --from carries over from the model run
        assert main(["eval", "--from", str(evals / CORNER / "predictions.parquet"), "--bootstrap", "20"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("hsi eval: error: ") and "\n" not in err and field in err, err
    assert {p: p.read_bytes() for p in evals.rglob("*") if p.is_file()} == before


def test_a_nan_in_a_section_is_refused_as_json_in_one_line(with_passes, tmp_path, capsys):
    evals = Path(shutil.copytree(with_passes, tmp_path / "evals"))
    path = evals / CORNER / "eval.json"
    data = json.loads(path.read_text())
    data["background_only"]["top1"] = 0.123456789  # a value found once in the text, then made NaN
    path.write_text(json.dumps(data, indent=2).replace("0.123456789", "NaN"))
    assert report(evals, out=tmp_path / "site") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hsi report: error: ") and "\n" not in err and "NaN is not a JSON number" in err


def test_fuzzed_sections_are_shown_or_refused_never_a_traceback(with_passes, tmp_path):
    """Seeded mutations of the clean, backgrounds-alone and preprocessing sections of a real eval.json
    through the reader, the leaderboard row and the pages that show them."""
    from cards.site.pages import Board, index_page, model_page
    from evaluation.predicting.predictions import read_predictions

    folder = with_passes / CORNER
    base = json.loads((folder / "eval.json").read_text())
    frame, _ = read_predictions(folder / "predictions.parquet")

    def show(path: Path) -> None:
        model = checked_model_eval(path, folder, frame)
        assert "<script>" not in model_page(model, None, {}, "no gallery", None, "")
        index_page([Board(model.revision, [model], None, None)], "")

    paths = [p for p in value_paths(base) if p and p[0] in ("clean", "background_only", "preprocessing")]
    junk = [None, "", "<script>", -1, 0, 0.5, 1.5, 1e308, -1e308, True, [], {}, [1], {"value": "a"}, "unknown"]
    outcomes = fuzz_reader(show, tmp_path / "eval.json", base, random.Random(33), junk, paths, trials=300)
    assert outcomes["read"] > 30 and outcomes["refused"] > 30, outcomes
