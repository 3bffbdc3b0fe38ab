"""Releases composed before a composite field existed still read and verify (#46): a schema 3 config
(no `background_status`) is checked against the fields schema 3 had, by `hsi verify`, `load_dataset`
(the features its card declares), croissant and `stream()`, which reads its backgrounds as own."""

from __future__ import annotations

import json

import pytest
from release_factory import make_composed_dataset

from builder.formats.stream import stream
from cards.release import build_release, load_composed
from hsi.cli import main


@pytest.fixture(scope="module")
def older(tmp_path_factory):
    root = tmp_path_factory.mktemp("older")
    dataset = make_composed_dataset(root / "ds", splits={"test": 6}, shard_size=3, schema_version=3)
    return dataset, build_release(root / "rel" / "hard-spurious-imagenet", [dataset], version="v1.0.0")


def test_a_schema_3_release_verifies_and_its_card_declares_schema_3(older, capsys):
    dataset, folder = older
    assert main(["verify", str(folder)]) == 0, capsys.readouterr()
    card = (folder / "README.md").read_text()
    assert "background_fill_score" in card.split("---")[1] and "background_status" not in card.split("---")[1]
    croissant = json.loads((folder / "croissant.json").read_text())
    fields = [f["@id"] for rs in croissant["recordSet"] for f in rs["field"]]
    assert "hard-spurious-imagenet/metadata/background_fill_score" in fields
    assert not [f for f in fields if f.endswith("background_status")]


def test_a_schema_3_release_loads_and_streams_its_backgrounds_as_own(older, tmp_path):
    dataset, folder = older
    loaded = load_composed(folder, split="test", config="hard-spurious-imagenet", cache_dir=str(tmp_path / "c"))
    assert loaded.num_rows == 6 and "background_status" not in loaded[0]["json"]
    assert [s["background_status"] for s in stream(folder, split="test")] == ["own"] * 6
    assert load_composed(dataset, split="test", cache_dir=str(tmp_path / "d")).num_rows == 6


def test_a_card_that_declares_another_schemas_fields_is_named(tmp_path, capsys):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3}, shard_size=3)
    folder = build_release(tmp_path / "rel" / "hard-spurious-imagenet", [dataset], version="v1.0.0")
    card = folder / "README.md"
    text = card.read_text()
    declared = "    - name: background_status\n      dtype: string\n"
    assert text.count(declared) == 1
    card.write_text(text.replace(declared, ""))  # the schema 3 features, on schema 4 data
    assert main(["verify", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "declares other features (class names) than data/hard-spurious-imagenet/_info.json" in out
