"""Zero-shot CLIP end to end: `hsi eval --model openclip:...` and `hsi.evaluate` on the tiny models,
loaded through the real code paths, give the same predictions; one pass scores every prompt set;
eval.json carries a metrics block per set and the paired differences, recomputed from the
predictions alone; the text classifier cache is read on a second run and missed for new templates."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from recompute import recompute

from builder.core.classes import class_of
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.predicting.predictions import read_predictions
from evaluation.zero_shot import text_classifier
from evaluation.zero_shot.published import simple_templates
from evaluation.zero_shot.record import SET_COLUMNS, set_column
from evaluation.zero_shot.templates import REMOVED_FOR_SCALE
from hsi.cli import main

QUICK = ["--workers", "0", "--no-progress", "--bootstrap", "100"]
QUICK_API = {"workers": 0, "progress": False, "bootstrap": BootstrapSettings(resamples=100), "announce": lambda _: None}
DEFAULT_SETS = ["openai", "simple", "no-scale"]


def run_cli(data: Path, spec: str, out: Path, *extra: str) -> Path:
    """`hsi eval DATA --model SPEC --out OUT` (quiet, 100 resamples): the model folder it wrote."""
    assert main(["eval", str(data), "--model", spec, "--out", str(out), *QUICK, *extra]) == 0
    (folder,) = [path.parent for path in out.glob("*/eval.json")]
    return folder


def prediction_columns(sets) -> list[str]:
    return ["key", *SET_COLUMNS, *[set_column(column, name) for name in sets for column in SET_COLUMNS]]


def saved_predictions(evaluation, folder: Path) -> pd.DataFrame:
    frame, _ = read_predictions(evaluation.save(folder) / "predictions.parquet")
    return frame


def assert_same_predictions(a: pd.DataFrame, b: pd.DataFrame, sets) -> None:
    columns = prediction_columns(sets)
    for column in columns:
        assert [_plain(v) for v in a[column]] == [_plain(v) for v in b[column]], column


def _plain(value):
    return [float(x) for x in value] if hasattr(value, "__len__") and not isinstance(value, str) else value


def test_the_cli_and_the_api_give_identical_predictions_over_the_datas_own_classes(
    ten_set, ten_wnids, tiny_spec, tiny_openclip, tmp_path
):
    import hsi

    folder = run_cli(ten_set, tiny_spec, tmp_path / "cli")
    cli, metadata = read_predictions(folder / "predictions.parquet")
    report = json.loads((folder / "eval.json").read_text())
    # the -10 subset is scored over its own ten classes, with CLIP's curated names, and the report says so
    assert report["label_space"]["classes"] == 10 and report["label_space"]["name"] == "declared"
    section = report["zero_shot"]
    assert section["class_names"] == "clip-curated" and section["label_space_source"] == "the config's 10 classes"
    assert section["order"] == DEFAULT_SETS and section["reference"] == "openai"
    assert [section["sets"][name]["templates"] for name in DEFAULT_SETS] == [80, 7, 72]
    assert cli[cli["status"] == "ok"]["pred_class"].isin([class_of(wnid).index for wnid in ten_wnids]).all()
    # the first set fills the plain columns
    for column in SET_COLUMNS:
        assert [_plain(v) for v in cli[column]] == [_plain(v) for v in cli[set_column(column, "openai")]]

    module = hsi.zero_shot_classifier(
        tiny_openclip.model, tiny_openclip.tokenizer, templates="openai,simple,no-scale", label_space=ten_wnids
    )
    api = hsi.evaluate(module, ten_set, **QUICK_API)
    spec = hsi.evaluate(tiny_spec, ten_set, templates="openai,simple,no-scale", **QUICK_API)
    for evaluation, where in ((api, "api"), (spec, "spec")):
        assert_same_predictions(saved_predictions(evaluation, tmp_path / where), cli, DEFAULT_SETS)
        assert evaluation.metrics == report["metrics"]
        assert evaluation.to_dict()["zero_shot"]["sets"] == section["sets"]
        assert evaluation.to_dict()["paired_differences"] == report["paired_differences"]

    markdown = (folder / "eval.md").read_text()
    assert (
        "## Zero-shot prompt sets" in markdown and "### `no-scale` minus `openai`: top-1, paired by sample" in markdown
    )
    for template, why in REMOVED_FOR_SCALE:  # the templates no-scale leaves out, each with why
        assert f"| {template} | {why} |" in markdown


def test_each_set_has_its_metrics_block_and_every_block_is_recomputed_from_the_predictions(
    ten_set, tiny_spec, tmp_path
):
    folder = run_cli(ten_set, tiny_spec, tmp_path / "run", "--templates", "simple,no-scale")
    report = json.loads((folder / "eval.json").read_text())
    frame, _ = read_predictions(folder / "predictions.parquet")
    ok = frame[frame["status"] == "ok"]
    for name in ("simple", "no-scale"):
        block = report["zero_shot"]["sets"][name]["metrics"]
        correct = ok[set_column("pred_class", name)] == ok["label_class"]
        assert block["samples"] == len(ok) and block["overall"]["top1"]["value"] == round(float(correct.mean()), 6)
    assert report["metrics"] == report["zero_shot"]["sets"]["simple"]["metrics"]  # the reference is the first
    assert folder.name.endswith("-prompts-simple_no-scale")

    again = recompute(folder / "predictions.parquet", tmp_path / "again")
    for key in ("metrics", "zero_shot", "paired_differences"):
        assert again[key] == report[key], key


def test_two_identical_prompt_sets_differ_by_exactly_zero_with_a_zero_width_interval(ten_set, tiny_spec, tmp_path):
    own = tmp_path / "twins.yaml"
    own.write_text(yaml.safe_dump({"first": list(simple_templates()), "second": list(simple_templates())}))
    report = json.loads(
        (run_cli(ten_set, tiny_spec, tmp_path / "run", "--templates", str(own)) / "eval.json").read_text()
    )
    sets = report["zero_shot"]["sets"]
    assert sets["first"]["metrics"] == sets["second"]["metrics"]
    (comparison,) = report["paired_differences"]
    assert (comparison["set"], comparison["reference"]) == ("second", "first")
    cells = [comparison["overall"], *comparison["by_group"], *comparison["by_group_size"]]
    assert len(comparison["by_group_size"]) == 4 * 3  # every group x size of the -10 subset
    for cell in cells:
        assert cell["difference"]["value"] == 0 and cell["difference"]["low"] == 0 and cell["difference"]["high"] == 0


def planted(path: Path, right: str, wrong: str, wrong_group: str) -> Path:
    """The predictions at `path` with set `right` (and the plain columns) right on every sample and
    set `wrong` right except on `wrong_group`, where it names the next class."""
    table = pq.read_table(path)
    labels = table.column("label_class").to_pylist()
    groups = table.column("group").to_pylist()
    wrong_labels = [(label + 1) % 1000 if group == wrong_group else label for label, group in zip(labels, groups)]
    columns = {}
    for name, chosen in (("", labels), (right, labels), (wrong, wrong_labels)):
        pred = set_column("pred_class", name) if name else "pred_class"
        top5 = set_column("top5_class", name) if name else "top5_class"
        columns[pred] = pa.array(chosen, pa.int64())
        columns[top5] = pa.array([[label] for label in chosen], pa.list_(pa.int64()))
        for column in ("top5_prob", "prob_label", "prob_background_class", "prob_paired_class"):
            name_of = set_column(column, name) if name else column
            columns[name_of] = pa.nulls(len(labels), table.schema.field(name_of).type)
    for name, values in columns.items():
        table = table.set_column(table.schema.get_field_index(name), name, values)
    out = path.with_name("planted.parquet")
    pq.write_table(table, out)
    return out


def test_a_planted_difference_is_recovered_from_the_predictions_alone(ten_set, tiny_spec, tmp_path):
    own = tmp_path / "pair.yaml"
    own.write_text(yaml.safe_dump({"right": ["a photo of a {}."], "wrong": ["a {}."]}))
    folder = run_cli(ten_set, tiny_spec, tmp_path / "run", "--templates", str(own))
    corner = "top-right/paired"  # the -10 subset's small-corner-on-a-paired-background group
    path = planted(folder / "predictions.parquet", "right", "wrong", corner)
    report = recompute(path, tmp_path / "planted")
    sets = report["zero_shot"]["sets"]
    assert sets["right"]["metrics"]["overall"]["top1"]["value"] == 1.0
    frame, _ = read_predictions(path)
    share = float((frame[frame["status"] == "ok"]["group"] == corner).mean())
    assert 0 < share < 1
    assert sets["wrong"]["metrics"]["overall"]["top1"]["value"] == pytest.approx(1 - share, abs=1e-6)
    (comparison,) = report["paired_differences"]
    assert comparison["overall"]["difference"]["value"] == pytest.approx(-share, abs=1e-6)
    for cell in [*comparison["by_group"], *comparison["by_group_size"]]:
        expected = -1.0 if cell["group"] == corner else 0.0
        assert (cell["difference"]["value"], cell["difference"]["low"], cell["difference"]["high"]) == (
            expected,
            expected,
            expected,
        ), cell
    markdown = (tmp_path / "planted" / "eval.md").read_text()
    assert f"| {corner} | 56 | 0.000 | 1.000 | -1.000 [-1.000, -1.000] |" in markdown


def test_the_text_classifier_cache_is_read_on_a_second_run_and_missed_for_new_templates(
    ten_set, tiny_spec, tmp_path, monkeypatch, capsys, _cache_in_tmp
):
    embedded: list[list[str]] = []
    original = text_classifier.embed_templates

    def counted(encoders, class_names, templates, batch_size=text_classifier.TEXT_BATCH):
        embedded.append(list(templates))
        return original(encoders, class_names, templates, batch_size)

    monkeypatch.setattr(text_classifier, "embed_templates", counted)
    first = run_cli(ten_set, tiny_spec, tmp_path / "first", "--templates", "simple")
    assert embedded == [list(simple_templates())] and len(list(_cache_in_tmp.iterdir())) == 1
    second = run_cli(ten_set, tiny_spec, tmp_path / "second", "--templates", "simple")
    assert len(embedded) == 1  # read from the cache: no text pass
    one, two = (json.loads((f / "eval.json").read_text()) for f in (first, second))
    assert one["metrics"] == two["metrics"] and one["zero_shot"] == two["zero_shot"]

    own = tmp_path / "own.yaml"
    own.write_text(yaml.safe_dump({"mine": ["a blurry photo of a {}.", "a photo of a small {}."]}))
    run_cli(ten_set, tiny_spec, tmp_path / "third", "--templates", f"simple,{own}")
    assert embedded[1:] == [["a blurry photo of a {}.", "a photo of a small {}."]]  # only the new set's texts

    own.write_text(yaml.safe_dump({"mine": ["a sketch of a {}."]}))  # the same set name, other templates
    args = ["eval", str(ten_set), "--model", tiny_spec, "--out", str(tmp_path / "third"), *QUICK]
    assert main([*args, "--templates", f"simple,{own}"]) == 2
    assert "holds an evaluation of openclip:hsi-tiny-clip:tiny-clip.safetensors with another prompt sets" in (
        capsys.readouterr().err
    )
    assert main([*args, "--templates", f"simple,{own}", "--overwrite"]) == 0
    assert embedded[2:] == [["a sketch of a {}."]]


def test_all_1000_classes_on_a_full_config_with_the_names_that_tie(paper_set, flat_parts, tiny_spec, tmp_path):
    folder = run_cli(paper_set, tiny_spec, tmp_path / "run", "--templates", "simple", "--parts", str(flat_parts[0]))
    report = json.loads((folder / "eval.json").read_text())
    assert report["label_space"] == {
        "classes": 1000,
        "description": "argmax over all 1000 ImageNet classes",
        "name": "imagenet",
    }
    assert report["zero_shot"]["label_space"] == {"classes": 1000, "all_imagenet": True}
    assert report["zero_shot"]["repeated_names"] == {"missile": [657, 744], "sunglasses": [836, 837]}
    assert any("sunglasses" in note and "tie" in note for note in report["notes"])
    assert report["paired_differences"] == [] and "removed_for_scale" not in report["zero_shot"]
    assert report["background_only"]["images"] == len(flat_parts[1])  # the backgrounds pass: the reference set


def test_an_hf_clip_folder_that_centre_crops_is_evaluated_with_its_crop_and_a_warning(ten_set, tmp_path):
    from tiny_clip import save_tiny_hf_clip

    folder = save_tiny_hf_clip(tmp_path / "cropping-clip", shortest_edge=36)
    result = run_cli(ten_set, f"hf-clip:{folder}", tmp_path / "run", "--templates", "simple")
    report = json.loads((result / "eval.json").read_text())
    assert report["model"]["spec"] == "hf-clip:cropping-clip" and report["model"]["checkpoint"] == "model.safetensors"
    assert report["preprocessing"]["cropped"] and report["preprocessing"]["crop_pct"] == pytest.approx(32 / 36)
    assert any("centre-crops the canvas (resize to 36, crop 32)" in note for note in report["notes"])
    assert "**Preprocessing: centre-cropped on purpose**" in (result / "eval.md").read_text()
