"""Variant specs (named, user files, overrides), the -10 subset's splits and pairing, the `hsi
compose` command, and extract -> compose on the embedded demo tree."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from fake_imagenet import extract_args
from parts_factory import compose_args, compose_quietly, fake_images, write_parts

from builder.compose.spec import NAMED_VARIANTS, load_variant
from builder.core.classes import class_of
from builder.core.config import ConfigError
from builder.core.hashing import sha256_file
from builder.core.manifest import MANIFEST_NAME
from builder.core.shard_read import iter_shard
from hsi.cli import main

SUBSET_PAIRS = dict(load_variant("hard-spurious-imagenet-10").subset.pairs)


def samples_of(dataset_dir: Path, split: str) -> list[tuple[str, dict, dict]]:
    manifest = json.loads((dataset_dir / MANIFEST_NAME).read_text())
    return [
        (key, json.loads(m["json"]), m)
        for name in manifest["splits"][split]["filenames"]
        for key, m in iter_shard(dataset_dir / name)
    ]


def test_named_variants_load_and_describe_the_paper_sets():
    paper = load_variant("hard-spurious-imagenet")
    assert (paper.sizes, paper.positions, paper.backgrounds, paper.mode, paper.canvas) == (
        (56, 84, 112),
        ("center", "top-right"),
        ("original", "random"),
        "square",
        224,
    )
    ar = load_variant("hard-spurious-imagenet-ar")
    assert (ar.mode, ar.positions) == ("ar", ("random-corner",))
    ten = load_variant("hard-spurious-imagenet-10")
    assert len(ten.subset.classes) == 10 and ten.output_splits == ("train", "test")
    assert all(SUBSET_PAIRS[SUBSET_PAIRS[w]] == w and SUBSET_PAIRS[w] != w for w in SUBSET_PAIRS)
    assert {class_of(w).name for w in ten.subset.classes} >= {"goldfish", "Arabian camel", "ice bear", "zebra"}
    assert len({load_variant(n).fingerprint for n in NAMED_VARIANTS}) == 3
    assert load_variant("hard-spurious-imagenet").fingerprint == paper.fingerprint  # stable


def test_overrides_rename_the_config_and_a_user_spec_file_works(tmp_path):
    custom = load_variant("hard-spurious-imagenet", {"positions": "bottom-left,left", "seed": 3})
    assert custom.positions == ("bottom-left", "left") and custom.seed == 3
    assert re.fullmatch(r"hard-spurious-imagenet-custom-[0-9a-f]{8}", custom.name)
    assert load_variant("hard-spurious-imagenet", {"seed": 3, "positions": "bottom-left,left"}).name == custom.name
    assert load_variant("hard-spurious-imagenet", {"positions": "bottom-left,left"}).name != custom.name
    assert load_variant("hard-spurious-imagenet", {"shard_size": 10}).name == "hard-spurious-imagenet"
    assert load_variant("hard-spurious-imagenet", {"seed": 3, "name": "mine"}).name == "mine"
    spec = tmp_path / "corners.yaml"
    spec.write_text("name: corners\nsizes: [64]\npositions: [top-left, 'xy:0.5,1']\nbackgrounds: [gray]\n")
    loaded = load_variant(str(spec))
    assert (loaded.name, loaded.sizes, loaded.positions, loaded.backgrounds) == (
        "corners",
        (64,),
        ("top-left", "xy:0.5,1"),
        ("gray",),
    )


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"positions": "middle"}, "unknown position"),
        ({"sizes": "300"}, "does not fit"),
        ({"backgrounds": "sky"}, "unknown"),
        ({"backgrounds": "paired"}, "subset"),
        ({"mode": "stretch"}, "mode"),
        ({"jpeg_quality": 0}, "jpeg_quality"),
        ({"colour": "red"}, "unknown variant fields"),
    ],
)
def test_bad_specs_are_refused_with_the_field_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_variant("hard-spurious-imagenet", overrides)


def test_subset_pairs_must_stay_inside_the_subset(tmp_path):
    spec = tmp_path / "bad10.yaml"
    spec.write_text(
        "name: bad10\nbackgrounds: [original, paired]\nsubset:\n  pairs: {n01443537: n02437312, n02437312: n02134084}\n"
    )
    with pytest.raises(ConfigError, match="must be one of the subset"):
        load_variant(str(spec))
    with pytest.raises(ConfigError, match="unknown variant"):
        load_variant("hard-spurious-imagenet-20")


@pytest.fixture(scope="module")
def subset_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("ten")
    images = fake_images(sorted(SUBSET_PAIRS) + ["n01440764"], per_class=20, image_size=(64, 48), box=(8, 8, 39, 31))
    write_parts(root / "parts", {"val": images}, shard_size=64)
    summary = compose_quietly(
        root / "parts",
        "hard-spurious-imagenet-10",
        root / "out",
        overrides={"sizes": "56", "positions": "center,top-right", "shard_size": 100},
    )
    return summary


def test_subset_train_split_is_spuriously_correlated(subset_set):
    manifest = subset_set.manifest
    assert manifest["class_names"] == [class_of(w).name for w in sorted(SUBSET_PAIRS)]
    train = samples_of(subset_set.dataset_dir, "train")
    kinds = defaultdict(Counter)
    for _key, meta, members in train:
        assert (
            meta["label"] == sorted(SUBSET_PAIRS).index(meta["wnid"]) and members["cls"] == str(meta["label"]).encode()
        )
        assert meta["class_index"] == class_of(meta["wnid"]).index
        assert meta["paired_wnid"] == SUBSET_PAIRS[meta["wnid"]]
        if meta["background"] == "original":
            assert meta["background_source_id"] == meta["source_id"]
        else:
            assert meta["background"] == "paired" and meta["background_wnid"] == meta["paired_wnid"]
        kinds[meta["wnid"]][meta["background"]] += 1
    # 20 images per class, half to train; 90% of 10 = 9 on their own background; 2 composites each.
    assert {w: dict(c) for w, c in kinds.items()} == {w: {"original": 18, "paired": 2} for w in SUBSET_PAIRS}
    assert manifest["splits"]["train"]["num_samples"] == 10 * 10 * 2
    assert "n01440764" not in {meta["wnid"] for _, meta, _ in train}  # tench is not in the subset


def test_subset_test_split_is_balanced_and_disjoint_from_train(subset_set):
    test = samples_of(subset_set.dataset_dir, "test")
    train_ids = {meta["source_id"] for _, meta, _ in samples_of(subset_set.dataset_dir, "train")}
    test_ids = {meta["source_id"] for _, meta, _ in test}
    assert len(test_ids) == 100 and not train_ids & test_ids
    cells = Counter((meta["wnid"], meta["background"], meta["position"], meta["size"]) for _, meta, _ in test)
    assert set(cells.values()) == {10} and len(cells) == 10 * 2 * 2
    per_image = Counter(meta["source_id"] for _, meta, _ in test)
    assert set(per_image.values()) == {4}
    for _, meta, _ in test:
        if meta["background"] == "paired":
            assert meta["background_source_id"] in test_ids  # paired backgrounds come from the same split
    groups = subset_set.manifest["splits"]["test"]["counts"]["group"]
    assert groups == {"CeO": 100, "CoO": 100, "center/paired": 100, "top-right/paired": 100}


def test_hsi_compose_command(tmp_path, capsys):
    write_parts(tmp_path / "parts", {"val": fake_images(["n01443537", "n02437312"], per_class=2)})
    status = main(
        compose_args(
            tmp_path / "parts",
            tmp_path / "out",
            "--positions",
            "bottom-left,left",
            "--sizes",
            "56,84",
            "--name",
            "corners",
            "--no-progress",
        )
    )
    out = capsys.readouterr().out
    assert status == 0 and "CoO" in out and "left/random" in out  # an explicit flush corner is a corner group
    manifest = json.loads((tmp_path / "out" / "corners" / MANIFEST_NAME).read_text())
    assert manifest["splits"]["val"]["num_samples"] == 4 * 2 * 2 * 2
    assert (tmp_path / "out" / "corners" / "spec.yaml").is_file()
    # the saved resolved spec rebuilds the same dataset
    assert (
        main(
            compose_args(
                tmp_path / "parts",
                tmp_path / "again",
                "--variant",
                str(tmp_path / "out" / "corners" / "spec.yaml"),
                "--no-progress",
            )
        )
        == 0
    )
    again = json.loads((tmp_path / "again" / "corners" / MANIFEST_NAME).read_text())
    assert [s["sha256"] for s in again["splits"]["val"]["shards"]] == [
        s["sha256"] for s in manifest["splits"]["val"]["shards"]
    ]
    assert main(compose_args(tmp_path / "parts", tmp_path / "x", "--variant", "nope")) == 2
    assert "unknown variant 'nope'" in capsys.readouterr().err
    assert main(compose_args(tmp_path / "missing", tmp_path / "x")) == 2
    assert main(compose_args(tmp_path / "parts", tmp_path / "x", "--splits", "train")) == 2
    assert "no split ['train']" in capsys.readouterr().err


def test_extract_then_compose_on_the_embedded_demo_tree(tmp_path, capsys):
    from hsi.demo import demo_source_root

    assert main(extract_args(str(demo_source_root()), tmp_path / "demo")) == 0
    parts_manifest = json.loads((tmp_path / "demo" / "parts" / MANIFEST_NAME).read_text())
    usable = parts_manifest["splits"]["val"]["num_samples"]
    assert usable >= 1
    args = compose_args(tmp_path / "demo", tmp_path / "datasets", "--no-progress", "--workers", "2")
    assert main(args) == 0
    dataset = tmp_path / "datasets" / "hard-spurious-imagenet"
    manifest = json.loads((dataset / MANIFEST_NAME).read_text())
    assert manifest["splits"]["val"]["num_samples"] == 12 * usable
    assert manifest["parts"]["fingerprint"] == parts_manifest["fingerprint"]
    sums = [sha256_file(dataset / n) for n in manifest["splits"]["val"]["filenames"]]
    capsys.readouterr()
    assert main(args) == 0  # the same run again: finished shards reused, same bytes
    assert "reused" in capsys.readouterr().out
    assert [sha256_file(dataset / n) for n in manifest["splits"]["val"]["filenames"]] == sums


def test_a_subset_without_any_of_its_classes_is_refused_before_writing(tmp_path):
    from parts_factory import fake_images, write_parts

    from builder.core.config import ConfigError

    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(["n01440764", "n01484850"], per_class=2)})  # tench, shark: not in -10
    with pytest.raises(ConfigError, match="hold no image of the hard-spurious-imagenet-10 classes.*goldfish"):
        compose_quietly(parts, "hard-spurious-imagenet-10", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_overwrite_never_deletes_a_folder_the_toolkit_did_not_write(tmp_path, capsys):
    from parts_factory import fake_images, write_parts

    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(["n01440764", "n01484850"], per_class=1)})
    foreign = tmp_path / "out" / "notes"
    foreign.mkdir(parents=True)
    (foreign / "todo.txt").write_text("keep me")
    code = main(
        compose_args(parts, tmp_path / "out", "--name", "notes", "--sizes", "56", "--overwrite", "--no-progress")
    )
    assert code == 2 and "holds no dataset of this toolkit" in capsys.readouterr().err
    assert (foreign / "todo.txt").read_text() == "keep me"
