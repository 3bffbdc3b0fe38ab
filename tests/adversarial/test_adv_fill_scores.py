"""Hostile fill records: a parts json whose fill_scores are not four finite scores, a schema-2 part
without its fill mask, a fill mask that misses erased pixels, and a parts manifest whose fill-score
summary is malformed. Each is a named failure row or a one-line error, never a crash."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from manifest_io import read_manifest
from parts_factory import fake_images, write_parts

from builder.core.errors import InputError
from builder.core.manifest import Manifest, write_json_atomic
from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from builder.formats.fill_scores import check_fill_scores, score_fill
from builder.formats.parts import decode_mask, encode_mask
from validation.integrity import check_dataset

SHARD = "val-00000.tar"


@pytest.fixture
def parts(tmp_path):
    folder = tmp_path / "parts"
    write_parts(folder, {"val": fake_images(["n01443537", "n02437312"], per_class=2)}, shard_size=4)
    return folder


def rewrite_first(parts, change) -> str:
    """Apply `change(members) -> members` to the first sample and re-record the shard's sha256."""
    samples = list(iter_shard(parts / SHARD))
    key, members = samples[0]
    stats = write_shard(parts / SHARD, [(key, change(dict(members))), *samples[1:]])
    manifest = read_manifest(parts)
    manifest["splits"]["val"]["shards"][0].update(bytes=stats.bytes, sha256=stats.sha256)
    write_json_atomic(parts / "_info.json", manifest)
    return key


def with_json(members, **fields):
    meta = json.loads(members["json"])
    meta.update(fields)
    return {**members, "json": json.dumps(meta, sort_keys=True).encode()}


def reasons(parts) -> list[tuple[str, str | None]]:
    return sorted((f.reason, f.key) for f in check_dataset(parts).failures)


@pytest.mark.parametrize(
    "bad",
    [
        {"texture": float("nan"), "seam": 1.0, "step": 0.1, "score": 0.5},
        {"texture": "high", "seam": 1.0, "step": 0.1, "score": 0.5},
        {"texture": -1.0, "seam": 1.0, "step": 0.1, "score": 0.5},
        {"texture": 1.0, "seam": 1.0},
        [1, 2, 3, 4],
        "excellent",
    ],
)
def test_fill_scores_that_are_not_four_finite_scores_are_a_named_failure(parts, bad):
    key = rewrite_first(parts, lambda m: with_json(m, fill_scores=bad))
    assert reasons(parts) == [("fill-scores", key)]


def test_a_schema_2_part_without_its_fill_mask_and_a_mask_missing_erased_pixels_are_named(parts):
    key = rewrite_first(parts, lambda m: {name: data for name, data in m.items() if name != "fill.png"})
    assert reasons(parts) == [("members", key)]

    # the same part, its fill mask emptied: the erased pixels were replaced, the mask must say so
    def empty_fill(members):
        erase = decode_mask(members["erase.png"])
        return {**members, "fill.png": encode_mask(np.zeros_like(erase))}

    write_parts(parts, {"val": fake_images(["n01443537", "n02437312"], per_class=2)}, shard_size=4)
    key = rewrite_first(parts, empty_fill)
    assert reasons(parts) == [("fill-mask", key)]


def test_a_schema_1_part_reads_with_its_erase_mask_as_its_fill(parts):
    def schema_1(members):
        meta = json.loads(members["json"])
        meta["schema_version"] = 1
        del meta["fill_scores"]
        kept = {name: data for name, data in members.items() if name != "fill.png"}
        return {**kept, "json": json.dumps(meta, sort_keys=True).encode()}

    rewrite_first(parts, schema_1)
    assert reasons(parts) == []


@pytest.mark.parametrize("change", ["a string", "a negative count", "null"])
def test_a_malformed_manifest_summary_is_a_one_line_error(parts, change):
    manifest = read_manifest(parts)
    entry = manifest["splits"]["val"]["fill_scores"]
    manifest["splits"]["val"]["fill_scores"] = {"a string": "good", "a negative count": {**entry, "scored": -1}}.get(
        change
    )
    write_json_atomic(parts / "_info.json", manifest)
    with pytest.raises(InputError) as caught:
        Manifest.read(parts)
    assert "splits.val.fill_scores" in str(caught.value) and "\n" not in str(caught.value)


def test_a_nan_median_in_the_summary_is_refused(parts):
    manifest = read_manifest(parts)
    manifest["splits"]["val"]["fill_scores"]["score"]["median"] = math.nan
    (parts / "_info.json").write_text(json.dumps(manifest))  # json writes NaN, a stranger's file may hold it
    with pytest.raises(InputError, match="splits.val.fill_scores.score"):
        Manifest.read(parts)


def test_nothing_filled_has_no_scores_and_everything_filled_scores_0():
    canvas = np.zeros((224, 224, 3), np.uint8)
    assert score_fill(canvas, np.zeros((224, 224), bool)) is None
    assert score_fill(canvas, np.ones((224, 224), bool)).score == 0.0
    assert check_fill_scores(None, "json") is None
    with pytest.raises(ValueError, match="json: fill_scores.score must be a finite number"):
        check_fill_scores({"texture": 1, "seam": 1, "step": 0, "score": math.inf}, "json")
