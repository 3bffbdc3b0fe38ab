"""Two speed-ups that must not change a byte of any shard: `write_shard` writes ustar headers itself
instead of going through tarfile, and compose encodes JPEGs with OpenCV instead of PIL. Each is
compared here with the code it replaced, written out in full as the reference."""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path

import numpy as np
import pytest
from parts_factory import FakeImage, render_image
from PIL import Image

from builder.core.hashing import sha256_file
from builder.core.imaging import resize_rgb
from builder.core.shard_read import iter_shard, tar_members, written_members
from builder.core.shard_write import write_shard
from builder.core.shards import ustar_header
from builder.formats.composites import encode_jpeg, encode_jpeg_bgr, rgb_to_bgr
from builder.formats.parts import decode_canvas, encode_canvas

DEMO_PHOTOS = sorted((Path(__file__).parents[2] / "builder" / "demo_data" / "imagenet" / "val").glob("*/*.JPEG"))


# --- the shard writer against tarfile ---------------------------------------------------------


def reference_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o444
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def tarfile_shard(samples) -> bytes:
    """What the tarfile-based `write_shard` wrote for these samples."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key, members in sorted(samples, key=lambda sample: sample[0]):
            for ext in sorted(members):
                tar.addfile(reference_info(f"{key}.{ext}", len(members[ext])), io.BytesIO(members[ext]))
    return buffer.getvalue()


def written(tmp_path: Path, samples) -> bytes:
    path = tmp_path / "test-00000.tar"
    stats = write_shard(path, samples)
    data = path.read_bytes()
    assert (stats.bytes, stats.sha256, stats.num_samples) == (len(data), sha256_file(path), len(samples))
    assert not list(tmp_path.glob("*.tmp"))
    return data


def payload(size: int, seed: int) -> bytes:
    # No zero bytes at the ends, so a padding or offset mistake cannot hide among NULs.
    return bytes((seed + 7 * i) % 255 + 1 for i in range(size))


@pytest.mark.parametrize("size", [0, 1, 2, 511, 512, 513, 1023, 1024, 1025, 10_000, 10_240])
def test_member_sizes_around_block_edges_match_tarfile(tmp_path, size):
    samples = [("b", {"jpg": payload(size, 1), "cls": b"7"}), ("a", {"json": payload(size, 2), "cls": b""})]
    assert written(tmp_path, samples) == tarfile_shard(samples)


@pytest.mark.parametrize(
    "key", ["k", "ILSVRC2012_val_00000001_ce_112_original", "k" * 95, "k" * 96, "ключ" * 10, "é" * 47 + "xx"]
)
def test_names_of_many_lengths_up_to_the_100_byte_field_match_tarfile(tmp_path, key):
    # "k" * 96 + ".jpg" and "é" * 47 + "xx.jpg" are exactly 100 bytes: the field holds no NUL.
    samples = [(key, {"jpg": payload(700, 3), "cls": b"1", "a": b"x"})]
    assert written(tmp_path, samples) == tarfile_shard(samples)


def test_names_tarfile_cannot_store_raise_its_error(tmp_path):
    samples = [("k" * 97, {"json": b"{}"})]  # 102 bytes and no '/' to split at
    with pytest.raises(ValueError, match="name is too long"):
        tarfile_shard(samples)
    with pytest.raises(ValueError, match="name is too long"):
        write_shard(tmp_path / "test-00000.tar", samples)


def test_a_long_name_with_a_slash_is_split_into_prefix_and_name_as_tarfile_does(tmp_path):
    samples = [("k" * 60, {"a" * 40 + "/" + "b" * 60: payload(3, 4)}), ("m", {"jpg": b"x"})]
    assert written(tmp_path, samples) == tarfile_shard(samples)


@pytest.mark.parametrize("members", range(0, 42))
def test_end_blocks_and_record_padding_match_tarfile_for_every_remainder(tmp_path, members):
    # Empty members take one block each: 0..41 of them reach every block count modulo a
    # 20-block record, including 18 and 38, where the end blocks fill the record exactly.
    samples = [(f"s{i:03d}", {"cls": b""}) for i in range(members)]
    data = written(tmp_path, samples)
    assert data == tarfile_shard(samples)
    assert len(data) % tarfile.RECORDSIZE == 0


def test_many_samples_in_any_input_order_match_tarfile(tmp_path):
    rng = random.Random(0)
    samples = [
        (
            f"ILSVRC2012_val_{i:08d}_{rng.choice(['ce', 'tr'])}_{rng.choice([56, 84, 112])}",
            {
                "jpg": payload(rng.randrange(0, 30_000), i),
                "cls": str(i % 1000).encode(),
                "json": payload(rng.randrange(0, 600), -i),
            },
        )
        for i in range(300)
    ]
    rng.shuffle(samples)
    assert written(tmp_path, samples) == tarfile_shard(samples)


@pytest.mark.parametrize("size", [0, 1, 8**11 - 1])
def test_header_numbers_up_to_the_largest_ustar_size_match_tarfile(size):
    assert ustar_header("a.jpg", size) == reference_info("a.jpg", size).tobuf(tarfile.USTAR_FORMAT)


def test_a_size_beyond_ustar_raises_tarfiles_error():
    with pytest.raises(ValueError, match="overflow in number field"):
        reference_info("a.jpg", 8**11).tobuf(tarfile.USTAR_FORMAT)
    with pytest.raises(ValueError, match="overflow in number field"):
        ustar_header("a.jpg", 8**11)


def test_tarfile_webdataset_and_iter_shard_read_the_members_back(tmp_path):
    import webdataset

    samples = {
        f"s{i:02d}": {"jpg": payload(137 * i, i), "cls": str(i).encode(), "json": b'{"i": %d}' % i} for i in range(25)
    }
    path = tmp_path / "test-00000.tar"
    write_shard(path, list(samples.items()))
    with tarfile.open(path) as tar:
        infos = tar.getmembers()
        assert [info.name for info in infos] == [f"{k}.{e}" for k in sorted(samples) for e in sorted(samples[k])]
        for info in infos:
            key, ext = info.name.split(".")
            assert info.isfile() and (info.mode, info.mtime, info.uid, info.gid) == (0o444, 0, 0, 0)
            assert (info.uname, info.gname) == ("", "")
            assert tar.extractfile(info).read() == samples[key][ext]
    assert dict(iter_shard(path)) == samples
    read = {
        row["__key__"]: {ext: row[ext] for ext in ("jpg", "cls", "json")}
        for row in webdataset.WebDataset(str(path), shardshuffle=False)
    }
    assert read == samples


# --- compose's JPEG encoder against PIL --------------------------------------------------------


def pil_jpeg(array: np.ndarray, quality: int) -> bytes:
    """What compose's PIL-based `encode_jpeg` wrote."""
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array)).save(
        buffer, format="JPEG", quality=quality, subsampling=2, optimize=False
    )
    return buffer.getvalue()


def varied_images() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    images = []
    assert len(DEMO_PHOTOS) == 4, "the demo's four real photos must be found"
    for path in DEMO_PHOTOS:  # real photos, whole, resized to canvas sizes and cropped oddly
        with Image.open(path) as image:
            photo = image.convert("RGB")
        images.append((path.name, np.asarray(photo)))
        for w, h in [(224, 224), (227, 227), (56, 57), (1, 1)]:
            images.append((f"{path.name} {w}x{h}", np.asarray(photo.resize((w, h), Image.BICUBIC))))
        images.append((f"{path.name} crop", np.asarray(photo)[3:60, 5:61]))
    for i, (w, h) in enumerate([(224, 224), (250, 200), (57, 56), (17, 9), (2, 3), (500, 375)]):
        colours = tuple(tuple(int(c) for c in rng.integers(0, 256, 3)) for _ in range(2))
        parts = render_image(
            FakeImage(f"tex{i}", "n01443537", *colours, image_size=(w, h), box=(0, 0, w - 1, h - 1), textured=True)
        )
        images.append((f"textured {w}x{h}", parts["background"]))
    for w, h in [(1, 1), (8, 8), (9, 7), (16, 17), (56, 57), (224, 224), (333, 1), (1, 333)]:
        images.append((f"noise {w}x{h}", rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
        images.append((f"flat {w}x{h}", np.full((h, w, 3), rng.integers(0, 256, 3), np.uint8)))
    for value in (0, 128, 255):
        images.append((f"flat {value}", np.full((224, 224, 3), value, np.uint8)))
    ramp = np.arange(224, dtype=np.uint8)
    images.append(("gradient", np.stack(np.broadcast_arrays(ramp[None], ramp[:, None], 255 - ramp[None]), -1)))
    checks = (np.indices((224, 224)).sum(0) % 2 * 255).astype(np.uint8)
    images.append(("checkerboard", np.repeat(checks[..., None], 3, 2)))
    base = images[1][1]
    images += [("flipped view", base[::-1, ::-1]), ("strided view", base[::2, 1::3]), ("grey", base[..., 1])]
    return images


VARIED = varied_images()


@pytest.mark.parametrize("name, image", VARIED, ids=[name for name, _ in VARIED])
def test_opencv_jpeg_bytes_equal_pils_at_the_paper_quality(name, image):
    assert encode_jpeg(image, 95) == pil_jpeg(image, 95)


@pytest.mark.parametrize("quality", [1, 2, 50, 75, 90, 99, 100])
def test_opencv_jpeg_bytes_equal_pils_at_any_spec_quality(quality):
    for name, image in VARIED[::4]:
        assert encode_jpeg(image, quality) == pil_jpeg(image, quality), name


# --- compose resizes the decoded crop image itself ----------------------------------------------


@pytest.mark.parametrize("resize_filter", ["bicubic", "bilinear", "lanczos", "nearest", "box"])
def test_resizing_the_pil_image_gives_the_pixels_of_resizing_its_array(resize_filter):
    crop = VARIED[1][1]  # a real photo at 224 x 224
    for w, h in [(56, 45), (112, 90), (224, 224), (300, 17), (1, 1)]:
        expected = resize_rgb(crop, w, h, resize_filter)
        assert expected.shape == (h, w, 3)
        assert np.array_equal(resize_rgb(Image.fromarray(crop), w, h, resize_filter), expected)


# --- readers that skip tarfile for the shards we write ------------------------------------------


def tarfile_listing(path: Path) -> list[tuple]:
    with tarfile.open(path, mode="r:") as tar:
        return [(i.name, i.offset_data, i.size, i.isfile(), i.issparse()) for i in tar]


def listing(members) -> list[tuple]:
    return [(m.name, m.offset_data, m.size, m.isfile(), m.issparse()) for m in members]


@pytest.mark.parametrize("size", [0, 1, 511, 512, 513, 10_240])
def test_the_header_reader_lists_our_shards_as_tarfile_does(tmp_path, size):
    samples = [(f"s{i}", {"jpg": payload(size + i, i), "cls": b"7", "json": b"{}"}) for i in range(23)]
    samples.append(("k" * 95, {"json": payload(size, 9)}))  # a 100-byte name: the field holds no NUL
    path = tmp_path / "val-00000.tar"
    write_shard(path, samples)
    found = written_members(path)
    assert found is not None and listing(found) == tarfile_listing(path)
    assert listing(tar_members(path)) == tarfile_listing(path)


def test_an_empty_shard_lists_no_member_and_an_empty_file_raises_tarfiles_error(tmp_path):
    path = tmp_path / "val-00000.tar"
    write_shard(path, [])
    assert written_members(path) == [] and tarfile_listing(path) == []
    (tmp_path / "empty.tar").write_bytes(b"")
    assert written_members(tmp_path / "empty.tar") is None
    with pytest.raises(tarfile.ReadError):
        tar_members(tmp_path / "empty.tar")


def tar_with(path: Path, add, fmt=tarfile.USTAR_FORMAT) -> None:
    with tarfile.open(path, mode="w", format=fmt) as tar:
        info = reference_info("a.jpg", 3)
        tar.addfile(info, io.BytesIO(b"abc"))
        add(tar)


def add_symlink(tar):
    link = reference_info("b.jpg", 0)
    link.type, link.linkname = tarfile.SYMTYPE, "a.jpg"
    tar.addfile(link)


def add_other_mode(tar):
    info = reference_info("b.jpg", 2)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(b"xy"))


def add_long_pax_name(tar):
    tar.addfile(reference_info("p" * 150 + ".jpg", 2), io.BytesIO(b"xy"))


@pytest.mark.parametrize(
    "add, fmt",
    [
        (add_symlink, tarfile.USTAR_FORMAT),
        (add_other_mode, tarfile.USTAR_FORMAT),
        (add_long_pax_name, tarfile.PAX_FORMAT),
    ],
    ids=["symlink", "other-mode", "pax-long-name"],
)
def test_any_other_header_is_left_to_tarfile(tmp_path, add, fmt):
    path = tmp_path / "val-00000.tar"
    tar_with(path, add, fmt)
    assert written_members(path) is None
    assert listing(tar_members(path)) == tarfile_listing(path)
    assert len(tarfile_listing(path)) == 2


def test_a_shard_cut_inside_a_member_or_without_end_blocks_is_left_to_tarfile(tmp_path):
    path = tmp_path / "val-00000.tar"
    write_shard(path, [("a", {"jpg": payload(2000, 1)}), ("b", {"jpg": payload(2000, 2)})])
    data = path.read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:3000])  # inside b.jpg's data
    assert written_members(cut) is None
    cut.write_bytes(data[: 2 * (512 + 2048)])  # whole members, no end blocks: tarfile reads them
    assert written_members(cut) is None
    assert listing(tar_members(cut)) == tarfile_listing(cut) and len(tarfile_listing(cut)) == 2


def test_a_bit_flip_in_a_header_is_left_to_tarfile(tmp_path):
    path = tmp_path / "val-00000.tar"
    write_shard(path, [("a", {"jpg": payload(100, 1)}), ("b", {"jpg": payload(100, 2)})])
    data = bytearray(path.read_bytes())
    data[512 + 512 + 3] ^= 0x01  # the second header's name: its checksum no longer holds
    path.write_bytes(bytes(data))
    assert written_members(path) is None
    assert listing(tar_members(path)) == tarfile_listing(path)  # tarfile ends the archive there


# --- compose paints in OpenCV's channel order ----------------------------------------------------


@pytest.mark.parametrize("name, image", VARIED[::3], ids=[name for name, _ in VARIED[::3]])
def test_encoding_the_blue_first_canvas_gives_pils_bytes_of_the_rgb_one(name, image):
    if image.ndim == 3:
        assert encode_jpeg_bgr(rgb_to_bgr(image), 95) == pil_jpeg(image, 95)
        assert np.array_equal(rgb_to_bgr(image), image[..., ::-1])


def test_the_stored_canvas_reads_back_as_numpy_loads_it_and_other_arrays_are_refused():
    rng = np.random.default_rng(1)
    canvas = rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
    data = encode_canvas(canvas)
    decoded = decode_canvas(data)
    assert np.array_equal(decoded, np.load(io.BytesIO(data))) and decoded.flags.writeable
    fortran = io.BytesIO()
    np.save(fortran, np.asfortranarray(canvas))
    assert np.array_equal(decode_canvas(fortran.getvalue()), canvas)  # another header: numpy reads it
    for wrong in (canvas[:223], canvas.astype(np.int16)):
        with pytest.raises(ValueError, match="expected uint8"):
            decode_canvas(encode_canvas(wrong) if wrong.dtype == np.uint8 else np_bytes(wrong))


def np_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()
