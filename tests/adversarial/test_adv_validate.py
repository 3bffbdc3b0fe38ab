"""Hostile inputs for `hsi validate`: tar bombs. Each test builds its hostile input and failed before
its fix (issue 11, point 16)."""

from __future__ import annotations

import io
import resource
import shutil
import tarfile
from pathlib import Path

import pytest
from parts_factory import fake_images, write_parts

from builder.compose.stage import compose_dataset
from builder.core.shards import collect_read_errors, iter_shard, read_manifest, write_json_atomic
from builder.core.stage import RunOptions
from builder.formats.parts_index import index_parts_shard
from hsi.cli import main
from validation.integrity import check_dataset

SPARSE_CLAIM = 3 << 30  # the 3 GiB a 10 KB shard's sparse member claims


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """A small real composed dataset (2 classes x 2 images, 48 composites) and its parts."""
    root = tmp_path_factory.mktemp("adv-validate")
    write_parts(root / "parts", {"val": fake_images(["n01443537", "n02437312"], per_class=2)}, shard_size=2)
    summary = compose_dataset(root / "parts", "hard-spurious-imagenet", root / "out", overrides={"shard_size": 12},
                              options=RunOptions(progress=False))
    return summary.dataset_dir, root / "parts"


@pytest.fixture
def dataset(composed, tmp_path):
    source, parts = composed
    target = tmp_path / source.name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("validation.*", "previews", "scores_*"))
    return target, parts


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
    from builder.core.shards import sha256_file

    manifest = read_manifest(dataset)
    for entry in manifest["splits"]["val"]["shards"]:
        if entry["filename"] == shard:
            entry["bytes"], entry["sha256"] = (dataset / shard).stat().st_size, sha256_file(dataset / shard)
    write_json_atomic(dataset / "_info.json", manifest)


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
    found = [(f.check, f.shard, f.key) for f in check_dataset(folder).failures]
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
