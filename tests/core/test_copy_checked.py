"""`copy_checked`: a copy replaces its target only when the bytes copied have the expected sha256."""

import hashlib
import os

import pytest

from builder.core.hashing import copy_checked


class Mismatch(Exception):
    pass


def write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_a_matching_copy_replaces_the_target_and_leaves_no_temporary(tmp_path):
    source = write(tmp_path / "source.tar", b"shard bytes" * 1000)
    target = write(tmp_path / "target.tar", b"old")
    expected = hashlib.sha256(source.read_bytes()).hexdigest()
    leftover = write(tmp_path / f"target.tar.{os.getpid()}.tmp", b"from a killed run")  # this process's own name

    assert copy_checked(source, target, expected, Mismatch) == expected
    assert target.read_bytes() == source.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source.tar", "target.tar"]
    assert not leftover.exists()


def test_a_mismatch_raises_the_callers_error_with_the_digest_and_keeps_the_target(tmp_path):
    source = write(tmp_path / "source.tar", b"changed bytes")
    target = write(tmp_path / "target.tar", b"old")
    actual = hashlib.sha256(b"changed bytes").hexdigest()

    with pytest.raises(Mismatch, match=f"^got {actual}$"):
        copy_checked(source, target, "0" * 64, lambda digest: Mismatch(f"got {digest}"))
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source.tar", "target.tar"]
