"""`hsi compose --min-fill SCORE` on parts with planted fill scores: exactly the backgrounds under
the threshold are left out (own and donor), what was left out is counted in the manifest, a group
that would empty and parts without fill scores are refused in one line, and without the flag the
composites are the ones compose always made. Each composite records its background's fill score."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from fill_planting import as_schema_1, plant_fill_scores
from parts_factory import compose_args, compose_quietly, fake_images, write_parts

from builder.compose.backgrounds import assign_foreign_donors
from builder.compose.spec import load_variant
from builder.core.config import ConfigError
from builder.core.manifest import MANIFEST_NAME
from builder.core.shard_read import iter_shard
from builder.formats.composites import check_composite_json
from hsi.cli import main

WNIDS = ["n01443537", "n02437312", "n02134084"]  # goldfish, Arabian camel, ice bear
IMAGES = fake_images(WNIDS, per_class=3)
# three images per class, in class order; None: nothing was filled (kept whatever the threshold)
SCORES = dict(zip((im.source_id for im in IMAGES), [0.2, 0.6, None, 0.45, 0.9, 0.7, 0.3, 0.55, 1.0], strict=True))
BELOW_HALF = {key for key, score in SCORES.items() if score is not None and score < 0.5}


def read_samples(dataset: Path) -> tuple[dict, list[tuple[str, dict, dict]]]:
    manifest = json.loads((dataset / MANIFEST_NAME).read_text())
    samples = []
    for entry in manifest["splits"].values():
        for name in entry["filenames"]:
            samples += [(key, json.loads(m["json"]), m) for key, m in iter_shard(dataset / name)]
    return manifest, samples


@pytest.fixture(scope="module")
def scored_parts(tmp_path_factory) -> Path:
    parts = tmp_path_factory.mktemp("scored") / "parts"
    write_parts(parts, {"val": IMAGES}, shard_size=4)
    plant_fill_scores(parts, SCORES)
    return parts


@pytest.fixture(scope="module")
def unfiltered(scored_parts, tmp_path_factory):
    summary = compose_quietly(scored_parts, "hard-spurious-imagenet", tmp_path_factory.mktemp("u"))
    return read_samples(summary.dataset_dir)


@pytest.fixture(scope="module")
def filtered(scored_parts, tmp_path_factory):
    summary = compose_quietly(
        scored_parts, "hard-spurious-imagenet", tmp_path_factory.mktemp("f"), overrides={"min_fill": 0.5}
    )
    return summary, *read_samples(summary.dataset_dir)


def test_every_composite_records_its_backgrounds_fill_score(unfiltered):
    manifest, samples = unfiltered
    assert len(samples) == 9 * 12
    for _, meta, _ in samples:
        assert check_composite_json(meta) == []
        assert meta["background_fill_score"] == SCORES[meta["background_source_id"]]
    summary = manifest["splits"]["val"]["fill_scores"]
    on_unscored = sum(meta["background_source_id"] == IMAGES[2].source_id for _, meta, _ in samples)
    assert summary["scored"] == 9 * 12 - on_unscored and summary["unscored"] == on_unscored
    assert "min_fill_dropped" not in manifest["splits"]["val"] and "min_fill" not in manifest["spec"]


def test_min_fill_leaves_out_exactly_the_backgrounds_below_it_as_own_and_as_donor(filtered):
    summary, manifest, samples = filtered
    entry = manifest["splits"]["val"]
    assert manifest["spec"]["min_fill"] == 0.5 and summary.dataset_dir.name.startswith("hard-spurious-imagenet-custom-")
    assert entry["min_fill_dropped"] == {"own": 3, "donor": 3, "composites": 3 * 6}
    assert entry["num_samples"] == len(samples) == 9 * 12 - 3 * 6
    assert entry["counts"]["group"] == {"CeO": 18, "CoO": 18, "CeR": 27, "CoR": 27}
    used = {meta["background_source_id"] for _, meta, _ in samples}
    assert not used & BELOW_HALF  # no composite sits on a dropped background, own or donor
    own = Counter(meta["source_id"] for _, meta, _ in samples if meta["background"] == "original")
    foreign = Counter(meta["source_id"] for _, meta, _ in samples if meta["background"] == "random")
    assert set(own) == set(SCORES) - BELOW_HALF and set(foreign) == set(SCORES)  # their objects still pasted
    for _, meta, _ in samples:
        score = meta["background_fill_score"]
        assert score is None or score >= 0.5
        assert meta["background_wnid"] != meta["wnid"] or meta["background"] == "original"
    assert entry["fill_scores"]["score"]["p10"] >= 0.5


def test_without_min_fill_the_composites_are_the_ones_compose_always_made(scored_parts, unfiltered, tmp_path):
    """A threshold no background fails plans the same composites: same keys, same JPEG bytes; only
    the config name (and so the json's `variant`) differs, and no shard of the other is reused."""
    _, samples = unfiltered
    summary = compose_quietly(scored_parts, "hard-spurious-imagenet", tmp_path, overrides={"min_fill": 0.0})
    manifest, kept = read_samples(summary.dataset_dir)
    assert manifest["splits"]["val"]["min_fill_dropped"] == {"own": 0, "donor": 0, "composites": 0}
    assert [(k, m["jpg"]) for k, _, m in kept] == [(k, m["jpg"]) for k, _, m in samples]
    assert [{**meta, "variant": None} for _, meta, _ in kept] == [{**meta, "variant": None} for _, meta, _ in samples]
    assert (
        load_variant("hard-spurious-imagenet").fingerprint
        != load_variant("hard-spurious-imagenet", {"min_fill": 0.0}).fingerprint
    )
    assert "min_fill" not in load_variant("hard-spurious-imagenet").to_json()


def test_a_threshold_that_empties_a_classs_own_group_is_refused_in_one_line(scored_parts, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(compose_args(scored_parts, out, "--min-fill", "0.95", "--no-progress")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert (
        "--min-fill 0.95 leaves split val no own background (groups CeO, CoO) for class n02437312 (Arabian camel): "
        "its 3 backgrounds score at most 0.900; lower --min-fill" in err
    )
    assert "lower --min-fill" in err and not out.exists()


def test_a_threshold_that_leaves_a_class_no_donor_is_refused(tmp_path, capsys):
    """Two classes, only goldfish backgrounds kept: the camel has no own background (refused first)."""
    images = fake_images(WNIDS[:2], per_class=2)
    write_parts(tmp_path / "parts", {"val": images})
    plant_fill_scores(tmp_path / "parts", {im.source_id: 0.9 if im.wnid == WNIDS[0] else 0.1 for im in images})
    code = main(compose_args(tmp_path / "parts", tmp_path / "out", "--min-fill", "0.5", "--backgrounds", "random"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "no random background (groups CeR, CoR) for class n01443537 (goldfish): no donor is kept" in err


def test_schema_1_parts_are_refused_with_min_fill_and_composed_without(tmp_path, capsys):
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=2)})
    as_schema_1(tmp_path / "parts")
    assert main(compose_args(tmp_path / "parts", tmp_path / "out", "--min-fill", "0.3", "--no-progress")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "--min-fill 0.3 needs fill scores, and 6 of 6 parts have none" in err and "re-extract" in err
    assert not (tmp_path / "out").exists()
    summary = compose_quietly(tmp_path / "parts", "hard-spurious-imagenet", tmp_path / "out")
    manifest, samples = read_samples(summary.dataset_dir)
    assert samples and all(meta["background_fill_score"] is None for _, meta, _ in samples)
    assert manifest["splits"]["val"]["fill_scores"]["scored"] == 0


@pytest.mark.parametrize(
    "value, needle",
    [(1.5, "in [0, 1]"), (float("nan"), "in [0, 1]"), ("abc", "must be a number"), (True, "must be a number")],
)
def test_min_fill_values_that_are_no_score_are_refused(value, needle):
    with pytest.raises(ConfigError, match="min_fill") as caught:
        load_variant("hard-spurious-imagenet", {"min_fill": value})
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_a_spec_file_may_set_min_fill(scored_parts, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: filtered\nsizes: [56]\npositions: [center]\nmin_fill: 0.5\n")
    summary = compose_quietly(scored_parts, str(spec), tmp_path / "out")
    manifest, samples = read_samples(summary.dataset_dir)
    assert manifest["spec"]["min_fill"] == 0.5 and "min_fill: 0.5" in (summary.dataset_dir / "spec.yaml").read_text()
    assert manifest["splits"]["val"]["min_fill_dropped"] == {"own": 3, "donor": 3, "composites": 3}
    assert not {meta["background_source_id"] for _, meta, _ in samples} & BELOW_HALF


@pytest.mark.parametrize("scheme", ["balanced", "per-image", "per-class"])
def test_donors_fewer_than_receivers_serve_every_receiver_from_another_class(scheme):
    items = [(c, f"k{c}_{i}") for c in range(4) for i in range(5)]
    kept = [item for item in items if item[1].endswith(("_0", "_3"))]
    donors = assign_foreign_donors(items, 7, scheme, kept)
    assert set(donors) == {key for _, key in items}
    for class_index, key in items:
        assert donors[key] in kept and donors[key][0] != class_index
    if scheme == "balanced":
        uses = Counter(donors.values())
        assert max(uses.values()) - min(uses.values()) <= 1 and len(uses) == len(kept)
    assert assign_foreign_donors(items, 7, scheme, items) == assign_foreign_donors(items, 7, scheme)
