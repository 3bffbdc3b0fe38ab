"""The extract stage end to end through `hsi extract`: parts content, errors, determinism, resume."""

import json
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from fake_imagenet import error_rows, shard_hashes, write_tree
from PIL import Image
from subprocesses import hsi_command, wait_for_states

from builder.core.classes import class_of
from builder.core.hashing import sha256_file
from builder.extract.shard_builder import dilate
from builder.formats.parts import iter_parts
from hsi.cli import main


def extract(*args) -> int:
    return main(["extract", "--no-progress", *map(str, args)])


@pytest.fixture(scope="module")
def bad_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet")
    return write_tree(root, split="val", count=6, bad=True)


@pytest.fixture(scope="module")
def bad_run(bad_tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    assert (
        extract("--source", bad_tree.root, "--split", "val", "--out", out, "--max-pixels", 1_000_000, "--shard-size", 4)
        == 0
    )
    return out / "parts"


def test_every_bad_input_is_reported_with_its_reason(bad_tree, bad_run):
    rows = error_rows(bad_run)
    found: dict[str, set[str]] = {}
    for row in rows:
        found.setdefault(row["image_id"], set()).add(row["reason"])
        assert row["action"] and row["split"] == "val"
    for image_id, reasons in bad_tree.expected_reasons.items():
        assert reasons <= found.get(image_id, set()), (image_id, reasons, found.get(image_id))
    kept = {p.key for p in iter_parts(bad_run)}
    assert kept == {img.image_id for img in bad_tree.good}
    assert not kept & bad_tree.skipped


def test_manifest_counts_match_errors_and_shards(bad_tree, bad_run):
    manifest = json.loads((bad_run / "_info.json").read_text())
    split = manifest["splits"]["val"]
    rows = error_rows(bad_run)
    assert split["num_samples"] == len(bad_tree.good) == sum(split["shard_lengths"])
    assert split["errors"]["total"] == len(rows) == manifest["errors"]["total"]
    by_reason = {}
    for row in rows:
        by_reason[row["reason"]] = by_reason.get(row["reason"], 0) + 1
    assert split["errors"]["by_reason"] == by_reason
    assert split["filenames"] == [f"val-{i:05d}.tar" for i in range(len(split["filenames"]))]
    for shard in split["shards"]:
        assert sha256_file(bad_run / shard["filename"]) == shard["sha256"]
    assert manifest["backends"]["masker"]["name"] == "box" and manifest["backends"]["inpainter"]["name"] == "patchmatch"


def test_clipped_box_and_conversions_are_recorded_in_parts(bad_tree, bad_run):
    parts = {p.key: p for p in iter_parts(bad_run)}
    clipped = next(i for i, r in bad_tree.expected_reasons.items() if r == {"box-outside-image"})
    assert parts[clipped].meta["object_box"] == [0, 4, 39, 20]
    gray = next(i for i, r in bad_tree.expected_reasons.items() if r == {"grayscale-converted"})
    assert parts[gray].meta["conversions"] == ["grayscale-converted"]
    cmyk = next(i for i, r in bad_tree.expected_reasons.items() if r == {"cmyk-converted"})
    assert parts[cmyk].crop.shape[2] == 3


def _source_pixels(tree, image_id):
    path = next(tree.root.rglob(f"{image_id}.JPEG"))
    return np.asarray(Image.open(path).convert("RGB"))


def test_parts_content_matches_the_source(tmp_path):
    tree = write_tree(tmp_path / "imagenet", count=6)
    assert extract("--source", tree.root, "--out", tmp_path / "out", "--dilation", 5) == 0
    parts = {p.key: p for p in iter_parts(tmp_path / "out" / "parts")}
    for image in tree.good:
        p = parts[image.image_id]
        source = _source_pixels(tree, image.image_id)
        largest = max(image.boxes, key=lambda b: (b[3] - b[1]) * (b[4] - b[2]))
        _, x0, y0, x1, y1 = largest
        assert p.meta["object_box"] == [x0, y0, x1, y1]
        assert np.array_equal(p.crop, source[y0 : y1 + 1, x0 : x1 + 1])  # the box crop is the source's pixels
        assert p.mask.shape == p.crop.shape[:2] and p.mask.all()  # the box masker's mask is the whole box
        union = np.zeros(source.shape[:2], bool)
        for _, bx0, by0, bx1, by1 in image.boxes:
            union[by0 : by1 + 1, bx0 : bx1 + 1] = True
        erase = dilate(union, 5)
        assert np.array_equal(p.erase, erase)
        assert np.array_equal(p.background[~erase], source[~erase])  # outside the dilated boxes: untouched
        assert not np.array_equal(p.background[erase], source[erase])  # inside: inpainted
        assert p.meta["class_index"] == class_of(image.wnid).index and p.meta["wnid"] == image.wnid
        assert (p.meta["width"], p.meta["height"]) == image.size


@pytest.mark.parametrize("rule,expected", [("first", 0), ("last", -1)])
def test_object_box_rule(tmp_path, rule, expected):
    tree = write_tree(tmp_path / "imagenet", count=1)
    assert extract("--source", tree.root, "--out", tmp_path / "out", "--object-box", rule) == 0
    part = next(iter_parts(tmp_path / "out" / "parts"))
    _, x0, y0, x1, y1 = tree.good[0].boxes[expected]
    assert part.meta["object_box"] == [x0, y0, x1, y1] and part.meta["object_box_rule"] == rule


def test_ilsvrc_and_kaggle_layouts_give_identical_parts(tmp_path):
    ilsvrc = write_tree(tmp_path / "ilsvrc", layout="ilsvrc", count=5)
    kaggle = write_tree(tmp_path / "kaggle", layout="kaggle", count=5)
    assert extract("--source", ilsvrc.root, "--out", tmp_path / "a") == 0
    assert extract("--source", kaggle.root, "--out", tmp_path / "b") == 0
    assert shard_hashes(tmp_path / "a" / "parts") == shard_hashes(tmp_path / "b" / "parts")


def test_byte_identical_for_any_worker_count_thread_count_and_batch_size(tmp_path):
    tree = write_tree(tmp_path / "imagenet", count=10, bad=True)
    runs = {"one": (1, 4, 8), "two": (2, 4, 8), "again": (1, 4, 8), "threads": (1, 1, 1), "batches": (2, 3, 3)}
    for name, (workers, io_threads, batch) in runs.items():
        assert (
            extract(
                "--source",
                tree.root,
                "--out",
                tmp_path / name,
                "--workers",
                workers,
                "--shard-size",
                3,
                "--io-threads",
                io_threads,
                "--batch-size",
                batch,
            )
            == 0
        )
    one, *others = (shard_hashes(tmp_path / n / "parts") for n in runs)
    assert len(one) >= 4 and all(other == one for other in others)
    for name in ("_info.json", "errors.jsonl"):
        assert (tmp_path / "one/parts" / name).read_bytes() == (tmp_path / "two/parts" / name).read_bytes()


def test_rerun_is_a_no_op_and_other_settings_are_refused(tmp_path, capsys):
    tree = write_tree(tmp_path / "imagenet", count=3)
    out = tmp_path / "out"
    assert extract("--source", tree.root, "--out", out) == 0
    before = shard_hashes(out / "parts")
    info_mtime = (out / "parts" / "_info.json").stat().st_mtime_ns
    capsys.readouterr()
    assert extract("--source", tree.root, "--out", out) == 0
    assert "already complete" in capsys.readouterr().out
    assert (out / "parts" / "_info.json").stat().st_mtime_ns == info_mtime
    assert extract("--source", tree.root, "--out", out, "--dilation", 5) == 2
    err = capsys.readouterr().err
    assert "dilation: 15 -> 5" in err and "--overwrite" in err
    assert extract("--source", tree.root, "--out", out, "--dilation", 5, "--overwrite") == 0
    assert shard_hashes(out / "parts") != before


def test_missing_source_exits_2_with_a_reason(tmp_path, capsys):
    assert extract("--source", tmp_path / "absent", "--out", tmp_path / "out") == 2
    assert "is not a folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _hsi(*args):
    return hsi_command("extract", "--no-progress", *args)


@pytest.mark.parametrize("kill", ["main-process", "worker"])
def test_killed_run_resumes_to_identical_output(tmp_path, kill):
    tree = write_tree(tmp_path / "imagenet", count=80)  # 40 shards: the kill lands midway
    common = ["--source", tree.root, "--shard-size", 2, "--workers", 2 if kill == "worker" else 1]
    assert subprocess.run(_hsi(*common, "--out", tmp_path / "clean"), check=False).returncode == 0

    out = tmp_path / "killed"
    process = subprocess.Popen(_hsi(*common, "--out", out), start_new_session=True)
    wait_for_states(out / "parts", 2)
    if kill == "worker":
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        os.kill(int(children[0]), signal.SIGKILL)
        assert process.wait(timeout=60) != 0
    else:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    assert not (out / "parts" / "_info.json").exists()
    assert subprocess.run(_hsi(*common, "--out", out), check=False).returncode == 0
    assert shard_hashes(out / "parts") == shard_hashes(tmp_path / "clean" / "parts")
    assert (out / "parts/_info.json").read_bytes() == (tmp_path / "clean/parts/_info.json").read_bytes()
    assert not list((out / "parts").glob("*.tmp"))


def test_yaml_config_with_flag_overrides(tmp_path):
    tree = write_tree(tmp_path / "imagenet", count=2)
    spec = tmp_path / "extract.yaml"
    spec.write_text("dilation: 3\nobject_box: first\nshard_size: 1\n")
    assert extract("--source", tree.root, "--out", tmp_path / "out", "--config", spec, "--object-box", "last") == 0
    manifest = json.loads((tmp_path / "out/parts/_info.json").read_text())
    settings = manifest["settings"]["val"]
    assert (settings["dilation"], settings["object_box"], settings["shard_size"]) == (3, "last", 1)
    assert manifest["splits"]["val"]["shard_lengths"] == [1, 1]
    spec.write_text("dilatation: 3\n")
    assert extract("--source", tree.root, "--out", tmp_path / "other", "--config", spec) == 2


def test_two_splits_share_one_parts_folder(tmp_path):
    write_tree(tmp_path / "imagenet", split="val", count=2)
    write_tree(tmp_path / "imagenet", split="train", count=3)
    out = tmp_path / "out"
    assert extract("--source", tmp_path / "imagenet", "--split", "val", "--out", out) == 0
    assert extract("--source", tmp_path / "imagenet", "--split", "train", "--out", out) == 0
    manifest = json.loads((out / "parts/_info.json").read_text())
    assert {s: v["num_samples"] for s, v in manifest["splits"].items()} == {"val": 2, "train": 3}
    assert {p.key.split("_")[0] for p in iter_parts(out / "parts", "train")} <= {"n01440764", "n01443537", "n01484850"}


def test_images_a_backend_fails_on_are_recorded_whatever_the_batch_size(tmp_path):
    from flaky_backends import FAILING_WIDTH  # registers the "flaky" masker

    tree = write_tree(tmp_path / "imagenet", count=8)
    failing = {img.image_id for img in tree.good if img.size[0] == FAILING_WIDTH}
    assert len(failing) == 2
    for batch in (1, 4):
        assert (
            extract("--source", tree.root, "--out", tmp_path / f"b{batch}", "--masker", "flaky", "--batch-size", batch)
            == 0
        )
    assert shard_hashes(tmp_path / "b1" / "parts") == shard_hashes(tmp_path / "b4" / "parts")
    rows = error_rows(tmp_path / "b4" / "parts")
    assert {r["image_id"] for r in rows if r["reason"] == "backend-failed"} == failing
    assert all("cannot segment" in r["detail"] for r in rows)
    assert {p.key for p in iter_parts(tmp_path / "b4" / "parts")} == {img.image_id for img in tree.good} - failing


def test_a_backend_that_fails_on_every_image_stops_the_run(tmp_path, capsys):
    import flaky_backends  # noqa: F401 - registers the "broken" masker

    tree = write_tree(tmp_path / "imagenet", count=3)
    assert extract("--source", tree.root, "--out", tmp_path / "out", "--masker", "broken") == 1
    err = capsys.readouterr().err
    assert "every one of the 3 decoded images" in err and "this masker is broken" in err and "resume" in err
    assert not (tmp_path / "out" / "parts" / "_info.json").exists()
