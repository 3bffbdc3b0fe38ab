"""The card's YAML is data checked with datasets' own parsers: configs, defaults, declared features."""

from __future__ import annotations

import pytest
import yaml
from manifest_io import read_manifest
from release_factory import make_composed_dataset

from builder.core.stage import RunOptions
from builder.formats.composites import COMPOSITE_FIELDS
from cards.metadata import card_metadata, check_card, composite_features, unique_label_names
from cards.render import render_card
from cards.summary import CardError, ConfigSummary


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    main = make_composed_dataset(root, splits={"test": 6, "train": 3})
    ten = make_composed_dataset(root, config="hard-spurious-imagenet-10", splits={"test": 4}, num_classes=2)
    return [
        ConfigSummary("hard-spurious-imagenet", read_manifest(main), {"ok": True}, ("previews/a.png",), True),
        ConfigSummary("hard-spurious-imagenet-10", read_manifest(ten), {"ok": True}, (), False),
    ]


def header(text: str) -> dict:
    return yaml.safe_load(text.split("---\n")[1])


def test_card_yaml_declares_configs_splits_and_features(summaries):
    text = render_card(summaries, version="v1.2.0")
    meta = header(text)
    assert meta["license"] == "other" and meta["license_name"] == "imagenet-terms-of-access"
    assert meta["license_link"].startswith("https://image-net.org")
    assert meta["size_categories"] == ["n<1K"] and meta["task_categories"] == ["image-classification"]
    assert [c["config_name"] for c in meta["configs"]] == ["hard-spurious-imagenet", "hard-spurious-imagenet-10"]
    assert [c.get("default", False) for c in meta["configs"]] == [True, False]
    assert meta["configs"][0]["data_files"] == [
        {
            "split": "test",
            "path": ["data/hard-spurious-imagenet/test-00000.tar", "data/hard-spurious-imagenet/test-00001.tar"],
        },
        {"split": "train", "path": ["data/hard-spurious-imagenet/train-00000.tar"]},
    ]
    info = {i["config_name"]: i for i in meta["dataset_info"]}
    assert info["hard-spurious-imagenet-10"]["splits"] == [
        {"name": "test", "num_bytes": summaries[1].manifest["splits"]["test"]["shards"][0]["bytes"], "num_examples": 4}
    ]
    json_struct = next(f for f in info["hard-spurious-imagenet"]["features"] if f["name"] == "json")["struct"]
    assert [f["name"] for f in json_struct] == list(COMPOSITE_FIELDS)
    assert check_card(text, summaries) == meta
    assert "| CeO |" in text and "@article{fatima2025corner" in text and "## Changelog" in text


def test_features_match_the_schema_and_label_names(summaries):
    from datasets import ClassLabel, Image, Value

    features = composite_features(["tench", "goldfish"])
    assert features["jpg"] == Image() and features["cls"] == ClassLabel(names=["tench", "goldfish"])
    assert features["json"]["size"] == Value("int64") and features["json"]["tier"] == Value("string")
    assert unique_label_names(["crane", "tench", "crane"]) == ["crane (0)", "tench", "crane (2)"]


def test_duplicate_yaml_keys_are_rejected(summaries):
    text = render_card(summaries)
    broken = text.replace("license: other\n", "license: other\nlicense: mit\n", 1)
    with pytest.raises(CardError, match="duplicate"):
        check_card(broken)


def test_exactly_one_default(summaries):
    both = [ConfigSummary(s.name, s.manifest, s.validation, s.previews, True) for s in summaries]
    with pytest.raises(CardError, match="exactly one"):
        card_metadata(both)
    text = render_card(summaries).replace("  default: true\n", "", 1)
    with pytest.raises(CardError, match="default"):
        check_card(text)


def test_card_without_features_or_with_wrong_ones_is_refused(summaries):
    text = render_card(summaries)
    meta = header(text)
    body = text.split("---\n", 2)[2]
    no_info = dict(meta)
    no_info.pop("dataset_info")
    with pytest.raises(CardError, match="no declared features"):
        check_card(f"---\n{yaml.safe_dump(no_info)}---\n{body}")
    wrong = yaml.safe_load(yaml.safe_dump(meta))
    wrong["dataset_info"][0]["features"][2]["dtype"] = "int64"  # cls as a plain int, names lost
    with pytest.raises(CardError, match="differ from the schema"):
        check_card(f"---\n{yaml.safe_dump(wrong)}---\n{body}", summaries)
    with pytest.raises(CardError, match="no YAML header"):
        check_card("# just markdown\n")


def test_card_tables_for_new_positions_and_backgrounds(tmp_path):
    """Groups such as top/gray hold a slash, and composites outside the paper's groups have
    no tier: both must come out as readable table rows."""
    from parts_factory import fake_images, write_parts

    from builder.compose.stage import compose_dataset

    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(["n01440764", "n01443537"], per_class=1)})
    overrides = {"positions": ["top", "left"], "backgrounds": ["original", "gray"], "sizes": [56, 84]}
    composed = compose_dataset(
        parts, "hard-spurious-imagenet", tmp_path / "out", overrides=overrides, options=RunOptions(progress=False)
    )
    summary = ConfigSummary(composed.dataset_dir.name, composed.manifest, {"ok": True}, (), True)
    text = render_card([summary], version="v0.1.0")
    assert "| group | 56 px | 84 px | total |" in text
    for group in ("top/gray", "top/original", "left/gray", "left/original"):
        assert f"| {group} | 2 | 2 | 4 |" in text
    assert "| none | 16 |" in text
