"""Hostile sources for `stream()` (issue 11): manifests and release metadata naming paths outside
the folder, planted links, and broken shards whose errors must name the shard and the sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from release_factory import make_composed_dataset

from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from builder.formats.stream import StreamError, stream


def rewrite(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_manifest_filenames_leading_out_of_the_dataset_are_refused(tmp_path):
    outside = make_composed_dataset(tmp_path / "other", splits={"test": 2})
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 2})
    hostile = f"../../other/{outside.name}/test-00000.tar"
    rewrite(dataset / "_info.json", lambda m: m["splits"]["test"].update(filenames=[hostile]))
    with pytest.raises(StreamError, match="not of the form <split>-NNNNN.tar"):
        stream(dataset, split="test")
    rewrite(dataset / "_info.json", lambda m: m["splits"]["test"].update(filenames=[str(outside / "test-00000.tar")]))
    with pytest.raises(StreamError, match="not of the form"):
        stream(dataset, split="test")


def test_release_metadata_naming_a_config_outside_the_release_is_refused(tmp_path):
    make_composed_dataset(tmp_path, config="outside", splits={"test": 2})  # tmp/outside: a readable dataset
    release = tmp_path / "rel"
    (release / "data").mkdir(parents=True)  # so that rel/data/../../outside resolves
    (release / "_release.json").write_text(
        json.dumps({"default_config": "../../outside", "configs": {"../../outside": {}}})
    )
    with pytest.raises(StreamError, match="not one safe path component"):
        stream(release, split="test")
    with pytest.raises(StreamError, match="not a safe split name"):
        stream(tmp_path / "outside", split="../test")


def test_a_config_folder_linked_out_of_the_release_is_refused(tmp_path):
    outside = make_composed_dataset(tmp_path / "elsewhere", splits={"test": 2})
    release = tmp_path / "rel"
    (release / "data").mkdir(parents=True)
    (release / "data" / outside.name).symlink_to(outside)
    (release / "_release.json").write_text(json.dumps({"default_config": outside.name, "configs": {outside.name: {}}}))
    with pytest.raises(StreamError, match="leads outside"):
        stream(release, split="test")


def test_an_undecodable_sample_is_named_with_its_shard(tmp_path):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 6}, shard_size=3)
    shard = dataset / "test-00001.tar"
    samples = [
        (key, dict(members, jpg=b"not a jpeg") if key == "test_000004" else members)
        for key, members in iter_shard(shard)
    ]
    shard.unlink()
    stats = write_shard(shard, samples)
    rewrite(
        dataset / "_info.json",
        lambda m: m["splits"]["test"]["shards"][1].update(sha256=stats.sha256, bytes=stats.bytes),
    )
    seen = []
    with pytest.raises(StreamError, match=r"test-00001\.tar: sample 'test_000004' failed to decode"):
        for sample in stream(dataset, split="test"):
            seen.append(sample["key"])
    assert seen == ["test_000000", "test_000001", "test_000002", "test_000003"]


def test_a_truncated_shard_is_named_with_the_last_sample_read(tmp_path):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 6}, shard_size=3)
    shard = dataset / "test-00000.tar"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2 + 100])
    with pytest.raises(
        StreamError, match=r"shard .*test-00000\.tar: cannot be read (after sample 'test_0000\d+'|before)"
    ):
        list(stream(dataset, split="test"))
