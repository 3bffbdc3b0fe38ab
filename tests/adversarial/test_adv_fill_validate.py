"""Hostile `fill_scores` in a parts json (NaN, a string, missing keys, a list, infinity, a negative
score) and a hostile manifest summary: `hsi validate` records a failure row naming the part and
carries on with the other parts' figures; it never crashes (issue 31)."""

from __future__ import annotations

import json

import pytest
from parts_factory import compose_args, fake_images, rehash_parts, rewrite_fill_scores, write_parts

from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from hsi.cli import main

WNIDS = ["n01443537", "n02437312"]
GOOD = {"texture": 0.2, "seam": 1.0, "step": 0.0, "score": 0.2}
HOSTILE = {
    "nan": {**GOOD, "score": float("nan")},
    "string": {**GOOD, "texture": "0.2"},
    "missing-keys": {"score": 0.1},
    "extra-key": {**GOOD, "sharpness": 1.0},
    "a-list": [0.2, 1.0, 0.0, 0.2],
    "a-string": "poor",
    "infinity": {**GOOD, "seam": float("inf")},
    "negative": {**GOOD, "score": -1.0},
    "a-bool": {**GOOD, "step": True},
}


def hostile_parts(tmp_path, value):
    images = fake_images(WNIDS, per_class=2)
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=2)
    victim = images[1].source_id
    rewrite_fill_scores(parts, {victim: value, images[0].source_id: GOOD})  # json.dumps writes NaN as NaN
    return parts, victim, images


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_fill_scores_in_a_parts_folder_is_one_row(tmp_path, capsys, name):
    parts, victim, images = hostile_parts(tmp_path, HOSTILE[name])
    out = tmp_path / "report"
    assert main(["validate", "--parts", str(parts), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{victim}: fill-scores: json: fill_scores" in err
    report = json.loads((out / "validation.json").read_text())
    rows = report["integrity"]["failures"]
    assert [(row["reason"], row["key"]) for row in rows] == [("fill-scores", victim)]  # once, not twice
    figures = report["fill_quality"]["splits"]["val"]
    assert (figures["scored"], figures["unscored"], figures["invalid"]) == (3, 0, 1)
    assert victim not in [part["key"] for part in report["fill_quality"]["worst"]]
    assert report["fill_quality"]["worst"][0]["key"] == images[0].source_id  # the planted 0.2


@pytest.mark.parametrize("name", ["nan", "missing-keys", "a-string"])
def test_a_hostile_fill_scores_behind_a_composed_dataset_is_one_row(tmp_path, capsys, name):
    images = fake_images(WNIDS, per_class=2)
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=2)
    assert main(compose_args(parts, tmp_path / "out", "--no-progress")) == 0
    victim = images[3].source_id
    rewrite_fill_scores(parts, {victim: HOSTILE[name]})  # after compose: the fingerprint stays
    dataset = tmp_path / "out" / "hard-spurious-imagenet"
    assert main(["validate", str(dataset), "--parts", str(parts), "--no-previews"]) == 1
    report = json.loads((dataset / "validation.json").read_text())
    assert [(row["reason"], row["key"]) for row in report["integrity"]["failures"]] == [("fill-scores", victim)]
    assert report["fill_quality"]["splits"]["val"]["invalid"] == 1
    assert "fill-scores" in capsys.readouterr().err


def test_a_part_whose_json_is_not_an_object_is_a_row_not_a_crash(tmp_path, capsys):
    images = fake_images(WNIDS, per_class=1)
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=2)
    shard = parts / "val-00000.tar"
    samples = [
        (key, {**members, "json": b"[1, 2]"} if key == images[0].source_id else members)
        for key, members in iter_shard(shard)
    ]
    write_shard(shard, samples)
    rehash_parts(parts)
    out = tmp_path / "report"
    assert main(["validate", "--parts", str(parts), "--out", str(out)]) == 1
    report = json.loads((out / "validation.json").read_text())
    rows = sorted((row["reason"], row["key"] or "") for row in report["integrity"]["failures"])
    # the part is a decode row; the manifest's summary still counts its scores, which the shards lack
    assert rows == [("decode", images[0].source_id), ("fill-summary", "")]
    assert report["fill_quality"]["splits"]["val"]["scored"] == 1


@pytest.mark.parametrize(
    "summary",
    [
        {"scored": 2},  # keys missing: the manifest is refused where it is read
        "poor",
    ],
)
def test_a_hostile_manifest_summary_is_refused_in_one_line(tmp_path, capsys, summary):
    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(WNIDS, per_class=1)}, shard_size=2)
    info = json.loads((parts / "_info.json").read_text())
    info["splits"]["val"]["fill_scores"] = summary
    (parts / "_info.json").write_text(json.dumps(info))
    assert main(["validate", "--parts", str(parts), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert "fill_scores" in err and "Traceback" not in err
    assert not (tmp_path / "report" / "validation.json").exists()
