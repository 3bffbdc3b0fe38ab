"""Hostile ImageNet trees against the extract side (issue 11): odd images, hostile names, annotation
files in the wrong encoding, links and loops. Each input is built here; each test failed before its
fix. Every bad input must end as a row in errors.jsonl, counted in the manifest, never a crash."""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from fake_imagenet import WNIDS, extract_args, synthetic_photo, voc_xml, write_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from builder.core.records import Box, SourceImage
from builder.core.shard_read import iter_shard, split_member_name
from builder.core.shard_write import write_shard
from builder.core.shards import ShardFormatError, check_key
from builder.extract.images import decode_image
from builder.extract.shard_builder import (
    ExtractConfig,
    ExtractShardBuilder,
    _Decoded,
    extract_batch,
    load_backends,
)
from builder.extract.sources import MAX_IMAGE_ID_LENGTH, image_id_problem, load_sources
from builder.formats.composites import sample_key
from hsi.cli import main

TENCH = WNIDS[0]


def extract(source: Path, out: Path, *extra) -> int:
    return main(extract_args(source, out, *map(str, extra)))


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "parts" / "errors.jsonl").read_text("utf-8").splitlines()]


def counted(out: Path) -> dict[str, int]:
    manifest = json.loads((out / "parts" / "_info.json").read_text("utf-8"))
    return manifest["splits"]["val"]["errors"]["by_reason"]


def jpeg(seed: int = 3, size=(40, 32)) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(synthetic_photo(seed, *size)).save(buffer, format="JPEG")
    return buffer.getvalue()


def add_image(root: Path, name: str, xml: str | None = None) -> None:
    """An image `name` (a file name under val/) with its XML beside the others."""
    (root / "val" / name).write_bytes(jpeg())
    stem = name.rsplit(".", 1)[0]
    (root / "bbox" / "val" / f"{stem}.xml").write_text(xml or voc_xml(stem, (40, 32), [(TENCH, 2, 2, 20, 20)]))


def good_tree(tmp_path: Path) -> Path:
    write_tree(tmp_path / "imagenet", count=4)
    return tmp_path / "imagenet"


# --- 7: 16-bit grayscale -------------------------------------------------------------------------


def test_16_bit_grayscale_png_keeps_its_tones(tmp_path):
    values = (np.arange(64 * 32, dtype=np.uint32).reshape(32, 64) * 32).astype(np.uint16)  # 0 .. 65504
    path = tmp_path / "n01440764_1.png"
    Image.fromarray(values).save(path)
    decoded = decode_image(path)
    expected = (values.astype(np.uint32) * 255 + 32767) // 65535
    assert np.array_equal(decoded.rgb[..., 0], expected) and np.array_equal(decoded.rgb[..., 2], expected)
    assert decoded.rgb.min() == 0 and decoded.rgb.max() == 255  # not clipped to white
    assert [reason for reason, _ in decoded.notes] == ["grayscale-converted"]
    assert "16 to 8 bits" in decoded.notes[0][1]


# --- 8: --max-pixels above Pillow's own limit ----------------------------------------------------


def test_max_pixels_admits_images_above_pillows_own_limit(tmp_path, monkeypatch):
    # Pillow's limit made small, as its 89,478,485 is to the largest ImageNet images
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000)
    path = tmp_path / "big.png"
    Image.fromarray(synthetic_photo(1, 100, 100)).save(path)
    assert decode_image(path, max_pixels=20_000).rgb.shape == (100, 100, 3)
    with pytest.raises(Exception, match="too-many-pixels"):
        decode_image(path, max_pixels=5_000)


def test_max_pixels_is_pillows_limit_in_worker_processes_too(tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000)  # forked workers inherit it
    root = good_tree(tmp_path)
    assert extract(root, tmp_path / "out", "--workers", 2, "--shard-size", 2, "--max-pixels", 10_000_000) == 0
    assert not [row for row in rows(tmp_path / "out") if row["reason"] == "too-many-pixels"]
    assert json.loads((tmp_path / "out" / "parts" / "_info.json").read_text())["splits"]["val"]["num_samples"] == 4


# --- 12: symlinked class folders -----------------------------------------------------------------


def test_symlinked_class_folders_are_followed_and_loops_reported(tmp_path):
    tree = write_tree(tmp_path / "imagenet", split="train", count=8)
    train = tmp_path / "imagenet" / "train"
    moved = tmp_path / "elsewhere" / WNIDS[1]
    moved.parent.mkdir()
    (train / WNIDS[1]).rename(moved)
    (train / WNIDS[1]).symlink_to(moved, target_is_directory=True)
    (train / WNIDS[0] / "loop").symlink_to(train, target_is_directory=True)  # back to the top
    listing = load_sources(tmp_path / "imagenet", "train", announce=lambda _: None)
    assert {r.image_id for r in listing.records} == {image.image_id for image in tree.good}
    loops = [issue for issue in listing.issues if issue.reason == "folder-loop"]
    assert len(loops) == 1 and "loop" in loops[0].detail
    assert not [issue for issue in listing.issues if issue.reason == "annotation-without-image"]


# --- 13: a repaired input ------------------------------------------------------------------------


def test_a_repaired_image_is_not_taken_as_finished(tmp_path, capsys):
    root = good_tree(tmp_path)
    image = sorted((root / "val").glob("*.JPEG"))[0]
    whole = image.read_bytes()
    image.write_bytes(whole[: len(whole) // 2])
    out = tmp_path / "out"
    assert extract(root, out) == 0
    assert [row["reason"] for row in rows(out)] == ["truncated-image"]
    image.write_bytes(whole)  # the user repairs the download
    capsys.readouterr()
    assert extract(root, out) == 2  # before the fix: 0, "already complete", the stale row kept
    message = capsys.readouterr().err
    assert "changed" in message and "--overwrite" in message
    assert extract(root, out, "--overwrite") == 0
    assert rows(out) == [] and counted(out) == {}
    assert json.loads((out / "parts" / "_info.json").read_text())["splits"]["val"]["num_samples"] == 4


# --- 14: inputs that stopped a run ---------------------------------------------------------------


def _xml_coordinate(value: str):
    def plant(root: Path) -> str:
        xml = voc_xml("ILSVRC2012_val_90000001", (40, 32), [(TENCH, 2, 2, 20, 20)]).replace(
            "<xmax>20</xmax>", f"<xmax>{value}</xmax>"
        )
        add_image(root, "ILSVRC2012_val_90000001.JPEG", xml)
        return "malformed-annotation"

    return plant


def _xml_path(kind: str):
    def plant(root: Path) -> str:
        add_image(root, "ILSVRC2012_val_90000002.JPEG")
        xml = root / "bbox" / "val" / "ILSVRC2012_val_90000002.xml"
        xml.unlink()
        if kind == "folder":
            xml.mkdir()
        elif kind == "dangling":
            xml.symlink_to(root / "nowhere.xml")
        elif kind == "loop":
            xml.symlink_to(xml)
        else:
            os.mkfifo(xml)
        return "malformed-annotation"

    return plant


def _image_named(name: bytes | str, reason: str = "unsafe-image-id"):
    def plant(root: Path) -> str:
        folder = os.fsencode(root / "val")
        with open(os.path.join(folder, os.fsencode(name)), "wb") as handle:
            handle.write(jpeg())
        return reason

    return plant


def _fifo_image(root: Path) -> str:
    os.mkfifo(root / "val" / "ILSVRC2012_val_90000003.JPEG")
    return "not-a-regular-file"


def _csv(encoding: str, extra_id: str | None = None, extra_boxes: str = "", with_image: bool = True):
    """A LOC csv of the tree's boxes in `encoding`, with one more row (and its image) if asked."""

    def plant(root: Path) -> str:
        lines = ["ImageId,PredictionString"]
        for xml in sorted((root / "bbox" / "val").glob("*.xml")):
            lines.append(f"{xml.stem},{TENCH} 4 3 20 20")
        if extra_id:
            lines.append(f"{extra_id},{extra_boxes}")
            if with_image:
                (root / "val" / f"{extra_id}.JPEG").write_bytes(jpeg())
        (root / "LOC_val_solution.csv").write_bytes(("\n".join(lines) + "\n").encode(encoding))
        return "malformed-annotation" if encoding == "utf-8" else "annotation-encoding"

    return plant


def _mapping_latin1(root: Path) -> str:
    from builder.core.classes import imagenet_classes

    lines = [f"{c.wnid} {c.synonyms}" for c in imagenet_classes()]
    lines[0] += ", caf\u00e9"
    (root / "LOC_synset_mapping.txt").write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    return "annotation-encoding"


HOSTILE = {
    "xml-inf": _xml_coordinate("inf"),
    "xml-1e400": _xml_coordinate("1e400"),
    "xml-nan": _xml_coordinate("nan"),
    "xml-path-is-a-folder": _xml_path("folder"),
    "xml-dangling-link": _xml_path("dangling"),
    "xml-link-loop": _xml_path("loop"),
    "xml-fifo": _xml_path("fifo"),
    "id-with-a-dot": _image_named("ILSVRC2012_val_9.1.JPEG"),
    "id-with-leading-underscore": _image_named("_ILSVRC2012_val_9.JPEG"),
    "id-of-86-characters": _image_named("a" * 86 + ".JPEG"),
    "id-of-72-characters": _image_named("b" * 72 + ".JPEG"),  # 72 broke compose's member names
    "id-with-a-backslash": _image_named("ILSVRC2012\\val_9.JPEG"),
    "id-with-a-space": _image_named("ILSVRC2012 val_9.JPEG"),
    "non-utf8-file-name": _image_named(b"ILSVRC2012_val_caf\xe9.JPEG"),
    "fifo-named-jpeg": _fifo_image,
    "folder-named-jpeg": _image_named("x", "not-a-regular-file"),  # replaced by a folder below
    "csv-latin-1": _csv("latin-1", "ILSVRC2012_val_caf\u00e9", f"{TENCH} 1 1 9 9", with_image=False),
    "csv-utf-16": _csv("utf-16"),
    "csv-inf": _csv("utf-8", "ILSVRC2012_val_90000005", f"{TENCH} 1 1 inf 9"),
    "csv-1e400": _csv("utf-8", "ILSVRC2012_val_90000006", f"{TENCH} 1 1 1e400 9"),
    "csv-field-over-131072": _csv("utf-8", "ILSVRC2012_val_90000007", f"{TENCH} 1 1 9 9 " * 8000 + "x"),
    "csv-field-over-16-mib": _csv("utf-8", "ILSVRC2012_val_90000008", "9" * (17 << 20)),
    "synset-mapping-latin-1": _mapping_latin1,
}


def _run_in_thread(target, timeout: float):
    """Run `target` in a daemon thread: a hang (before the fix, a FIFO blocked open()) fails the test
    instead of stalling the suite."""
    result = {}
    thread = threading.Thread(target=lambda: result.update(value=target()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "extract hangs"
    return result.get("value")


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_input_is_a_counted_row_not_a_crash(tmp_path, case):
    root = good_tree(tmp_path)
    if case == "folder-named-jpeg":
        (root / "val" / "ILSVRC2012_val_90000004.JPEG").mkdir()
        reason = "not-a-regular-file"
    else:
        reason = HOSTILE[case](root)
    boxes = ["--boxes", root / "LOC_val_solution.csv"] if case.startswith("csv") else []
    out = tmp_path / "out"
    assert _run_in_thread(lambda: extract(root, out, *boxes), timeout=60) == 0
    assert reason in {row["reason"] for row in rows(out)}
    assert counted(out).get(reason, 0) == sum(row["reason"] == reason for row in rows(out)) > 0
    manifest = json.loads((out / "parts" / "_info.json").read_text())
    assert manifest["splits"]["val"]["num_samples"] == 4  # the good images are all extracted


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "latin-1"])
def test_utf16_and_latin1_csvs_are_read(tmp_path, encoding):
    root = good_tree(tmp_path)
    _csv(encoding, "ILSVRC2012_val_caf\u00e9", f"{TENCH} 1 1 9 9", with_image=False)(root)
    listing = load_sources(root, "val", root / "LOC_val_solution.csv", announce=lambda _: None)
    assert len(listing.records) == 4
    assert {(i.reason, i.image_id) for i in listing.issues} == {
        ("annotation-encoding", "LOC_val_solution.csv"),
        ("annotation-without-image", "ILSVRC2012_val_caf\u00e9"),
    }


def test_split_must_be_one_safe_name(tmp_path, capsys):
    write_tree(tmp_path / "imagenet", count=2)
    (tmp_path / "imagenet" / "inner").mkdir()  # so that inner/../val is a real folder of images
    out = tmp_path / "out"
    code = extract(
        tmp_path / "imagenet" / "inner", out, "--split", "../val", "--boxes", tmp_path / "imagenet" / "bbox" / "val"
    )
    assert code == 2 and "--split" in capsys.readouterr().err
    assert not out.exists()  # before the fix: out/val-00000.tar, beside parts/


# --- 17: memory ----------------------------------------------------------------------------------


def test_many_boxes_do_not_hold_one_full_mask_each():
    width = height = 200
    boxes = tuple(Box(i % 190, (i // 190) % 190, i % 190 + 9, (i // 190) % 190 + 9, TENCH) for i in range(10_000))
    record = SourceImage("n01440764_1", TENCH, "unused", boxes)
    image = synthetic_photo(5, width, height)
    config = ExtractConfig(dilation=0)
    masker, inpainter = load_backends(config)
    tracemalloc.start()
    try:
        raw = extract_batch([_Decoded(record, image, list(boxes))], masker, inpainter, config, {})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # one mask per box held 10,000 x 40 KB = 400 MB; in chunks a few MB
    assert peak < 30 << 20, f"peak {peak / 2**20:.0f} MiB"
    expected = np.zeros((height, width), dtype=bool)
    for box in boxes:
        expected[box.y0 : box.y1 + 1, box.x0 : box.x1 + 1] = True
    assert np.array_equal(raw[0].erase, expected)
    largest = boxes[raw[0].meta["object_box_index"]]
    assert raw[0].mask.shape == (largest.y1 - largest.y0 + 1, largest.x1 - largest.x0 + 1) and raw[0].mask.all()


def test_batches_are_bounded_by_pixels_and_bytes_do_not_change(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    root = good_tree(tmp_path)
    listing = load_sources(root, "val", announce=lambda _: None)
    budget = 2 * 56 * 46
    builder = ExtractShardBuilder(ExtractConfig(batch_size=8, batch_pixels=budget), str(tmp_path / "unused"))
    with ThreadPoolExecutor(2) as pool:
        batches = list(builder.decoded_batches(pool, listing.records))
    sizes = [[d.image.shape[0] * d.image.shape[1] for d, _ in batch] for batch in batches]
    assert sum(map(len, sizes)) == 4 and len(sizes) > 1
    assert all(len(batch) == 1 or sum(batch) <= budget for batch in sizes)
    assert extract(root, tmp_path / "a", "--batch-pixels", 1) == 0
    assert extract(root, tmp_path / "b") == 0
    tars = sorted(p.name for p in (tmp_path / "a" / "parts").glob("*.tar"))
    assert tars and all(
        (tmp_path / "a" / "parts" / n).read_bytes() == (tmp_path / "b" / "parts" / n).read_bytes() for n in tars
    )


# --- 20: one key rule, BOMs and spaced headers, duplicate XML stems ------------------------------


def test_csv_with_a_bom_and_a_spaced_header_is_read(tmp_path):
    root = good_tree(tmp_path)
    _csv("utf-8")(root)
    path = root / "LOC_val_solution.csv"
    text = path.read_text("utf-8").replace("ImageId,PredictionString", " ImageId , PredictionString ")
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    listing = load_sources(root, "val", path, announce=lambda _: None)
    assert len(listing.records) == 4 and listing.issues == []


def test_a_backslash_key_is_refused_when_written_as_when_read(tmp_path):
    with pytest.raises(ShardFormatError, match="sample key"):
        write_shard(tmp_path / "val-00000.tar", [("a\\b", {"json": b"{}"})])
    with pytest.raises(ShardFormatError):
        split_member_name("a\\b.json")


def test_duplicate_xml_stems_in_nested_folders_are_rows(tmp_path):
    root = good_tree(tmp_path)
    first = sorted((root / "bbox" / "val").glob("*.xml"))[0]
    for folder in ("a", "b"):
        (first.parent / folder).mkdir()
        (first.parent / folder / first.name).write_text(first.read_text())
    listing = load_sources(root, "val", announce=lambda _: None)
    duplicates = [issue for issue in listing.issues if issue.reason == "duplicate-id"]
    assert [issue.image_id for issue in duplicates] == [first.stem, first.stem]
    assert all("used the first" in issue.detail for issue in duplicates)


# --- property-based: image ids and sample keys ---------------------------------------------------

KEYS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=90)
ID_LIKE = st.from_regex(r"[A-Za-z0-9_.\\ -]{1,90}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(st.one_of(KEYS, ID_LIKE))
def test_writers_and_readers_share_one_key_rule(key):
    try:
        check_key(key)
        written = True
    except ShardFormatError:
        written = False
    try:
        read = split_member_name(f"{key}.json") == (key, "json")
    except ShardFormatError:
        read = False
    assert written == read


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ID_LIKE)
def test_every_accepted_image_id_round_trips_and_fits_compose(tmp_path, image_id):
    if image_id_problem(image_id) is not None:
        return
    path = tmp_path / "val-00000.tar"
    write_shard(path, [(image_id, {"json": b"{}", "background.png": b"x"})])
    assert [key for key, _ in iter_shard(path)] == [image_id]
    longest = sample_key(image_id, "random-corner", 112, "original") + ".json"
    assert len(longest.encode()) <= 100 and len(image_id) <= MAX_IMAGE_ID_LENGTH


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(ID_LIKE, st.binary(min_size=1, max_size=60)))
def test_hostile_image_names_become_rows_never_crashes(tmp_path_factory, name):
    raw = name if isinstance(name, bytes) else os.fsencode(name)
    raw = raw.replace(b"/", b"-").replace(b"\x00", b"-")
    if not raw:  # '.JPEG' alone is a hidden file without a suffix, not an image
        return
    root = tmp_path_factory.mktemp("tree")
    (root / "val").mkdir()
    (root / "bbox" / "val").mkdir(parents=True)
    with open(os.path.join(os.fsencode(root / "val"), raw + b".JPEG"), "wb") as handle:
        handle.write(jpeg())
    stem = os.fsdecode(raw)
    listing = load_sources(root, "val", root / "bbox" / "val", announce=lambda _: None)
    accepted = [r.image_id for r in listing.records]
    assert accepted == [] and len(listing.issues) == 1  # no XML: at best missing-annotation
    issue = listing.issues[0]
    json.dumps(issue.to_json(), ensure_ascii=False).encode("utf-8")  # rows are writable
    if image_id_problem(stem) is None:
        assert issue.reason == "missing-annotation" and issue.image_id == stem
    else:
        assert issue.reason == "unsafe-image-id"


def test_box_chunks_and_pixel_batches_change_no_byte_with_sam_and_lama(tmp_path, monkeypatch):
    """The chunked erase mask and the pixel-bounded batches give SAM and LaMa parts byte-identical
    to one call per batch (tiny models through the production loaders)."""
    pytest.importorskip("segment_anything")
    import yaml
    from tiny_models import write_tiny_lama, write_tiny_sam

    import builder.extract.shard_builder as shard_builder

    sam, lama = write_tiny_sam(tmp_path), write_tiny_lama(tmp_path)
    config = tmp_path / "extract.yaml"
    config.write_text(yaml.safe_dump({"sam_model": "auto"}))
    write_tree(tmp_path / "imagenet", count=6)  # every third image has two boxes
    flags = [
        "--config",
        config,
        "--masker",
        "sam",
        "--inpainter",
        "lama",
        "--sam-checkpoint",
        sam,
        "--lama-checkpoint",
        lama,
        "--trust-file",  # the tests' own TorchScript file (code), trusted by its sha256
        hashlib.sha256(lama.read_bytes()).hexdigest(),
        "--device",
        "cpu",
        "--batch-size",
        3,
    ]
    assert extract(tmp_path / "imagenet", tmp_path / "whole", *flags) == 0
    monkeypatch.setattr(shard_builder, "MASK_BOXES_PER_CALL", 1)
    assert extract(tmp_path / "imagenet", tmp_path / "chunked", *flags, "--batch-pixels", 3000) == 0
    whole = {p.name: p.read_bytes() for p in (tmp_path / "whole" / "parts").glob("*.tar")}
    chunked = {p.name: p.read_bytes() for p in (tmp_path / "chunked" / "parts").glob("*.tar")}
    assert whole and whole == chunked


def test_an_unreadable_class_folder_is_a_row(tmp_path, monkeypatch):
    write_tree(tmp_path / "imagenet", split="train", count=4)
    locked = tmp_path / "imagenet" / "train" / WNIDS[1]
    real_scandir = os.scandir

    def scandir(path="."):  # a folder without read permission (chmod does not stop root)
        if Path(os.fsdecode(path)) == locked:
            raise PermissionError(13, "Permission denied", str(locked))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    listing = load_sources(tmp_path / "imagenet", "train", announce=lambda _: None)
    assert [(i.reason, i.image_id) for i in listing.issues if i.reason == "unreadable-folder"] == [
        ("unreadable-folder", WNIDS[1])
    ]
