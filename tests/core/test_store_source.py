"""ImageNet on an object store: `hsi extract --source s3://...` (against an S3 server on loopback)
writes the parts a run from the same folder on disk writes, byte for byte, manifest and error rows
included; a second run fetches nothing; an object removed from the store is no longer listed; a
bucket or folder that is not there is refused in one line before anything is written; `hsi build
--source s3://...` gives the local build's release."""

import json

import fsspec
import pytest
from fake_imagenet import extract_args, shard_hashes, write_tree
from s3_server import loopback_s3

from builder.core.object_store import staging_folder
from hsi.cli import main


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HSI_STAGING", str(tmp_path_factory.mktemp("staging")))
        with loopback_s3(patch) as bucket:
            yield bucket


def upload_folder(local, url):
    fs, root = fsspec.core.url_to_fs(url)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            fs.put_file(str(path), f"{root}/{path.relative_to(local).as_posix()}")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    # the bad inputs too: their error rows must be the local run's
    return write_tree(tmp_path_factory.mktemp("imagenet"), split="val", count=5, bad=True)


def same_parts(here, there):
    assert shard_hashes(here) and shard_hashes(there) == shard_hashes(here)
    for name in ("_info.json", "errors.jsonl", "_config.yaml"):
        assert (there / name).read_bytes() == (here / name).read_bytes(), name


def test_extract_from_the_store_writes_the_local_runs_parts(s3, tree, tmp_path, capsys):
    upload_folder(tree.root, f"{s3}/imagenet")
    # a train folder beside it: another split's objects are not fetched
    train = write_tree(tmp_path / "train-tree", split="train", count=2)
    upload_folder(train.root, f"{s3}/imagenet")  # train/ and bbox/train/
    assert main(extract_args(tree.root, tmp_path / "here", "--shard-size", "2")) == 0
    assert main(extract_args(f"{s3}/imagenet", tmp_path / "there", "--shard-size", "2")) == 0
    said = capsys.readouterr().out
    staged = staging_folder(f"{s3}/imagenet")
    assert f"source: {s3}/imagenet staged in {staged} (" in said
    same_parts(tmp_path / "here" / "parts", tmp_path / "there" / "parts")
    assert (staged / "val").is_dir() and not (staged / "train").exists()
    for path in (tmp_path / "there" / "parts").rglob("*"):  # the store's URL is written nowhere
        assert not path.is_file() or b"s3:" not in path.read_bytes(), path

    # the train split from the same store stages its own objects and leaves val's in place
    assert main([*extract_args(f"{s3}/imagenet", tmp_path / "train", "--split", "train")]) == 0
    assert (staged / "train").is_dir() and sorted((staged / "val").iterdir())
    capsys.readouterr()
    # the same command again fetches nothing and finds the split finished
    assert main(extract_args(f"{s3}/imagenet", tmp_path / "there", "--shard-size", "2")) == 0
    said = capsys.readouterr().out
    assert "(0 objects fetched)" in said and "already complete" in said


def test_an_object_removed_from_the_store_is_no_longer_listed(s3, tree, tmp_path, capsys):
    upload_folder(tree.root, f"{s3}/shrinking")
    out = tmp_path / "out"
    assert main(extract_args(f"{s3}/shrinking", out, "--shard-size", "2")) == 0
    first = json.loads((out / "parts" / "_info.json").read_text())["splits"]["val"]["num_samples"]
    fs, root = fsspec.core.url_to_fs(f"{s3}/shrinking/val")
    gone = sorted(fs.find(root))[0]
    fs.rm_file(gone)
    capsys.readouterr()
    # the listing changed: refused as for a folder on disk, then rebuilt with --overwrite
    assert main(extract_args(f"{s3}/shrinking", out, "--shard-size", "2")) == 2
    assert "the sources of split 'val' changed" in capsys.readouterr().err
    assert not (staging_folder(f"{s3}/shrinking") / "val" / gone.rpartition("/")[2]).exists()
    assert main(extract_args(f"{s3}/shrinking", out, "--shard-size", "2", "--overwrite")) == 0
    assert json.loads((out / "parts" / "_info.json").read_text())["splits"]["val"]["num_samples"] == first - 1


@pytest.mark.parametrize("where", ["no-such-bucket/imagenet", "hsi-test/no-such-folder"])
def test_a_missing_bucket_or_folder_is_refused_in_one_line(s3, where, tmp_path, capsys):
    assert main(extract_args(f"s3://{where}", tmp_path / "out")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"s3://{where} holds nothing" in err[0] and "credentials" in err[0]
    assert not (tmp_path / "out").exists()


def test_build_from_the_store_gives_the_local_builds_release(s3, tree, tmp_path):
    upload_folder(tree.root, f"{s3}/for-build")
    for source, out in ((tree.root, tmp_path / "here"), (f"{s3}/for-build", tmp_path / "there")):
        args = ["build", "--no-progress", "--source", str(source), "--out", str(out), "--version", "v1.0.0"]
        assert main([*args, "--max-skip-fraction", "1"]) == 0
    release = "hard-spurious-imagenet"
    for folder in (f"datasets/{release}", "parts"):
        assert shard_hashes(tmp_path / "here" / folder) == shard_hashes(tmp_path / "there" / folder)
    here, there = tmp_path / "here" / release, tmp_path / "there" / release
    assert (there / "_release.json").read_bytes() == (here / "_release.json").read_bytes()


def test_kaggles_layout_through_a_file_url_gives_the_local_runs_parts(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HSI_STAGING", str(tmp_path / "staging"))
    tree = write_tree(tmp_path / "kaggle", layout="kaggle", split="val", count=4)
    assert main(extract_args(tree.root, tmp_path / "here", "--shard-size", "2")) == 0
    assert main(extract_args(f"file://{tree.root}", tmp_path / "there", "--shard-size", "2")) == 0
    same_parts(tmp_path / "here" / "parts", tmp_path / "there" / "parts")
    # an object replaced on the store (a repaired download, another size) is fetched again
    image = next(iter(sorted((tree.root / "ILSVRC" / "Data" / "CLS-LOC" / "val").glob("*.JPEG"))))
    image.write_bytes(image.read_bytes() + b"\0")
    capsys.readouterr()
    assert main(extract_args(f"file://{tree.root}", tmp_path / "there", "--shard-size", "2")) == 2
    assert "(1 objects fetched)" in capsys.readouterr().out
