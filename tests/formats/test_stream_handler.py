"""`stream(handler=...)`: a broken shard stops a training read by default, or is skipped and recorded."""

from __future__ import annotations

import io
import tarfile

import pytest
from release_factory import make_composed_dataset

from builder.core.shard_read import ShardReadError, collect_read_errors, iter_shard
from builder.formats.stream import StreamError, stream


def add_unsafe_member(shard):
    samples = list(iter_shard(shard))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in [("../escape.jpg", b"x")] + [(f"{k}.{ext}", m[ext]) for k, m in samples for ext in sorted(m)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    shard.write_bytes(buffer.getvalue())


def test_a_bad_member_raises_by_default_and_is_skipped_with_a_collecting_handler(tmp_path):
    pytest.importorskip("torch")
    dataset = make_composed_dataset(tmp_path, splits={"test": 8}, shard_size=4)
    add_unsafe_member(dataset / "test-00001.tar")
    with pytest.raises(StreamError, match="test-00001.tar: unsafe tar member name '../escape.jpg'"):
        list(stream(dataset, split="test"))
    errors: list[ShardReadError] = []
    keys = [sample["key"] for sample in stream(dataset, split="test", handler=collect_read_errors(errors))]
    assert len(keys) == 8
    assert [(e.reason, e.shard, e.key) for e in errors] == [("unsafe-member", "test-00001.tar", "../escape.jpg")]
