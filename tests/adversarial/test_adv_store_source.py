"""Hostile names and links in an ImageNet root on an object store (`--source file://...`, as any
store): a name the one name check refuses and a link (to a file outside, or to a folder) are error
rows, counted among the listed images, and never copied nor followed."""

import os

from fake_imagenet import error_rows, extract_args, write_tree

from builder.core.object_store import staging_folder
from hsi.cli import main


def test_unsafe_names_and_links_in_a_store_source_are_rows_and_never_followed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HSI_STAGING", str(tmp_path / "staging"))
    tree = write_tree(tmp_path / "imagenet", split="val", count=4)
    val = tree.root / "val"
    secret = tmp_path / "secret.JPEG"
    secret.write_bytes((val / "ILSVRC2012_val_00000001.JPEG").read_bytes())
    (val / "ILSVRC2012_val_00000077.JPEG").symlink_to(secret)
    (val / "outside").symlink_to(tmp_path, target_is_directory=True)
    (val / "bad name.JPEG").write_bytes(b"not read")
    (val / "..hidden.JPEG").write_bytes(b"not read")

    url = f"file://{tree.root}"
    assert main(extract_args(url, tmp_path / "out", "--shard-size", "2")) == 0
    rows = {row["image_id"]: row for row in error_rows(tmp_path / "out" / "parts")}
    for name in ("val/ILSVRC2012_val_00000077.JPEG", "val/bad name.JPEG", "val/..hidden.JPEG"):
        assert rows[name]["reason"] == "unsafe-name", rows
    assert "links are not followed" in rows["val/ILSVRC2012_val_00000077.JPEG"]["detail"]
    assert "not a safe object name" in rows["val/bad name.JPEG"]["detail"]
    assert "val/outside" in rows and "val/outside/secret.JPEG" not in rows  # the linked folder is not entered

    staged = staging_folder(url)
    copied = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file() or p.is_symlink())
    assert not any(os.path.islink(staged / name) for name in copied)
    assert [name for name in copied if name.startswith("val/")] == [
        f"val/ILSVRC2012_val_{n:08d}.JPEG" for n in range(1, 5)
    ]
    printed = capsys.readouterr().out
    assert "images listed 7, parts written 4" in printed  # the refused images are counted, not dropped
