"""Hostile inputs for `hsi validate`: tar bombs, decompression bombs, malformed manifests, a crash or a
full disk mid-run, read-only datasets and non-finite tolerances. Each test builds its hostile input
and failed before its fix (issue 11, points 10, 15, 16, 19 and 20)."""

from __future__ import annotations

import errno
import io
import json
import resource
import shutil
import struct
import tarfile
from pathlib import Path

import pytest
from manifest_io import read_manifest
from parts_factory import compose_images, fake_images, fresh_copy, write_parts
from PIL import Image

from builder.core.manifest import ManifestError, write_json_atomic
from builder.core.shard_read import collect_read_errors, iter_shard
from builder.core.shard_write import write_shard
from builder.formats.parts_index import index_parts_shard
from hsi.cli import main
from validation import report as report_module
from validation.integrity import check_dataset

SPARSE_CLAIM = 3 << 30  # the 3 GiB a 10 KB shard's sparse member claims


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """A small real composed dataset (2 classes x 2 images, 48 composites) and its parts."""
    images = fake_images(["n01443537", "n02437312"], per_class=2)
    return compose_images(tmp_path_factory.mktemp("adv-validate"), images, 2, shard_size=12)


@pytest.fixture
def dataset(composed, tmp_path):
    source, parts = composed
    return fresh_copy(source, tmp_path), parts


def sparse_member(name: str, claimed: int = SPARSE_CLAIM) -> tuple[tarfile.TarInfo, io.BytesIO]:
    """A GNU sparse member (PAX 0.1 map): 16 bytes stored, `claimed` bytes when extracted."""
    info = tarfile.TarInfo(name)
    info.size = 16
    info.pax_headers = {"GNU.sparse.map": "0,16", "GNU.sparse.size": str(claimed)}
    return info, io.BytesIO(b"0" * 16)


def rewrite_with(dataset: Path, shard: str, extra: list[tuple[tarfile.TarInfo, io.BytesIO]]) -> None:
    """Rewrite `shard` with its samples plus `extra` members, recording the new size and hash."""
    samples = list(iter_shard(dataset / shard))
    with tarfile.open(dataset / shard, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for key, members in samples:
            for ext in sorted(members):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(members[ext])
                tar.addfile(info, io.BytesIO(members[ext]))
        for info, data in extra:
            tar.addfile(info, data)
    refresh_manifest(dataset, shard)


def refresh_manifest(dataset: Path, shard: str) -> None:
    from builder.core.hashing import sha256_file

    manifest = read_manifest(dataset)
    for entry in manifest["splits"]["val"]["shards"]:
        if entry["filename"] == shard:
            entry["bytes"], entry["sha256"] = (dataset / shard).stat().st_size, sha256_file(dataset / shard)
    write_json_atomic(dataset / "_info.json", manifest)


def replace_member(dataset: Path, shard: str, key: str, ext: str, data: bytes) -> None:
    samples = [(k, {**m, ext: data} if k == key else m) for k, m in iter_shard(dataset / shard)]
    write_shard(dataset / shard, samples)
    refresh_manifest(dataset, shard)


def bomb_jpeg(width: int = 60000, height: int = 60000) -> bytes:
    """A valid 16 x 16 JPEG whose frame header claims width x height (3.6 Gpx: Pillow's
    DecompressionBombError, not an OSError)."""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(buffer, format="JPEG")
    data = bytearray(buffer.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


# --- 16: tar bombs -----------------------------------------------------------------------------


def test_a_sparse_member_is_refused_unread_by_iter_shard(tmp_path):
    path = tmp_path / "val-00000.tar"
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(*sparse_member("bomb.json"))
    errors: list = []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert list(iter_shard(path, handler=collect_read_errors(errors))) == []
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: nothing inflated
    assert [(e.reason, e.key) for e in errors] == [("oversized-member", "bomb")]
    assert "sparse" in errors[0].detail


def test_a_member_larger_than_its_shard_is_refused(tmp_path):
    path = tmp_path / "val-00000.tar"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("big.jpg")
        info.size = 1 << 20
        tar.addfile(info, io.BytesIO(b"x" * (1 << 20)))
    path.write_bytes(buffer.getvalue()[:8192])  # the header claims 1 MiB, the file holds 8 KB
    errors: list = []
    list(iter_shard(path, handler=collect_read_errors(errors)))
    assert errors and errors[0].reason == "oversized-member" and "more than the whole shard" in errors[0].detail


def test_validate_names_a_sparse_bomb_in_a_composite_shard(dataset, capsys):
    folder, _ = dataset
    rewrite_with(folder, "val-00000.tar", [sparse_member("zzbomb.jpg")])
    found = [(f.reason, f.shard, f.key) for f in check_dataset(folder).failures]
    assert ("oversized-member", "val-00000.tar", "zzbomb") in found
    assert main(["validate", str(folder), "--no-previews"]) == 1
    assert "val-00000.tar/zzbomb: oversized-member" in capsys.readouterr().err


def test_the_parts_index_applies_the_same_member_rule(tmp_path):
    write_parts(tmp_path / "parts", {"val": fake_images(["n01443537"], per_class=1)})
    path = tmp_path / "parts" / "val-00000.tar"
    with tarfile.open(path, mode="a", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(*sparse_member("ILSVRC2012_val_00000009.background.png"))
    refs, issues = index_parts_shard(path, "val")
    assert [ref.key for ref in refs] == ["ILSVRC2012_val_00000001"]
    assert any(i.key == "ILSVRC2012_val_00000009" and "sparse" in i.detail for i in issues)


# --- 10: a crashed validate never leaves a PASS; decode errors are failures; shards recorded -----


def test_a_decompression_bomb_jpeg_is_a_failure_not_a_crash(dataset, capsys):
    folder, _ = dataset
    assert main(["validate", str(folder), "--no-previews"]) == 0  # an earlier PASS
    key = next(iter_shard(folder / "val-00001.tar"))[0]
    replace_member(folder, "val-00001.tar", key, "jpg", bomb_jpeg())
    assert main(["validate", str(folder)]) == 1
    report = json.loads((folder / "validation.json").read_text())
    assert report["ok"] is False
    bombs = [f for f in report["integrity"]["failures"] if f["reason"] == "jpg-decode"]
    assert [(f["shard"], f["key"]) for f in bombs] == [("val-00001.tar", key)]
    assert "DecompressionBombError" in bombs[0]["detail"]
    assert f"val-00001.tar/{key}: jpg-decode" in capsys.readouterr().err


def test_a_crash_mid_validate_leaves_no_earlier_pass(dataset, monkeypatch):
    folder, _ = dataset
    assert main(["validate", str(folder), "--no-previews"]) == 0
    assert json.loads((folder / "validation.json").read_text())["ok"] is True

    def crash(*args, **kwargs):
        raise MemoryError("killed mid-run")

    monkeypatch.setattr(report_module, "check_dataset", crash)
    with pytest.raises(MemoryError):
        main(["validate", str(folder), "--no-previews"])
    assert not (folder / "validation.json").exists() and not (folder / "validation.md").exists()


def test_a_full_disk_leaves_neither_a_report_nor_a_temporary(dataset, monkeypatch, capsys):
    folder, _ = dataset
    assert main(["validate", str(folder), "--no-previews"]) == 0
    real_write = report_module.write_json_atomic

    def full_disk(path, payload):
        real_write(path, payload)  # the temporary is written, then the disk fills at the rename
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report_module, "write_json_atomic", full_disk)
    assert main(["validate", str(folder), "--no-previews"]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not (folder / "validation.json").exists()
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_the_report_records_the_sha256_of_every_shard_it_read(dataset):
    folder, _ = dataset
    assert main(["validate", str(folder), "--no-previews"]) == 0
    manifest = read_manifest(folder)
    listed = {s["filename"]: s["sha256"] for s in manifest["splits"]["val"]["shards"]}
    assert json.loads((folder / "validation.json").read_text())["shards"] == listed


def test_write_json_atomic_removes_its_temporary_when_the_write_fails(tmp_path, monkeypatch):
    from builder.core import manifest as manifest_module

    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(manifest_module.os, "replace", full_disk)
    with pytest.raises(OSError):
        write_json_atomic(tmp_path / "validation.json", {"ok": True})
    assert list(tmp_path.iterdir()) == []


# --- 15: malformed manifests are refused with one line; member problems are rows ---------------


@pytest.mark.parametrize(
    "field,value,named",
    [
        ("splits", ["val"], "splits must be an object, got list"),
        ("shards", "val-00000.tar", "splits.val.shards must be a list, got str"),
        ("num_samples", "48", "splits.val.num_samples must be an integer, got str"),
        ("counts", {"group": {"CeO": "12"}}, "splits.val.counts.group.CeO must be a non-negative integer, got str"),
    ],
)
def test_a_malformed_manifest_is_refused_in_one_line(dataset, capsys, field, value, named):
    folder, _ = dataset
    manifest = read_manifest(folder)
    if field == "splits":
        manifest["splits"] = value
    else:
        manifest["splits"]["val"][field] = value
    write_json_atomic(folder / "_info.json", manifest)
    with pytest.raises(ManifestError, match=named):
        check_dataset(folder)
    assert main(["validate", str(folder)]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (folder / "validation.json").exists() and not (folder / "previews").exists()


def test_unsafe_and_repeated_shard_names_are_failure_rows(dataset, tmp_path):
    folder, _ = dataset
    outside = tmp_path / "victim.tar"
    shutil.copy(folder / "val-00000.tar", outside)
    manifest = read_manifest(folder)
    shards = manifest["splits"]["val"]["shards"]
    shards.append({**shards[0], "filename": "../victim.tar"})
    shards.append(dict(shards[1]))
    entry = manifest["splits"]["val"]
    entry["filenames"] = [s["filename"] for s in shards]
    entry["shard_lengths"] = [s["num_samples"] for s in shards]
    entry["num_samples"] = sum(entry["shard_lengths"])
    write_json_atomic(folder / "_info.json", manifest)
    checks = {(f.reason, f.shard) for f in check_dataset(folder).failures}
    assert ("unsafe-shard-name", "../victim.tar") in checks
    assert ("duplicate-shard", shards[1]["filename"]) in checks


# --- 19: read-only datasets: --out is honoured --------------------------------------------------


def test_out_is_honoured_for_a_dataset_folder(dataset, tmp_path):
    folder, parts = dataset
    before = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    out = tmp_path / "reports"
    assert main(["validate", str(folder), "--parts", str(parts), "--out", str(out)]) == 0
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == before
    assert json.loads((out / "validation.json").read_text())["ok"] is True
    assert (out / "previews" / "contact_sheet.png").is_file()


def test_a_full_disk_while_writing_the_score_outputs_is_one_clear_error(dataset, monkeypatch, capsys):
    folder, parts = dataset

    def full_disk(scores, out_dir):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report_module, "write_scores_outputs", full_disk)
    assert main(["validate", str(folder), "--parts", str(parts), "--no-previews"]) == 2
    err = capsys.readouterr().err
    assert "cannot write the report" in err and "No space left on device" in err and "Traceback" not in err
    assert not (folder / "validation.json").exists()


# --- 20: non-finite tolerances; types named ------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_tolerance_that_is_not_finite_and_non_negative_is_refused(dataset, capsys, value):
    folder, parts = dataset
    assert main(["validate", str(folder), "--parts", str(parts), "--tolerance", value]) == 2
    assert "--tolerance" in capsys.readouterr().err
    assert not (folder / "validation.json").exists()


def test_the_tolerance_is_recorded_in_the_report(dataset):
    folder, parts = dataset
    assert main(["validate", str(folder), "--parts", str(parts), "--tolerance", "7.5", "--no-previews"]) == 0
    report = json.loads((folder / "validation.json").read_text())
    assert report["integrity"]["tolerance"] == 7.5
    assert "tolerance 7.5" in (folder / "validation.md").read_text()


def test_a_string_sample_count_is_named_with_its_type(dataset, capsys):
    folder, _ = dataset
    manifest = read_manifest(folder)
    manifest["splits"]["val"]["shards"][0]["num_samples"] = str(manifest["splits"]["val"]["shards"][0]["num_samples"])
    write_json_atomic(folder / "_info.json", manifest)
    assert main(["validate", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "splits.val.shards[0].num_samples must be a non-negative integer, got str '12'" in err
