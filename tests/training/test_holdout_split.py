"""The holdout split is carved by source image: no photo (nor its background) on both sides."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from builder.compose.spec import load_variant
from builder.core.config import ConfigError
from builder.core.shard_read import iter_shard


def metas(dataset, split):
    manifest = json.loads((dataset / "_info.json").read_text())
    return [
        json.loads(m["json"]) for name in manifest["splits"][split]["filenames"] for _, m in iter_shard(dataset / name)
    ]


def test_holdout_never_shares_a_source_image_and_is_group_balanced(small_planted):
    train, val, test = (metas(small_planted, s) for s in ("train", "val", "test"))
    sources = {
        s: {m["source_id"] for m in ms} | {m["background_source_id"] for m in ms}
        for s, ms in (("train", train), ("val", val), ("test", test))
    }
    assert val and not sources["train"] & sources["val"] and not sources["val"] & sources["test"]
    kinds = defaultdict(set)
    for m in val:
        kinds[m["source_id"]].add(m["background"])
    assert all(k == {"original", "paired"} for k in kinds.values())  # every val photo on both backgrounds
    assert {m["wnid"] for m in val} == {m["wnid"] for m in train}
    manifest = json.loads((small_planted / "_info.json").read_text())
    assert manifest["spec"]["holdout"] == {"from": "train", "fraction": 0.34, "name": "val"}
    assert manifest["splits"]["val"]["num_samples"] == len(val)


def test_holdout_is_opt_in_and_validated():
    assert "holdout" not in load_variant("hard-spurious-imagenet-10").to_json()
    spec = load_variant("hard-spurious-imagenet-10", {"holdout": "train:0.1:val"})
    assert spec.output_splits == ("train", "test", "val")
    with pytest.raises(ConfigError, match="holdout.*not an output split"):
        load_variant("hard-spurious-imagenet-10", {"holdout": "nope:0.1:val"})
    with pytest.raises(ConfigError, match="holdout.*fraction"):
        load_variant("hard-spurious-imagenet", {"holdout": "val:1.5:held"})
