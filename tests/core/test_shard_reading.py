"""`iter_shard`, the one tar iterator: grouping by key, and its `handler=` error policy."""

from __future__ import annotations

import io
import tarfile

import pytest

from builder.core.shard_read import ShardReadError, collect_read_errors, iter_shard
from builder.core.shard_write import write_shard


def tar_of(path, members: list[tuple[str, bytes]]):
    with tarfile.open(path, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_samples_are_grouped_by_key(tmp_path):
    path = tmp_path / "val-00000.tar"
    write_shard(path, [("b", {"jpg": b"2", "cls": b"1"}), ("a", {"json": b"{}"})])
    assert list(iter_shard(path)) == [("a", {"json": b"{}"}), ("b", {"cls": b"1", "jpg": b"2"})]
    with open(path, "rb") as handle:  # an open stream reads the same
        assert [key for key, _ in iter_shard(handle)] == ["a", "b"]


def test_by_default_a_bad_member_stops_the_read_naming_shard_and_member(tmp_path):
    path = tar_of(tmp_path / "val-00001.tar", [("a.jpg", b"1"), ("../escape.jpg", b"x")])
    with pytest.raises(ShardReadError, match=r"val-00001.tar: unsafe tar member name '../escape.jpg'"):
        list(iter_shard(path))
    path = tar_of(tmp_path / "val-00002.tar", [("a.jpg", b"1"), ("a.jpg", b"2")])
    with pytest.raises(ShardReadError, match=r"val-00002.tar: member 'a.jpg' appears twice"):
        list(iter_shard(path))


def test_a_collecting_handler_skips_bad_members_and_says_why(tmp_path):
    members = [("a.jpg", b"1"), ("/etc/evil.json", b"{}"), ("a.jpg", b"2"), ("b.cls", b"3")]
    path = tar_of(tmp_path / "val-00003.tar", members)
    errors: list[ShardReadError] = []
    assert list(iter_shard(path, handler=collect_read_errors(errors))) == [("a", {"jpg": b"1"}), ("b", {"cls": b"3"})]
    assert [(e.reason, e.shard, e.key) for e in errors] == [
        ("unsafe-member", "val-00003.tar", "/etc/evil.json"),
        ("duplicate-member", "val-00003.tar", "a"),
    ]


def test_an_unreadable_or_truncated_tar_is_one_fatal_error(tmp_path):
    garbage = tmp_path / "val-00004.tar"
    garbage.write_bytes(b"not a tar at all" * 64)
    errors: list[ShardReadError] = []
    assert list(iter_shard(garbage, handler=collect_read_errors(errors))) == []
    assert [(e.reason, e.fatal) for e in errors] == [("unreadable-shard", True)]
    whole = tmp_path / "whole.tar"
    write_shard(whole, [("a", {"jpg": b"1" * 4000}), ("b", {"jpg": b"2" * 4000})])
    truncated = tmp_path / "val-00005.tar"
    truncated.write_bytes(whole.read_bytes()[:6000])  # inside b's data
    errors = []
    samples = list(iter_shard(truncated, handler=collect_read_errors(errors)))
    assert [key for key, _ in samples] == ["a"]
    assert [(e.reason, e.shard, e.key) for e in errors] == [("unreadable-shard", "val-00005.tar", "b")]
    with pytest.raises(ShardReadError, match="val-00005.tar: tar stream breaks off"):
        list(iter_shard(truncated))
