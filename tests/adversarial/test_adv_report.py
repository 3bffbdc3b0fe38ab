"""Hostile inputs handed to `hsi report` (issue 25): links anywhere in an eval folder, data of
another fingerprint, files of two different runs, hostile model, group and note strings, a
predictions key or shard the data does not hold, a plot that is not a PNG, an --out holding a
user's file or a link, and a fuzz of the eval.json readers and the pages rendered from them.

Every refusal is one line (`hsi report: error: ...`, exit 2) and leaves --out as it was."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from json_fuzz import mutated, value_paths
from site_factory import CORNER, FINDER, checked_model_eval, report, shared_evaluation

from builder.core.errors import HsiError

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

HOSTILE = '<script>alert("x")</script>$\\frac{$'


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    return shared_evaluation(tmp_path_factory)


@pytest.fixture
def evals(evaluation, tmp_path) -> Path:
    """A copy of the eval folder for one test to break."""
    return Path(shutil.copytree(evaluation.evals, tmp_path / "evals"))


def refused(capsys, *eval_dirs, out: Path, data=None, before: set | None = None) -> str:
    """Run the report, expect a one-line refusal and --out unchanged; the message."""
    assert report(*eval_dirs, out=out, data=data) == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("hsi report: error: ") and "\n" not in message, message
    after = {p.relative_to(out).as_posix() for p in out.rglob("*")} if out.exists() else None
    assert after == before, "a refused report changed --out"
    return message


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def edit_predictions(path: Path, change_rows=None, change_metadata=None) -> None:
    """Rewrite a predictions.parquet: its rows (a list of dicts) and its `hsi` metadata, same schema."""
    table = pq.read_table(path)
    rows = table.to_pylist()
    metadata = json.loads(table.schema.metadata[b"hsi"])
    if change_rows:
        change_rows(rows)
    if change_metadata:
        change_metadata(metadata)
    import pyarrow as pa

    new = pa.Table.from_pylist(rows, schema=table.schema.remove_metadata())
    pq.write_table(new.replace_schema_metadata({b"hsi": json.dumps(metadata).encode()}), path)


def _link_model_folder(evals: Path, aside: Path) -> None:
    shutil.move(evals / FINDER, aside / FINDER)
    os.symlink(aside / FINDER, evals / FINDER)


def _link_file(relative: str):
    def plant(evals: Path, aside: Path) -> None:
        target = evals / FINDER / relative
        shutil.move(target, aside / target.name)
        os.symlink(aside / target.name, target)

    return plant


LINKS = {
    "model folder": _link_model_folder,
    "eval.json": _link_file("eval.json"),
    "predictions": _link_file("predictions.parquet"),
    "plots folder": _link_file("plots"),
    "plot": _link_file("plots/accuracy_vs_size.png"),
}


@pytest.mark.parametrize("where", sorted(LINKS))
def test_a_link_in_the_eval_folder_is_refused_never_followed(where, evals, evaluation, tmp_path, capsys):
    aside = tmp_path / "aside"
    aside.mkdir()
    LINKS[where](evals, aside)
    message = refused(capsys, evals, out=tmp_path / "site", data=evaluation.dataset)
    assert "link" in message


def test_an_eval_dir_that_is_a_link_is_refused(evaluation, tmp_path, capsys):
    os.symlink(evaluation.evals, tmp_path / "evals")
    assert "is a link" in refused(capsys, tmp_path / "evals", out=tmp_path / "site")


def test_data_of_another_fingerprint_than_the_eval_names_is_refused(evaluation, tmp_path, capsys):
    dataset = Path(shutil.copytree(evaluation.dataset, tmp_path / "data" / evaluation.dataset.name))
    edit_json(dataset / "_info.json", lambda manifest: manifest.update(fingerprint="0123456789abcdef"))
    message = refused(capsys, evaluation.evals, out=tmp_path / "site", data=dataset)
    eval_fingerprint = json.loads((evaluation.evals / CORNER / "eval.json").read_text())["data"]["fingerprint"]
    assert eval_fingerprint in message and "0123456789abcdef" in message and "no --data holds" in message


def test_data_that_is_no_dataset_is_refused(evaluation, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert "neither a release folder" in refused(
        capsys, evaluation.evals, out=tmp_path / "site", data=tmp_path / "empty"
    )


def test_an_eval_json_of_another_run_than_its_predictions_is_refused(evals, tmp_path, capsys):
    # the finder's report beside the corner rule's predictions: shown, it would put one model's name on another's images
    shutil.copy(evals / FINDER / "eval.json", evals / CORNER / "eval.json")
    assert "predictions of" in refused(capsys, evals, out=tmp_path / "site")
    shutil.copy(evals / FINDER / "predictions.parquet", evals / CORNER / "predictions.parquet")
    edit_json(evals / CORNER / "eval.json", lambda r: r["data"].update(fingerprint="0123456789abcdef"))
    assert "fingerprint" in refused(capsys, evals, out=tmp_path / "site")


def test_hostile_names_and_notes_are_escaped_on_every_page(evals, evaluation, tmp_path):
    group = "<b onmouseover=alert(1)>CoR"

    def hostile_report(data):
        data["model"]["spec"] = HOSTILE
        data["notes"] = ["<img src=x onerror=alert(2)>"]
        for section in ("by_group", "by_group_size"):
            for cell in data["metrics"][section]:
                cell["group"] = group if cell["group"] == "CoR" else cell["group"]

    def hostile_rows(rows):
        for row in rows:
            row["group"] = group if row["group"] == "CoR" else row["group"]

    def hostile_entry(data):
        data["model"]["spec"] = HOSTILE
        data["name"], data["model"]["architecture"] = HOSTILE, "<i onclick=alert(3)>net"

    edit_json(evals / CORNER / "eval.json", hostile_report)
    edit_json(evals / CORNER / "entry.json", hostile_entry)
    edit_predictions(evals / CORNER / "predictions.parquet", hostile_rows, lambda m: m["model"].update(spec=HOSTILE))
    site = tmp_path / "site"
    assert report(evals, out=site, data=evaluation.dataset) == 0
    for page in site.rglob("*.html"):
        text = page.read_text("utf-8")
        assert "<script" not in text and "<img src=x" not in text and "<b onmouseover" not in text, page
        assert "<i onclick" not in text, page
    model = (site / "models" / f"1-{CORNER}" / "index.html").read_text("utf-8")
    assert (
        "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in model and "&lt;img src=x onerror=alert(2)&gt;" in model
    )
    assert "&lt;b onmouseover=alert(1)&gt;CoR, 56 px" in model  # the gallery cell, titled from the predictions
    index = (site / "index.html").read_text("utf-8")
    assert "&lt;script&gt;" in index and "&lt;i onclick=alert(3)&gt;net" in index


def test_a_model_folder_or_key_that_cannot_be_a_file_name_is_refused(evals, evaluation, tmp_path, capsys):
    os.rename(evals / FINDER, evals / "bad<name>")
    assert "cannot name a file of the site" in refused(capsys, evals, out=tmp_path / "site")
    os.rename(evals / "bad<name>", evals / FINDER)

    def rename(rows):
        row = next(r for r in rows if r["group"] == "CoR")
        row["key"] = "../../escape"

    edit_predictions(evals / CORNER / "predictions.parquet", rename)
    message = refused(capsys, evals, out=tmp_path / "site", data=evaluation.dataset)
    assert "sample key" in message


def _first_cor_row(rows) -> dict:
    return next(r for r in rows if r["group"] == "CoR")  # every CoR sample is an error the gallery shows


def test_a_predictions_key_naming_no_sample_is_refused(evals, evaluation, tmp_path, capsys):
    edit_predictions(
        evals / CORNER / "predictions.parquet",
        lambda rows: _first_cor_row(rows).update(key="ILSVRC2012_val_00000099_top-right_56_random"),
    )
    message = refused(capsys, evals, out=tmp_path / "site", data=evaluation.dataset)
    assert "ILSVRC2012_val_00000099_top-right_56_random" in message and "no such sample" in message


def test_a_predictions_shard_the_manifest_does_not_list_is_refused(evals, evaluation, tmp_path, capsys):
    edit_predictions(
        evals / CORNER / "predictions.parquet", lambda rows: _first_cor_row(rows).update(shard="val-00042.tar")
    )
    # the corner rule's folder alone: with the finder beside it, the key's two shards are refused first
    message = refused(capsys, evals / CORNER, out=tmp_path / "site", data=evaluation.dataset)
    assert "val-00042.tar" in message and "does not list" in message
    assert "one data revision" in refused(capsys, evals, out=tmp_path / "site", data=evaluation.dataset)


def test_a_predictions_class_the_sample_does_not_have_is_refused(evals, evaluation, tmp_path, capsys):
    def relabel(rows):
        row = _first_cor_row(rows)
        row["label_class"] = row["cls"] = 7  # the corner rule's error stays an error, under another true class

    edit_predictions(evals / CORNER / "predictions.parquet", relabel)
    assert "its json in the data class" in refused(capsys, evals, out=tmp_path / "site", data=evaluation.dataset)


def test_a_plot_that_is_not_a_png_is_refused(evals, tmp_path, capsys):
    (evals / FINDER / "plots" / "accuracy_vs_size.png").write_text("<html><script>alert(1)</script></html>")
    assert "is not a PNG image" in refused(capsys, evals, out=tmp_path / "site")


def test_an_out_holding_a_users_file_is_refused_and_left_alone(evaluation, tmp_path, capsys):
    out = tmp_path / "site"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert "holds no _written.json" in refused(capsys, evaluation.evals, out=out, before={"notes.txt"})
    assert (out / "notes.txt").read_text() == "mine"


def test_a_users_edit_of_a_page_is_never_overwritten(evaluation, tmp_path, capsys):
    out = tmp_path / "site"
    assert report(evaluation.evals, out=out) == 0
    (out / "index.html").write_text("my own notes")
    before = {p.relative_to(out).as_posix() for p in out.rglob("*")}
    message = refused(capsys, evaluation.evals, out=out, before=before)
    assert "index.html" in message and "never overwritten" in message
    assert (out / "index.html").read_text() == "my own notes"


def test_a_link_planted_in_out_is_refused_and_nothing_is_written_through_it(evaluation, tmp_path, capsys):
    out = tmp_path / "site"
    assert report(evaluation.evals, out=out) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(out / "models")
    os.symlink(elsewhere, out / "models")
    before = {p.relative_to(out).as_posix() for p in out.rglob("*")}
    assert "link" in refused(capsys, evaluation.evals, out=out, before=before)
    assert not any(elsewhere.iterdir())


def test_fuzzed_eval_json_is_shown_or_refused_in_one_line_never_a_traceback(evaluation, tmp_path):
    """Seeded mutations of a real eval.json through every reader and page renderer the site uses."""
    from cards.site.figures import accuracy_vs_size, png_bytes, position_heat_maps
    from cards.site.gallery import sample_gallery
    from cards.site.pages import Board, index_page, model_page
    from evaluation.predicting.predictions import read_predictions

    folder = evaluation.evals / CORNER
    base = json.loads((folder / "eval.json").read_text())
    frame, _ = read_predictions(folder / "predictions.parquet")
    gallery = sample_gallery(frame)
    paths = [p for p in value_paths(base) if p]
    junk = [None, "", "x", "<script>", -1, 0, 1.5, 1e308, True, [], {}, [1], {"value": "a"}]
    rng = random.Random(25)
    path = tmp_path / "eval.json"
    outcomes = {"shown": 0, "refused": 0}
    for trial in range(200):
        path.write_text(json.dumps(mutated(base, rng, junk, paths)))
        try:
            model = checked_model_eval(path, folder, frame)
        except HsiError:
            outcomes["refused"] += 1
            continue
        model_page(
            model, gallery, {t.key: ["x.jpg"] for c in gallery for t in (*c.errors, *c.successes)}, None, None, ""
        )
        index_page([Board(model.revision, [model], None, None)], "")
        if trial % 25 == 0:  # the figures are slower: a share of the trials
            for figure in (accuracy_vs_size([model]), position_heat_maps([model])):
                if figure is not None:
                    png_bytes(figure)
        outcomes["shown"] += 1
    assert outcomes["shown"] > 20 and outcomes["refused"] > 20, outcomes
