"""`hsi validate` on a real composed dataset (fake ImageNet -> extract -> compose), and on corrupted
copies of it: every corruption is detected and named by shard and key."""

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from fake_imagenet import extract_args, write_tree
from manifest_io import read_manifest
from parts_factory import compose_quietly, fresh_copy
from PIL import Image

from builder.core.hashing import sha256_file
from builder.core.manifest import write_json_atomic
from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from hsi.cli import main
from validation.integrity import check_dataset, failure_line
from validation.report import validate_dataset


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A real composed val dataset: 8 fake images, 12 composites each, 4 shards."""
    root = tmp_path_factory.mktemp("validation-src")
    tree = write_tree(root / "imagenet", split="val", count=8)
    out = root / "out"
    assert main(extract_args(tree.root, out, "--split", "val", "--shard-size", "4")) == 0
    summary = compose_quietly(out / "parts", "hard-spurious-imagenet", out / "composed", overrides={"shard_size": 24})
    return summary.dataset_dir, out / "parts"


@pytest.fixture
def copy(built, tmp_path):
    dataset, parts = built
    return fresh_copy(dataset, tmp_path), parts


def samples_of(dataset: Path, shard: str) -> list:
    return list(iter_shard(dataset / shard))


def rewrite_shard(dataset: Path, shard: str, samples) -> None:
    """Rewrite a shard and record its new size and hash, so only the content change is left to find."""
    stats = write_shard(dataset / shard, samples)
    manifest = read_manifest(dataset)
    for entry in manifest["splits"]["val"]["shards"]:
        if entry["filename"] == shard:
            entry["bytes"], entry["sha256"] = stats.bytes, stats.sha256
    write_json_atomic(dataset / "_info.json", manifest)


def failures(dataset: Path, parts: Path | None = None) -> list[tuple[str, str | None, str | None]]:
    return sorted((f.reason, f.shard, f.key) for f in check_dataset(dataset, parts).failures)


def test_clean_dataset_passes_and_writes_both_reports(built, tmp_path, capsys):
    dataset, parts = built
    manifest = read_manifest(dataset)
    assert len(manifest["splits"]["val"]["filenames"]) >= 3
    assert main(["validate", str(dataset), "--parts", str(parts)]) == 0
    report = json.loads((dataset / "validation.json").read_text())
    assert report["ok"] is True and report["integrity"]["failures"] == []
    assert report["integrity"]["samples_checked"] == 96 == manifest["splits"]["val"]["num_samples"]
    assert report["integrity"]["placements_compared"] == 96  # every pasted box matched its crop
    assert report["integrity"]["counts"]["val"]["group_size"] == manifest["splits"]["val"]["counts"]["group_size"]
    assert report["target"]["fingerprint"] == manifest["fingerprint"]
    assert report["previews"] == [
        "previews/contact_sheet.png",
        "previews/parts_grid.png",
        "previews/worst_fills.png",
        "previews/score_distributions.png",
    ]
    # the parts' boxes give the paper's scores for free: 4 classes of 2 images each
    assert report["scores"]["summary"]["classes"] == 4 and report["scores"]["summary"]["images"] == 8
    assert "**PASS**" in (dataset / "validation.md").read_text()
    sheet = Image.open(dataset / "previews" / "contact_sheet.png")
    assert sheet.width > 3 * 3 * 112 and sheet.height > 4 * 112  # 3 sizes x 3 samples, 4 group rows
    assert "0 failures" in capsys.readouterr().out


def test_report_is_deterministic(built, tmp_path):
    dataset, parts = built
    first = validate_dataset(dataset, parts_dir=parts)
    digests = [sha256_file(p) for p in (first.json_path, first.md_path, *first.preview_paths)]
    second = validate_dataset(dataset, parts_dir=parts)
    assert digests == [sha256_file(p) for p in (second.json_path, second.md_path, *second.preview_paths)]
    assert first.ok and "/" not in json.loads(first.json_path.read_text())["target"]["folder"]


def test_corrupt_member_is_named(copy, capsys):
    dataset, parts = copy
    shard = "val-00001.tar"
    key = samples_of(dataset, shard)[2][0]
    with tarfile.open(dataset / shard) as tar:
        offset = tar.getmember(f"{key}.jpg").offset_data
    with open(dataset / shard, "r+b") as handle:  # same size, broken JPEG header
        handle.seek(offset)
        handle.write(b"\0" * 64)
    assert failures(dataset) == [("jpg-decode", shard, key), ("shard-sha256", shard, None)]
    assert main(["validate", str(dataset), "--no-previews"]) == 1
    err = capsys.readouterr().err
    assert f"{shard}/{key}: jpg-decode" in err and f"{shard}: shard-sha256" in err


def test_deleted_shard_is_named_with_the_counts_it_breaks(copy):
    dataset, _ = copy
    (dataset / "val-00002.tar").unlink()
    found = failures(dataset)
    assert ("missing-shard", "val-00002.tar", None) in found
    assert ("split-count", None, None) in found
    assert {check for check, _, _ in found} == {"missing-shard", "split-count", "count-mismatch"}
    assert not validate_dataset(dataset).ok


def test_changed_counts_are_named(copy):
    dataset, _ = copy
    manifest = read_manifest(dataset)
    held = manifest["splits"]["val"]["counts"]["group"]["CeO"]
    manifest["splits"]["val"]["counts"]["group"]["CeO"] += 1
    manifest["splits"]["val"]["shards"][0]["num_samples"] -= 1
    manifest["splits"]["val"]["shard_lengths"][0] -= 1
    manifest["splits"]["val"]["num_samples"] -= 1  # a manifest at odds with itself is refused before any check
    write_json_atomic(dataset / "_info.json", manifest)
    result = check_dataset(dataset)
    lines = sorted(failure_line(f) for f in result.failures)
    assert f"_info.json: count-mismatch: group CeO: manifest says {held + 1}, shards hold {held}" in lines
    assert {(f.reason, f.split, f.action) for f in result.failures if f.reason == "count-mismatch"} == {
        ("count-mismatch", "val", "failed")
    }
    assert [(f.reason, f.shard) for f in result.failures if f.reason == "shard-count"] == [
        ("shard-count", "val-00000.tar")
    ]


def test_same_class_random_background_is_named(copy):
    dataset, parts = copy
    shard = "val-00000.tar"
    samples = samples_of(dataset, shard)
    victim = next(k for k, m in samples if json.loads(m["json"])["background"] == "random")
    changed = []
    for key, members in samples:
        if key == victim:
            meta = json.loads(members["json"])
            meta["background_wnid"], meta["background_class_index"] = meta["wnid"], meta["class_index"]
            members = {**members, "json": json.dumps(meta, sort_keys=True).encode()}
        changed.append((key, members))
    rewrite_shard(dataset, shard, changed)
    assert failures(dataset, parts) == [("own-class-background", shard, victim)]


def test_moved_pasted_box_is_named(copy):
    dataset, parts = copy
    shard = "val-00001.tar"
    samples = samples_of(dataset, shard)
    # a corner composite whose box is declared at the centre instead: still inside the canvas
    victim = next(k for k, m in samples if json.loads(m["json"])["position"] == "top-right")
    outside = next(k for k, m in samples if k != victim)
    changed = []
    for key, members in samples:
        meta = json.loads(members["json"])
        if key == victim:
            meta["box_x"] = meta["box_y"] = (224 - meta["box_w"]) // 2
        if key == outside:
            meta["box_x"] = 224 - meta["box_w"] + 10  # off the canvas
        changed.append((key, {**members, "json": json.dumps(meta, sort_keys=True).encode()}))
    rewrite_shard(dataset, shard, changed)
    # the pixels show the object is not where the box says, and the box is not where the position puts it
    assert failures(dataset, parts) == sorted(
        [
            ("background-pixels", shard, victim),
            ("placement", shard, victim),
            ("placement-position", shard, victim),
            ("placement-bounds", shard, outside),
            ("placement-position", shard, outside),
        ]
    )
    # without the parts, the position still tells where a box must be; the one off the canvas is named too
    assert failures(dataset) == sorted(
        [
            ("placement-position", shard, victim),
            ("placement-bounds", shard, outside),
            ("placement-position", shard, outside),
        ]
    )


def test_unsafe_member_names_and_repeated_keys_are_rejected(copy):
    dataset, _ = copy
    shard = "val-00003.tar"
    samples = samples_of(dataset, shard)
    repeated = samples_of(dataset, "val-00000.tar")[0]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in [("../escape.jpg", b"x"), ("/etc/evil.json", b"{}")] + [
            (f"{key}.{ext}", members[ext]) for key, members in [*samples, repeated] for ext in sorted(members)
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (dataset / shard).write_bytes(buffer.getvalue())
    found = failures(dataset)
    assert ("unsafe-member", shard, "../escape.jpg") in found
    assert ("unsafe-member", shard, "/etc/evil.json") in found
    assert ("duplicate-key", shard, repeated[0]) in found
    assert ("shard-count", shard, None) in found  # one sample more than recorded


def test_bad_json_schema_and_label_are_named(copy):
    dataset, _ = copy
    shard = "val-00002.tar"
    samples = samples_of(dataset, shard)
    (k1, m1), (k2, m2) = samples[0], samples[1]
    meta = json.loads(m1["json"])
    del meta["tier"]
    changed = [(k1, {**m1, "json": json.dumps(meta).encode()}), (k2, {**m2, "cls": b"999"}), *samples[2:]]
    rewrite_shard(dataset, shard, changed)
    found = check_dataset(dataset).failures
    assert sorted((f.reason, f.key) for f in found if f.key) == sorted([("schema", k1), ("cls", k2)])
    # the sample that breaks the schema cannot be counted, so the manifest's totals disagree too
    assert {f.reason for f in found if not f.key} == {"count-mismatch"}
    assert any("missing keys ['tier']" in f.detail for f in found)


def test_placement_check_tolerates_jpeg_but_not_a_swapped_object(copy):
    dataset, parts = copy
    shard = "val-00000.tar"
    samples = samples_of(dataset, shard)
    metas = {k: json.loads(m["json"]) for k, m in samples}
    # paste another image's object into one composite's declared box
    victim = next(k for k, m in metas.items() if m["position"] == "center" and m["size"] == 112)
    donor_source = next(m["source_id"] for m in metas.values() if m["source_id"] != metas[victim]["source_id"])
    meta = metas[victim]
    changed = []
    for key, members in samples:
        if key == victim:
            image = np.asarray(Image.open(io.BytesIO(members["jpg"])).convert("RGB")).copy()
            other = next(
                m
                for m in metas.values()
                if m["source_id"] == donor_source and m["size"] == 112 and m["position"] == "center"
            )
            other_key = next(k for k, m in metas.items() if m is other)
            other_image = np.asarray(Image.open(io.BytesIO(dict(samples)[other_key]["jpg"])).convert("RGB"))
            y, x, s = meta["box_y"], meta["box_x"], meta["box_w"]
            image[y : y + s, x : x + s] = other_image[y : y + s, x : x + s]
            buffer = io.BytesIO()
            Image.fromarray(image).save(buffer, format="JPEG", quality=95)
            members = {**members, "jpg": buffer.getvalue()}
        changed.append((key, members))
    rewrite_shard(dataset, shard, changed)
    assert failures(dataset, parts) == [("placement", shard, victim)]


def test_parts_folder_validates_and_usage_errors_exit_2(built, tmp_path, capsys):
    _, parts = built
    copy = tmp_path / "parts"
    shutil.copytree(parts, copy)
    assert main(["validate", str(copy)]) == 0
    report = json.loads((copy / "validation.json").read_text())
    assert report["target"]["stage"] == "extract" and report["integrity"]["samples_checked"] == 8
    assert report["previews"] == [
        "previews/parts_grid.png",
        "previews/worst_fills.png",
        "previews/score_distributions.png",
    ]
    assert main(["validate", str(tmp_path / "missing")]) == 2
    assert main(["validate"]) == 2
    (tmp_path / "not-parts").mkdir()
    assert main(["validate", str(copy), "--parts", str(tmp_path / "not-parts")]) == 2
    assert "is not a finished parts folder" in capsys.readouterr().err


def test_parts_folder_with_a_missing_member_and_a_wrong_crop_is_named(built, tmp_path):
    _, parts = built
    copy = tmp_path / "parts"
    shutil.copytree(parts, copy)
    shard = "val-00000.tar"
    samples = samples_of(copy, shard)
    (k1, m1), (k2, m2) = samples[0], samples[1]
    small = io.BytesIO()
    Image.new("RGB", (3, 3)).save(small, format="PNG")
    changed = [
        (k1, {e: d for e, d in m1.items() if e != "erase.png"}),
        (k2, {**m2, "crop.png": small.getvalue()}),
        *samples[2:],
    ]
    stats = write_shard(copy / shard, changed)
    manifest = read_manifest(copy)
    manifest["splits"]["val"]["shards"][0].update(bytes=stats.bytes, sha256=stats.sha256)
    write_json_atomic(copy / "_info.json", manifest)
    assert failures(copy) == sorted([("members", shard, k1), ("crop-size", shard, k2)])


def test_parts_that_do_not_read_are_a_placement_parts_failure_not_a_crash(built, tmp_path):
    dataset, parts = built
    broken_parts = tmp_path / "parts"
    shutil.copytree(parts, broken_parts)
    shard = read_manifest(broken_parts)["splits"]["val"]["filenames"][0]
    victim = samples_of(broken_parts, shard)[0][0]
    rewritten = [
        (key, {**m, "crop.png": b"not a png"} if key == victim else m) for key, m in samples_of(broken_parts, shard)
    ]
    write_shard(broken_parts / shard, rewritten)  # found through the offset index, as compose finds it
    found = check_dataset(dataset, broken_parts).failures
    broken = [f for f in found if f.reason == "placement-parts"]
    assert broken and all(victim in f.detail and "do not read" in f.detail for f in broken)
    assert {f.reason for f in found} == {"placement-parts"}
