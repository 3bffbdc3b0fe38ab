"""Compose hardening (issue 10): what each sample records, the AR variant that always keeps the ratio,
the -10 subset that refuses missing classes, the paper-exact options, the image-folder export and the
balanced background assignment. Each test failed before its fix."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from parts_factory import FakeImage, compose_args, fake_images, write_parts
from PIL import Image

from builder.compose.stage import compose_dataset
from builder.core.classes import class_of, imagenet_classes
from builder.core.shard_read import iter_shard
from builder.core.stage import RunOptions
from builder.core.taxonomy import group_name, tier_of
from builder.formats.composites import COMPOSITE_FIELDS, check_composite_json
from hsi.cli import main

WNIDS = ["n01443537", "n02437312", "n02134084"]  # goldfish, Arabian camel, ice bear
QUIET = RunOptions(progress=False)


def samples_of(dataset_dir: Path) -> list[tuple[str, dict, dict]]:
    manifest = json.loads((dataset_dir / "_info.json").read_text())
    found = []
    for entry in manifest["splits"].values():
        for name in entry["filenames"]:
            found += [(key, json.loads(m["json"]), m) for key, m in iter_shard(dataset_dir / name)]
    return found


def pixels(jpg: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(jpg)) as image:
        return np.asarray(image.convert("RGB")).astype(np.int16)


# --- point 4: requested placement and resolved corner; one rule for groups and tiers -----------------


def test_random_corner_records_the_requested_placement_and_the_corner_it_landed_in(tmp_path):
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=4)})
    overrides = {"name": "corners", "positions": ["random-corner", "bottom-left", "top-right"]}
    composed = compose_dataset(
        tmp_path / "parts", "hard-spurious-imagenet", tmp_path / "out", options=QUIET, overrides=overrides
    )
    samples = samples_of(composed.dataset_dir)
    landed = Counter()
    for _, meta, _ in samples:
        assert not check_composite_json(meta)
        assert meta["requested_position"] in overrides["positions"]
        if meta["requested_position"] == "random-corner":
            landed[meta["position"]] += 1
        else:
            assert meta["position"] == meta["requested_position"]
        # one rule: a flush corner is a corner group with a tier, whether requested or drawn
        assert meta["group"] == ("CoO" if meta["background"] == "original" else "CoR")
        assert meta["tier"] == tier_of(meta["group"], meta["size"], 224) is not None
    assert set(landed) == {"top-left", "top-right", "bottom-left", "bottom-right"}
    # a random corner that landed top-right is still told apart from a fixed top-right
    keys = {key for key, meta, _ in samples if meta["position"] == "top-right"}
    by_request = Counter(meta["requested_position"] for key, meta, _ in samples if key in keys)
    assert set(by_request) == {"random-corner", "top-right"}


def test_group_names_follow_the_requested_placement_only():
    assert group_name("bottom-left", "original") == group_name("random-corner", "original") == "CoO"
    assert group_name("random-corner", "random", margin=4) == "random-corner/random"
    assert group_name("left", "original") == "left/original" and tier_of("left/original", 56, 224) is None
    assert "requested_position" in COMPOSITE_FIELDS and COMPOSITE_FIELDS["requested_position"][1] is False


# --- point 20: the AR variant keeps the ratio on extreme boxes ----------------------------------------


@pytest.mark.parametrize("box", [(0, 0, 4, 159), (0, 50, 159, 57), (70, 0, 71, 119)])  # 5x160, 160x8, 2x120
def test_ar_variant_keeps_the_aspect_ratio_of_extreme_boxes(tmp_path, box):
    images = [
        FakeImage(
            f"ILSVRC2012_val_{i + 1:08d}", wnid, (255, 255, 255 - i), (0, 45 * i, 0), image_size=(160, 160), box=box
        )
        for i, wnid in enumerate(WNIDS[:2])
    ]
    write_parts(tmp_path / "parts", {"val": images})
    composed = compose_dataset(tmp_path / "parts", "hard-spurious-imagenet-ar", tmp_path / "out", options=QUIET)
    crop_w, crop_h = box[2] - box[0] + 1, box[3] - box[1] + 1
    shrunk = 0
    for _, meta, members in samples_of(composed.dataset_dir):
        w, h = meta["box_w"], meta["box_h"]
        assert max(w, h) <= 224 and meta["effective_size"] == min(w, h) <= meta["size"]
        # the ratio is kept up to rounding one side to whole pixels: |long/short - crop ratio| in cross form
        short_crop, long_crop = min(crop_w, crop_h), max(crop_w, crop_h)
        assert abs(max(w, h) * short_crop - min(w, h) * long_crop) <= long_crop / 2 + 1e-9
        shrunk += meta["effective_size"] < meta["size"]
        image = pixels(members["jpg"])
        bright = np.argwhere(image.mean(axis=2) > 200)
        (y0, x0), (y1, x1) = bright.min(axis=0), bright.max(axis=0)
        assert abs((x1 - x0 + 1) - w) <= 1 and abs((y1 - y0 + 1) - h) <= 1  # the pixels say the same
    assert shrunk > 0


# --- point 3: the -10 subset refuses missing classes and groups unless --allow-missing -------------------


def ten_command(parts: Path, out: Path, *extra: str) -> list[str]:
    return compose_args(parts, out, "--variant", "hard-spurious-imagenet-10", "--no-progress", *extra)


def test_ten_with_missing_classes_is_refused_and_says_which(tmp_path, capsys):
    # goldfish and ice bear only: eight classes absent, and their paired classes too (no paired group)
    write_parts(tmp_path / "parts", {"val": fake_images(["n01443537", "n02134084"], per_class=4)})
    assert main(ten_command(tmp_path / "parts", tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "n02437312 (Arabian camel) has no image in train" in err and "--allow-missing" in err
    assert "split test has no composite on a paired background (groups center/paired, top-right/paired)" in err
    assert "images per class and split" in err and not (tmp_path / "out").exists()

    assert main(ten_command(tmp_path / "parts", tmp_path / "out", "--allow-missing")) == 0
    out = capsys.readouterr().out
    assert "images per class and split" in out and "missing (--allow-missing)" in out
    manifest = json.loads((tmp_path / "out" / "hard-spurious-imagenet-10" / "_info.json").read_text())
    assert len(manifest["allowed_missing"]) == 8 * 2 + 1
    assert any("paired background" in line for line in manifest["allowed_missing"])


def test_ten_with_every_class_prints_images_per_class_and_records_nothing_missing(tmp_path, capsys):
    from builder.compose.spec import load_variant

    wnids = sorted(dict(load_variant("hard-spurious-imagenet-10").subset.pairs))
    write_parts(tmp_path / "parts", {"val": fake_images(wnids, per_class=4)})
    assert main(ten_command(tmp_path / "parts", tmp_path / "out")) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("n0")]
    assert len(rows) == 10 and all(line.split()[-2:] == ["2", "2"] for line in rows)
    manifest = json.loads((tmp_path / "out" / "hard-spurious-imagenet-10" / "_info.json").read_text())
    assert "allowed_missing" not in manifest


# --- point 19: the paper's crop, box rounding and donor scheme ---------------------------------------


# the crop itself: tests/compose/test_paper_exact.py


def test_paper_exact_flag_sets_the_papers_crop_donors_and_corner_draw(tmp_path, capsys):
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=6)})
    assert (
        main(
            compose_args(
                tmp_path / "parts",
                tmp_path / "out",
                "--paper-exact",
                "--name",
                "paper",
                "--positions",
                "center,random-corner",
                "--no-progress",
            )
        )
        == 0
    )
    manifest = json.loads((tmp_path / "out" / "paper" / "_info.json").read_text())
    spec = manifest["spec"]
    assert (spec["crop"], spec["box_rounding"], spec["donors"], spec["corner_draw"], spec["size_rounding"]) == (
        "exclusive",
        "float32-normalised",
        "per-class",
        "per-composite",
        "truncate",
    )
    samples = samples_of(tmp_path / "out" / "paper")
    donor_classes: dict[str, set] = {}
    corners: dict[tuple, set] = {}
    for _, meta, _ in samples:
        if meta["background"] == "random":
            donor_classes.setdefault(meta["wnid"], set()).add(meta["background_wnid"])
        if meta["requested_position"] == "random-corner":
            corners.setdefault((meta["source_id"], meta["size"]), set()).add(meta["position"])
        if meta["requested_position"] == "center":
            assert meta["box_w"] == meta["size"]  # the exclusive crop is still resized to s x s
    # one donor class per class, never the class itself
    assert all(len(classes) == 1 and wnid not in classes for wnid, classes in donor_classes.items())
    assert len(donor_classes) == 3
    # own- and random-background versions draw their corners independently
    assert any(len(found) == 2 for found in corners.values())


# --- small: balanced random backgrounds for new variants --------------------------------------------------


def test_new_variants_use_every_background_about_equally_and_never_their_own_class(tmp_path):
    from builder.compose.backgrounds import assign_foreign_donors

    items = [(c, f"img{c}_{i:03d}") for c in range(10) for i in range(50)]
    balanced = assign_foreign_donors(items, seed=0, scheme="balanced")
    uses = Counter(donor for donor in balanced.values())
    assert all(donor[0] != int(key[3]) for key, donor in balanced.items())
    assert set(uses.values()) == {1} and len(uses) == len(items)  # every background exactly once
    drawn = assign_foreign_donors(items, seed=0, scheme="per-image")
    assert len(set(drawn.values())) < 0.75 * len(items)  # with replacement: many never used
    # a class holding most images: every image still gets a foreign background, reuse spread evenly
    lopsided = [(0, f"a{i:03d}") for i in range(30)] + [(1, f"b{i}") for i in range(5)]
    donors = assign_foreign_donors(lopsided, seed=1, scheme="balanced")
    assert all(donors[key] is not None and donors[key][0] != cls for cls, key in lopsided)
    assert max(Counter(donors[f"a{i:03d}"] for i in range(30)).values()) <= 8  # 5 backgrounds for 30 images


def test_balanced_is_the_default_for_a_new_spec_and_the_named_variants_keep_per_image(tmp_path):
    from builder.compose.spec import load_variant

    spec_file = tmp_path / "mine.yaml"
    spec_file.write_text("name: mine\nsizes: [56]\npositions: [center]\n")
    assert load_variant(str(spec_file)).donors == "balanced"
    for name in ("hard-spurious-imagenet", "hard-spurious-imagenet-ar", "hard-spurious-imagenet-10"):
        assert load_variant(name).donors == "per-image"
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=4)})
    composed = compose_dataset(tmp_path / "parts", str(spec_file), tmp_path / "out", options=QUIET)
    used = Counter(
        meta["background_source_id"]
        for _, meta, _ in samples_of(composed.dataset_dir)
        if meta["background"] == "random"
    )
    assert len(used) == 12 and set(used.values()) == {1}  # 12 images, one size: each background once


# --- point 21: image folders in the paper's layout -----------------------------------------------------


def test_export_writes_the_papers_image_folders_byte_identical(tmp_path, capsys):
    import hashlib

    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=2)})
    composed = compose_dataset(tmp_path / "parts", "hard-spurious-imagenet", tmp_path / "out", options=QUIET)
    folder = tmp_path / "folders"
    assert main(["export", str(composed.dataset_dir), "--imagefolder", str(folder)]) == 0
    samples = samples_of(composed.dataset_dir)
    numbers = {"CeO": 1, "CoO": 2, "CeR": 3, "CoR": 4}
    for _, meta, members in samples:
        n = numbers[meta["group"]]
        name = f"{meta['source_id']}_{n}_{meta['size']}.JPEG"
        path = folder / "val" / str(meta["size"]) / f"Group_{n}" / meta["wnid"] / name
        assert path.read_bytes() == members["jpg"]
    written = json.loads((folder / "_export.json").read_text())
    assert len(written["files"]) == len(samples) == 6 * 12 and written["group_numbers"] == numbers
    assert all(
        hashlib.sha256((folder / row["path"]).read_bytes()).hexdigest() == row["sha256"] for row in written["files"]
    )
    from torchvision.datasets import ImageFolder

    # every class folder is there (placeholders for the missing), so folder order is ImageNet's index order
    group_3 = ImageFolder(str(folder / "val" / "56" / "Group_3"), allow_empty=True)
    assert group_3.classes == [c.wnid for c in imagenet_classes()] and len(group_3) == 6
    assert {Path(path).parent.name: target for path, target in group_3.samples} == {
        wnid: class_of(wnid).index for wnid in WNIDS
    }
    # again: refused without --overwrite, replaced with it
    assert main(["export", str(composed.dataset_dir), "--imagefolder", str(folder)]) == 2
    assert main(["export", str(composed.dataset_dir), "--imagefolder", str(folder), "--overwrite"]) == 0


def test_export_refuses_a_foreign_folder_and_groups_the_paper_has_no_number_for(tmp_path, capsys):
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=1)})
    overrides = {"name": "sides", "positions": ["left", "center"], "backgrounds": ["original", "gray"]}
    composed = compose_dataset(
        tmp_path / "parts", "hard-spurious-imagenet", tmp_path / "out", options=QUIET, overrides=overrides
    )
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    for flags in ([], ["--overwrite"]):
        assert (
            main(["export", str(composed.dataset_dir), "--imagefolder", str(foreign), "--layout", "groups", *flags])
            == 2
        )
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"] and "not an export" in capsys.readouterr().err
    assert main(["export", str(composed.dataset_dir), "--imagefolder", str(tmp_path / "paper")]) == 2
    assert "--layout groups" in capsys.readouterr().err and not (tmp_path / "paper").exists()
    ours = ["export", str(composed.dataset_dir), "--imagefolder", str(tmp_path / "ours"), "--layout", "groups"]
    assert main(ours) == 0
    names = {p.relative_to(tmp_path / "ours").parts[2] for p in (tmp_path / "ours").rglob("*.JPEG")}
    assert names == {"left_original", "left_gray", "CeO", "center_gray"}


# --- small: --paste mask on box-masker parts says it is --paste box ----------------------------------------


def test_paste_mask_on_box_masker_parts_is_noted_and_recorded(tmp_path, capsys):
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=1)})  # the factory's masker is "box"
    base = compose_args(tmp_path / "parts", tmp_path / "out", "--sizes", "56", "--no-progress")
    assert main([*base, "--paste", "mask", "--name", "masked"]) == 0
    assert "identical to --paste box" in capsys.readouterr().out
    masked = json.loads((tmp_path / "out" / "masked" / "_info.json").read_text())
    assert any("identical to --paste box" in note for note in masked["notes"])
    assert main([*base, "--paste", "box", "--name", "boxed"]) == 0
    assert "note:" not in capsys.readouterr().out
    assert "notes" not in json.loads((tmp_path / "out" / "boxed" / "_info.json").read_text())
    # and the claim is true: the composites are the same bytes
    jpgs = [sorted(m["jpg"] for _, _, m in samples_of(tmp_path / "out" / name)) for name in ("masked", "boxed")]
    assert jpgs[0] == jpgs[1]
