"""The card's parts config and fill scores (issue 31): the parts config's YAML entry and features, its
section's cost and fill-score summary, and a composed config's background fill scores when (and only
when) its compose manifest carries a summary in the parts manifest's shape."""

from __future__ import annotations

import copy

import pytest
import yaml
from manifest_io import read_manifest
from parts_factory import fake_images, write_parts
from release_factory import make_composed_dataset

from builder.formats.fill_scores import summarise_fill_scores
from cards.metadata import check_card
from cards.parts_card import PartsSummary, parts_features
from cards.render import render_card
from cards.summary import CardError, ConfigSummary

FILLS = summarise_fill_scores(
    [
        {"texture": 0.2, "seam": 2.0, "step": 1.0, "score": 0.05},
        {"texture": 1.0, "seam": 1.0, "step": 0.0, "score": 1.0},
    ]
    + [None]
)


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    manifest = read_manifest(make_composed_dataset(root, splits={"test": 6}))
    return ConfigSummary("hard-spurious-imagenet", manifest, {"ok": True}, (), True)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("parts") / "parts"
    return PartsSummary(write_parts(folder, {"val": fake_images(["n01443537"], per_class=3)}, shard_size=2))


def header(text: str) -> dict:
    return yaml.safe_load(text.split("---\n")[1])


def test_the_parts_config_is_declared_last_and_never_default(summary, parts):
    text = render_card([summary], parts=parts)
    meta = header(text)
    assert [c["config_name"] for c in meta["configs"]] == ["hard-spurious-imagenet", "parts"]
    assert "default" not in meta["configs"][1]
    assert meta["configs"][1]["data_files"] == [
        {"split": "val", "path": ["data/parts/val-00000.tar", "data/parts/val-00001.tar"]}
    ]
    info = {i["config_name"]: i for i in meta["dataset_info"]}["parts"]
    assert info["splits"] == [{"name": "val", "num_bytes": parts.num_bytes(), "num_examples": 3}]
    assert check_card(text, [summary], parts) == meta
    assert f"**{parts.num_bytes() / 3 * 1000 / 1e6:.1f} MB per 1,000 parts**" in text


def test_a_card_whose_parts_features_differ_is_refused(summary, parts):
    text = render_card([summary], parts=parts)
    broken = text.replace("name: canvas.npy", "name: canvas_npy", 1)
    assert broken != text
    with pytest.raises(CardError, match="parts"):
        check_card(broken, [summary], parts)
    assert "canvas.npy" in parts_features()


def test_fill_scores_of_a_composed_config_are_shown_only_when_its_manifest_has_them(summary):
    plain = render_card([summary])
    assert "fill scores" not in plain.lower()
    scored = copy.deepcopy(summary.manifest)
    scored["splits"]["test"]["fill_scores"] = FILLS
    text = render_card([ConfigSummary(summary.name, scored, summary.validation, (), True)])
    assert "| config | default | splits | samples | classes | background fill scores |" in text
    assert "test: median score 0.525, 50% under 0.5" in text
    section = text[text.index("### Fill scores of the backgrounds") :]
    assert "| texture | 0.600 | 0.280 |" in section and "2 backgrounds scored, 1 with nothing filled" in section
    assert "50.0% score under the poor-fill threshold 0.5" in section
