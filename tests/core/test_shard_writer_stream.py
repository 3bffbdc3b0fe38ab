"""The streaming shard writer extract uses: member by member, same bytes as `write_shard`, refuses
samples out of key order, and leaves nothing behind when a run fails midway."""

from __future__ import annotations

import hashlib

import pytest

from builder.core.hashing import copy_with_sha256
from builder.core.shard_read import iter_shard
from builder.core.shard_write import ShardWriter, write_shard
from builder.core.shards import ShardFormatError


def samples(n: int) -> list[tuple[str, dict[str, bytes]]]:
    return [(f"img_{i:04d}", {"json": b"{}", "png": bytes([i % 256]) * (i * 97 + 1)}) for i in range(n)]


def test_streamed_shard_equals_write_shard_byte_for_byte(tmp_path):
    with ShardWriter(tmp_path / "a" / "val-00000.tar") as writer:
        for key, members in samples(25):
            writer.write(key, members)
        streamed = writer.close()
    whole = write_shard(tmp_path / "b" / "val-00000.tar", list(reversed(samples(25))))
    assert (tmp_path / "a" / "val-00000.tar").read_bytes() == (tmp_path / "b" / "val-00000.tar").read_bytes()
    assert (streamed.num_samples, streamed.sha256) == (whole.num_samples, whole.sha256)
    assert [key for key, _ in iter_shard(tmp_path / "a" / "val-00000.tar")] == [key for key, _ in samples(25)]


@pytest.mark.parametrize("second", ["img_0000", "img_0001"])
def test_a_sample_out_of_order_or_twice_is_refused_and_no_file_is_left(tmp_path, second):
    target = tmp_path / "val-00000.tar"
    with pytest.raises(ShardFormatError, match="samples must come in key order"):
        with ShardWriter(target) as writer:
            writer.write("img_0001", {"json": b"{}"})
            writer.write(second, {"json": b"{}"})
    assert list(tmp_path.iterdir()) == []


def test_copy_with_sha256_copies_the_bytes_it_hashes_and_never_writes_through_a_link(tmp_path):
    source = tmp_path / "train-00000.tar"
    source.write_bytes(bytes(range(256)) * 9000)  # more than one 1 MiB block
    digest = copy_with_sha256(source, tmp_path / "copy.tar")
    assert (tmp_path / "copy.tar").read_bytes() == source.read_bytes()
    assert digest == hashlib.sha256(source.read_bytes()).hexdigest()
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "planted.tar").symlink_to(victim)
    with pytest.raises(FileExistsError):
        copy_with_sha256(source, tmp_path / "planted.tar")
    assert victim.read_text() == "mine"
