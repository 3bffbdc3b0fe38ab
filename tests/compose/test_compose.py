"""The compose stage on synthetic parts: counts, groups, tiers, boxes found in the JPEGs,
backgrounds, determinism across worker counts, resume, settings checks and errors as data."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from parts_factory import FakeImage, distinct_color, fake_images, rehash_parts, write_parts
from PIL import Image

from builder.compose.backgrounds import DonorPool, assign_foreign_donors
from builder.compose.stage import compose_dataset
from builder.core.classes import class_of
from builder.core.config import SettingsMismatch
from builder.core.hashing import sha256_file
from builder.core.manifest import ERRORS_NAME, MANIFEST_NAME
from builder.core.shard_read import iter_shard
from builder.core.stage import RunOptions
from builder.core.taxonomy import TIERS
from builder.formats.composites import check_composite_json

WNIDS = ["n01443537", "n02437312", "n02134084"]  # goldfish, Arabian camel, ice bear


def decoded(jpg: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(jpg)) as image:
        return np.asarray(image.convert("RGB")).astype(np.int16)


def bright_box(image: np.ndarray) -> tuple[int, int, int, int]:
    """x, y, w, h of the bright pixels (the objects are bright, backgrounds dark)."""
    luma = image @ np.array([0.299, 0.587, 0.114])
    ys, xs = np.nonzero(luma > 150)
    return int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)


def read_dataset(dataset_dir: Path) -> tuple[dict, list[tuple[str, dict, dict]]]:
    manifest = json.loads((dataset_dir / MANIFEST_NAME).read_text())
    samples = []
    for _split, entry in manifest["splits"].items():
        for name in entry["filenames"]:
            for key, members in iter_shard(dataset_dir / name):
                samples.append((key, json.loads(members["json"]), members))
    return manifest, samples


@pytest.fixture(scope="module")
def parts_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("parts") / "parts"
    write_parts(path, {"val": fake_images(WNIDS, per_class=3)}, shard_size=4)
    return path


@pytest.fixture(scope="module")
def paper_set(parts_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("composed")
    summary = compose_dataset(
        parts_dir, "hard-spurious-imagenet", out, overrides={"shard_size": 30}, options=RunOptions(progress=False)
    )
    return summary, *read_dataset(summary.dataset_dir)


def test_paper_set_gives_twelve_composites_per_image_with_groups_and_tiers(paper_set):
    summary, manifest, samples = paper_set
    assert summary.dataset_dir.name == "hard-spurious-imagenet"
    assert manifest["stage"] == "compose" and manifest["config"] == "hard-spurious-imagenet"
    val = manifest["splits"]["val"]
    assert val["num_samples"] == len(samples) == 9 * 12
    assert val["shard_lengths"] == [24, 24, 24, 24, 12]  # 30 composites per shard -> 2 whole images
    per_image = Counter(meta["source_id"] for _, meta, _ in samples)
    assert set(per_image.values()) == {12}
    assert val["counts"]["group"] == {"CeO": 27, "CeR": 27, "CoO": 27, "CoR": 27}
    assert val["counts"]["tier"] == {"Easy": 36, "Hard": 36, "Medium": 36}
    assert val["counts"]["group_size"]["CoR/56"] == 9
    for key, meta, members in samples:
        assert "." not in key and check_composite_json(meta) == []
        assert set(members) == {"jpg", "cls", "json"}
        assert members["cls"] == str(meta["class_index"]).encode()
        assert meta["tier"] == TIERS[(meta["group"], meta["size"])]
        assert meta["position"] == {"Ce": "center", "Co": "top-right"}[meta["group"][:2]]
    assert "CeO" in summary.table and "total" in summary.table
    assert manifest["class_names"][1] == "goldfish" and len(manifest["class_names"]) == 1000


def test_boxes_in_json_match_the_object_found_in_the_jpeg(paper_set):
    _, _, samples = paper_set
    for key, meta, members in samples:
        image = decoded(members["jpg"])
        size = meta["size"]
        expected = (112 - size // 2, 112 - size // 2) if meta["position"] == "center" else (224 - size, 0)
        assert (meta["box_x"], meta["box_y"], meta["box_w"], meta["box_h"]) == (*expected, size, size)
        assert bright_box(image) == (*expected, size, size), key


def test_backgrounds_original_is_own_random_is_another_class(paper_set):
    _, _, samples = paper_set
    colours = {wnid: distinct_color(c) for c, wnid in enumerate(WNIDS)}
    donors = {}
    for _key, meta, members in samples:
        corner_far = (
            decoded(members["jpg"])[200, 10] if meta["position"] == "top-right" else decoded(members["jpg"])[5, 5]
        )
        assert np.abs(corner_far - np.array(colours[meta["background_wnid"]])).max() <= 6
        if meta["background"] == "original":
            assert meta["background_source_id"] == meta["source_id"] and meta["background_wnid"] == meta["wnid"]
        else:
            assert meta["background"] == "random"
            assert meta["background_class_index"] != meta["class_index"]
            assert meta["background_class_index"] == class_of(meta["background_wnid"]).index
            donors.setdefault(meta["source_id"], set()).add(meta["background_source_id"])
    assert all(len(d) == 1 for d in donors.values())  # one donor per image, shared by CeR and CoR


def test_foreign_donors_never_come_from_the_own_class_and_ignore_listing_order():
    items = [(c, f"img{c:03d}_{i}") for c in range(50) for i in range(c % 4 + 1)]
    donors = assign_foreign_donors(items, seed=7)
    assert all(donor is not None and donor[0] != cls for cls, key in items for donor in [donors[key]])
    assert assign_foreign_donors(list(reversed(items)), seed=7) == donors
    assert assign_foreign_donors(items, seed=8) != donors
    used = Counter(donor[0] for donor in donors.values())
    assert len(used) > 30  # spread over many classes, not a fixed cycle
    assert DonorPool.build([(3, "a"), (3, "b")]).foreign_donor("a", 3, 0) is None


def test_new_positions_and_neutral_backgrounds_are_one_override(parts_dir, tmp_path):
    overrides = {"positions": "bottom-left,left,xy:0.25,0.75", "backgrounds": "gray,noise", "sizes": "56"}
    summary = compose_dataset(
        parts_dir, "hard-spurious-imagenet", tmp_path, overrides=overrides, options=RunOptions(progress=False)
    )
    assert summary.dataset_dir.name.startswith("hard-spurious-imagenet-custom-")
    manifest, samples = read_dataset(summary.dataset_dir)
    assert manifest["spec"]["positions"] == ["bottom-left", "left", "xy:0.25,0.75"]
    assert manifest["splits"]["val"]["counts"]["group"] == {
        f"{p}/{b}": 9 for p in ("bottom-left", "left", "xy:0.25,0.75") for b in ("gray", "noise")
    }
    expected = {"bottom-left": (0, 168), "left": (0, 84), "xy:0.25,0.75": (42, 126)}
    noise_images = {}
    for key, meta, members in samples:
        image = decoded(members["jpg"])
        x, y = expected[meta["position"]]
        assert (meta["box_x"], meta["box_y"], meta["box_w"], meta["box_h"]) == (x, y, 56, 56)
        if meta["background"] == "gray":
            assert bright_box(image) == (x, y, 56, 56)
        assert image[y + 2 : y + 54, x + 2 : x + 54].min() > 160  # the flat object, whatever lies around it
        assert meta["background_source_id"] is None and meta["background_wnid"] is None and meta["tier"] is None
        far = image[60:80, 150:200]
        if meta["background"] == "gray":
            assert np.abs(far - 128).max() <= 2
        else:
            assert far.std() > 40  # uniform noise
            noise_images[key] = members["jpg"]
    assert len(set(noise_images.values())) == len(noise_images)  # each sample draws its own noise


def test_aspect_ratio_variant_keeps_ratio_and_uses_seeded_corners(tmp_path):
    parts = tmp_path / "parts"
    images = [
        FakeImage(f"img_{i}", wnid, (250, 250, 250), distinct_color(c), image_size=(200, 150), box=(10, 20, 89, 59))
        for i, (c, wnid) in enumerate([(0, WNIDS[0]), (0, WNIDS[0]), (1, WNIDS[1]), (1, WNIDS[1])])
    ]
    write_parts(parts, {"val": images})
    summary = compose_dataset(parts, "hard-spurious-imagenet-ar", tmp_path / "out", options=RunOptions(progress=False))
    manifest, samples = read_dataset(summary.dataset_dir)
    assert manifest["splits"]["val"]["num_samples"] == 4 * 3 * 2
    assert set(manifest["splits"]["val"]["counts"]["group"]) == {"CoO", "CoR"}
    corners = {}
    for _key, meta, members in samples:
        size = meta["size"]
        assert (meta["box_w"], meta["box_h"]) == (min(224, 2 * size), size)  # the 80 x 40 box keeps 2:1
        assert meta["mode"] == "ar" and meta["position"] in ("top-left", "top-right", "bottom-left", "bottom-right")
        assert bright_box(decoded(members["jpg"])) == (meta["box_x"], meta["box_y"], meta["box_w"], meta["box_h"])
        corners.setdefault((meta["source_id"], size), set()).add(meta["position"])
    assert all(len(c) == 1 for c in corners.values())  # O and R of one image and size share the corner
    assert len({next(iter(c)) for c in corners.values()}) > 1


def test_mask_paste_option(tmp_path):
    parts = tmp_path / "parts"
    images = [
        FakeImage(f"img_{i}", WNIDS[i % 2], (250, 250, 250), distinct_color(i % 2), mask="ellipse") for i in range(2)
    ]
    write_parts(parts, {"val": images})
    summary = compose_dataset(
        parts,
        "hard-spurious-imagenet",
        tmp_path / "out",
        overrides={"paste": "mask", "sizes": "112", "positions": "center", "backgrounds": "original"},
        options=RunOptions(progress=False),
    )
    _, samples = read_dataset(summary.dataset_dir)
    assert len(samples) == 2
    for _, meta, members in samples:
        image = decoded(members["jpg"])
        assert meta["paste"] == "mask"
        assert image[56 + 2, 56 + 2].max() < 60  # box corner: background, not object
        assert image[112, 112].min() > 240 and image[112, 57].min() > 200  # centre and left edge middle


def test_output_is_byte_identical_for_any_worker_count(parts_dir, tmp_path):
    overrides = {"shard_size": 12}
    one, two = (
        compose_dataset(
            parts_dir,
            "hard-spurious-imagenet",
            tmp_path / f"w{workers}",
            overrides=overrides,
            options=RunOptions(workers=workers, progress=False),
        )
        for workers in (1, 2)
    )
    assert one.dataset_dir.name == two.dataset_dir.name
    names = one.manifest["splits"]["val"]["filenames"]
    assert len(names) == 9
    for name in names:
        assert sha256_file(one.dataset_dir / name) == sha256_file(two.dataset_dir / name)
    assert (one.dataset_dir / MANIFEST_NAME).read_bytes() == (two.dataset_dir / MANIFEST_NAME).read_bytes()
    assert [s["sha256"] for s in one.manifest["splits"]["val"]["shards"]] == [
        sha256_file(one.dataset_dir / n) for n in names
    ]


def test_resume_rebuilds_only_unfinished_shards_and_gives_the_same_bytes(parts_dir, tmp_path):
    overrides = {"shard_size": 24}
    first = compose_dataset(
        parts_dir, "hard-spurious-imagenet", tmp_path, overrides=overrides, options=RunOptions(progress=False)
    )
    dataset = first.dataset_dir
    names = first.manifest["splits"]["val"]["filenames"]
    before = {name: (dataset / name).read_bytes() for name in names}
    kept_mtime = (dataset / names[0]).stat().st_mtime_ns
    # What a kill leaves behind: no manifest, a half-written temporary, a shard never renamed into place.
    (dataset / MANIFEST_NAME).unlink()
    (dataset / names[-1]).unlink()
    (dataset / f"{names[-1]}.1234.tmp").write_bytes(b"half a tar")
    again = compose_dataset(
        parts_dir, "hard-spurious-imagenet", tmp_path, overrides=overrides, options=RunOptions(progress=False)
    )
    assert again.reused_shards == len(names) - 1
    assert (dataset / names[0]).stat().st_mtime_ns == kept_mtime
    assert {name: (dataset / name).read_bytes() for name in names} == before
    assert not list(dataset.glob("*.tmp"))
    assert again.manifest == first.manifest


def test_other_settings_in_the_same_folder_are_refused(parts_dir, tmp_path):
    compose_dataset(
        parts_dir,
        "hard-spurious-imagenet",
        tmp_path,
        overrides={"sizes": "56", "name": "mine"},
        options=RunOptions(progress=False),
    )
    with pytest.raises(SettingsMismatch, match="seed"):
        compose_dataset(
            parts_dir,
            "hard-spurious-imagenet",
            tmp_path,
            overrides={"sizes": "56", "name": "mine", "seed": 5},
            options=RunOptions(progress=False),
        )
    rebuilt = compose_dataset(
        parts_dir,
        "hard-spurious-imagenet",
        tmp_path,
        overrides={"sizes": "56", "name": "mine", "seed": 5},
        options=RunOptions(progress=False, overwrite=True),
    )
    assert rebuilt.manifest["spec"]["seed"] == 5


def test_bad_parts_and_missing_donors_become_counted_error_rows(tmp_path):
    parts = tmp_path / "parts"
    images = fake_images(WNIDS[:1], per_class=3)  # one class: no foreign background exists
    write_parts(parts, {"val": images}, shard_size=3)
    # Corrupt one sample's crop in place (same length, so the tar stays readable).
    shard = parts / "val-00000.tar"
    with tarfile.open(shard) as tar:
        info = tar.getmember(f"{images[1].source_id}.crop.png")
    raw = bytearray(shard.read_bytes())
    raw[info.offset_data : info.offset_data + info.size] = b"\0" * info.size
    shard.write_bytes(bytes(raw))
    rehash_parts(parts)
    summary = compose_dataset(parts, "hard-spurious-imagenet", tmp_path / "out", options=RunOptions(progress=False))
    manifest = summary.manifest
    assert manifest["splits"]["val"]["num_samples"] == 2 * 6  # two readable images, original backgrounds only
    assert manifest["errors"] == {"total": 3, "by_reason": {"no-foreign-background": 2, "unreadable-parts": 1}}
    rows = [json.loads(line) for line in (summary.dataset_dir / ERRORS_NAME).read_text().splitlines()]
    assert {(r["image_id"], r["reason"]) for r in rows} == {
        (images[0].source_id, "no-foreign-background"),
        (images[1].source_id, "unreadable-parts"),
        (images[2].source_id, "no-foreign-background"),
    }
    assert all(r["stage"] == "compose" for r in rows)


def test_an_unreadable_background_drops_only_the_composites_that_need_it(tmp_path):
    parts = tmp_path / "parts"
    images = fake_images(WNIDS[:2], per_class=2)
    write_parts(parts, {"val": images}, shard_size=4)
    broken = images[0].source_id
    shard = parts / "val-00000.tar"
    raw = bytearray(shard.read_bytes())
    with tarfile.open(shard) as tar:  # both copies of the background: full size and canvas size
        for member in ("background.png", "canvas.npy"):
            info = tar.getmember(f"{broken}.{member}")
            raw[info.offset_data : info.offset_data + info.size] = b"\0" * info.size
    shard.write_bytes(bytes(raw))
    rehash_parts(parts)
    donors = assign_foreign_donors([(class_of(im.wnid).index, im.source_id) for im in images], seed=0)
    receivers = [key for key, donor in donors.items() if donor[1] == broken]
    summary = compose_dataset(
        parts, "hard-spurious-imagenet", tmp_path / "out", options=RunOptions(workers=2, progress=False)
    )
    assert summary.manifest["splits"]["val"]["num_samples"] == 4 * 12 - 6 - 6 * len(receivers)
    rows = [json.loads(line) for line in (summary.dataset_dir / ERRORS_NAME).read_text().splitlines()]
    assert sorted(r["image_id"] for r in rows) == sorted([broken, *receivers])
    assert all(r["reason"] == "unreadable-parts" and "background" in r["detail"] for r in rows)
    assert not (summary.dataset_dir / "_cache").exists()


def test_compose_killed_with_sigkill_resumes_to_identical_output(tmp_path):
    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(WNIDS, per_class=12, textured=True)}, shard_size=6)

    def command(out: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "hsi.cli",
            "compose",
            "--no-progress",
            "--parts",
            str(parts),
            "--out",
            str(out),
            "--shard-size",
            "12",
        ]  # one source image per shard: many shards

    assert subprocess.run(command(tmp_path / "clean"), check=False).returncode == 0
    process = subprocess.Popen(command(tmp_path / "killed"), start_new_session=True)
    state = tmp_path / "killed" / "hard-spurious-imagenet" / "_state"
    deadline = time.time() + 60
    while len(list(state.glob("*.json"))) < 3:
        assert time.time() < deadline and process.poll() is None, "compose finished or stalled before the kill"
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    dataset = tmp_path / "killed" / "hard-spurious-imagenet"
    assert not (dataset / MANIFEST_NAME).exists()
    assert subprocess.run(command(tmp_path / "killed"), check=False).returncode == 0
    clean = tmp_path / "clean" / "hard-spurious-imagenet"
    names = json.loads((clean / MANIFEST_NAME).read_text())["splits"]["val"]["filenames"]
    assert len(names) == 36
    assert {n: sha256_file(dataset / n) for n in names} == {n: sha256_file(clean / n) for n in names}
    assert (dataset / MANIFEST_NAME).read_bytes() == (clean / MANIFEST_NAME).read_bytes()
