"""Hostile and damaged kept-image files (`_state/<shard>.<start>.partial`, builder.core.shard_partial):
a torn tail or a flipped byte ends a file at the last whole image, a file of other settings, of
another shard, a link or a record whose sample is not our tar members is never used, and in every
case the resumed run finishes with the bytes of an uninterrupted one."""

from __future__ import annotations

import shutil
import struct

import flaky_backends  # noqa: F401 - registers the "counting" masker
import pytest
from fake_imagenet import shard_hashes, write_tree
from kept_images import SHARD, interrupted_extract, kept_images, masked_lines, partials

from builder.core.config import fingerprint, load_settings
from builder.core.shard_partial import MAGIC, PartialWriter, kept_samples
from builder.core.shard_write import sample_blocks
from hsi.cli import main


def extract(*args) -> int:
    return main(["extract", "--no-progress", *map(str, args)])


@pytest.fixture
def case(tmp_path, monkeypatch):
    """An uninterrupted run, and a run Ctrl-C'd after 4 of its 8 images (kept in one partial file)."""
    log = tmp_path / "masked.log"
    monkeypatch.setenv("HSI_TEST_MASK_LOG", str(log))
    tree = write_tree(tmp_path / "imagenet", count=8)
    ids = sorted(image.image_id for image in tree.good)
    args = ["--source", tree.root, "--masker", "counting", "--batch-size", 1]
    assert extract(*args, "--out", tmp_path / "clean") == 0
    out = tmp_path / "out" / "parts"
    assert interrupted_extract([*args, "--out", out.parent], 4, monkeypatch) == 130
    assert len(kept_images(out, ids)) == 4
    log.unlink()

    class Case:
        def resume(self) -> int:
            """Resume; how many images it computed. The result equals the uninterrupted run."""
            assert extract(*args, "--out", out.parent) == 0
            assert shard_hashes(out) == shard_hashes(tmp_path / "clean" / "parts")
            for name in ("_info.json", "errors.jsonl"):
                assert (out / name).read_bytes() == (tmp_path / "clean" / "parts" / name).read_bytes()
            assert not partials(out)
            return len(masked_lines(log))

    found = Case()
    found.tmp, found.out, found.ids, found.args, found.monkeypatch = tmp_path, out, ids, args, monkeypatch
    (found.partial,) = partials(out)
    return found


def test_a_torn_last_image_is_discarded(case):
    data = case.partial.read_bytes()
    case.partial.write_bytes(data[:-100])  # the kill landed inside the 4th image's record
    assert len(kept_images(case.out, case.ids)) == 3
    assert case.resume() == 5


def test_a_flipped_byte_ends_the_file_at_the_image_before(case):
    data = bytearray(case.partial.read_bytes())
    second = kept_images(case.out, case.ids)[1]
    data[second.offset + second.size // 2] ^= 0xFF
    case.partial.write_bytes(bytes(data))
    assert sorted(kept_images(case.out, case.ids)) == [0]
    assert case.resume() == 7


def test_kept_images_of_other_settings_are_not_used(case, monkeypatch):
    other = case.tmp / "other" / "parts"
    assert interrupted_extract([*case.args, "--dilation", 5, "--out", other.parent], 4, monkeypatch) == 130
    (theirs,) = partials(other)
    shutil.copyfile(theirs, case.partial)  # same name, same images, made with --dilation 5
    assert kept_images(case.out, case.ids) == {}
    assert len(kept_images(other, case.ids)) == 4
    (case.tmp / "masked.log").unlink()  # the other run's images
    assert case.resume() == 8


def test_a_file_renamed_to_another_shard_or_start_is_not_used(case):
    moved = case.partial.with_name(f"{SHARD}.000002.partial")
    case.partial.rename(moved)  # its records say start 0: at 2 they are not the shard's images
    assert kept_images(case.out, case.ids) == {}
    other_shard = case.partial.with_name("val-00001.tar.000000.partial")
    moved.rename(other_shard)
    assert kept_images(case.out, case.ids) == {}
    assert case.resume() == 8
    assert other_shard.exists()  # not this split's plan: left alone by the run ...
    assert extract(*case.args, "--out", case.out.parent, "--overwrite") == 0
    assert not other_shard.exists()  # ... and removed with the split by --overwrite


def test_a_link_in_place_of_a_partial_file_is_neither_read_nor_written_through(case):
    outside = case.tmp / "outside.bin"
    shutil.copyfile(case.partial, outside)
    case.partial.unlink()
    case.partial.symlink_to(outside)
    before = outside.read_bytes()
    assert kept_images(case.out, case.ids) == {}
    assert case.resume() == 8
    assert outside.read_bytes() == before


def test_lengths_no_writer_gave_are_refused_without_reading_them(case):
    data = case.partial.read_bytes()
    header = len(MAGIC)
    case.partial.write_bytes(data[:header] + struct.pack(">IQ", 2**32 - 1, 2**63) + data[header + 12 :])
    assert kept_images(case.out, case.ids) == {}
    assert case.resume() == 8


def test_a_record_with_a_right_digest_but_foreign_sample_bytes_is_not_used(case):
    settings = (load_settings(case.out) or {})["val"]
    case.partial.unlink()
    with PartialWriter(case.out, SHARD, 0, fingerprint(settings)) as writer:
        good = sample_blocks(case.ids[0], {"json": b"{}"})
        writer.append(case.ids[0], case.ids[0], good, {"issues": [], "decoded": True, "failed": False})
        writer.append(case.ids[1], case.ids[1], b"\0" * 1024, {"issues": [], "decoded": True, "failed": False})
    kept = kept_samples(case.out, SHARD, case.ids, fingerprint(settings))
    assert sorted(kept) == [0]  # the crafted first record is well formed; the second is no tar member
    # an issue row of an unknown reason is not an image's outcome either
    case.partial.unlink()
    with PartialWriter(case.out, SHARD, 0, fingerprint(settings)) as writer:
        row = {"image_id": case.ids[0], "reason": "made-up", "detail": "", "stage": "extract"}
        writer.append(case.ids[0], None, b"", {"issues": [row], "decoded": False, "failed": False})
    assert kept_images(case.out, case.ids) == {}
    assert case.resume() == 8
