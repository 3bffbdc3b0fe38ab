"""Outputs and inputs on an object store, against an S3 server on loopback (moto's server mode):
`hsi compose --parts s3://... --out s3://...` gives the local run's bytes with the manifest pushed
last, `stream("s3://...")` yields what a local folder yields per rank, `hsi validate` and `hsi release`
read a store folder, and one run per folder holds on the store through a conditional write."""

import hashlib
import json

import fsspec
import pytest
from fake_imagenet import shard_hashes, write_tree
from s3_server import loopback_s3

from builder.core.object_store import ObjectStoreError, StoreFolder, StoreLocked, exclusive_store_folder, lock_object
from builder.formats.stream import ShardStream
from hsi.cli import main


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HSI_STAGING", str(tmp_path_factory.mktemp("staging")))
        with loopback_s3(patch) as bucket:
            yield bucket


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    tree = write_tree(tmp_path_factory.mktemp("imagenet"), split="val", count=5)
    out = tmp_path_factory.mktemp("extract")
    assert main(["extract", "--no-progress", "--source", str(tree.root), "--out", str(out), "--shard-size", "2"]) == 0
    return out / "parts"


def upload_folder(local, url):
    fs, root = fsspec.core.url_to_fs(url)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            fs.put_file(str(path), f"{root}/{path.relative_to(local).as_posix()}")


def compose(parts, out, *flags):
    return main(["compose", "--no-progress", "--parts", str(parts), "--out", str(out), "--sizes", "40,56",
                 "--shard-size", "3", "--name", "small", *flags])


@pytest.fixture(scope="module")
def composed(s3, parts, tmp_path_factory):
    """The same compose from the local parts to a local folder, and from the store's to the store."""
    local = tmp_path_factory.mktemp("local")
    assert compose(parts, local) == 0
    upload_folder(parts, f"{s3}/runs/parts")
    assert compose(f"{s3}/runs/parts", f"{s3}/runs/out") == 0
    return local / "small", f"{s3}/runs/out/small"


def test_compose_from_and_to_the_store_gives_the_local_runs_bytes(composed, tmp_path):
    local, url = composed
    store = StoreFolder(url)
    listed = store.files()
    local_shards = shard_hashes(local)
    assert len(local_shards) >= 2
    for name, digest in local_shards.items():
        assert listed[name] == (local / name).stat().st_size
        assert hashlib.sha256(store.read_bytes(name)).hexdigest() == digest
    for name in ("_info.json", "errors.jsonl", "spec.yaml"):
        assert store.read_bytes(name) == (local / name).read_bytes(), name
    assert not lock_object(store).fs_and_path[0].exists(lock_object(store).fs_and_path[1])  # released


def test_the_manifest_goes_up_last_and_a_finished_store_folder_is_recognised(s3, parts, composed, monkeypatch, capsys):
    sent = []
    original = StoreFolder.upload

    def recorded(self, local, name):
        sent.append(name)
        original(self, local, name)

    monkeypatch.setattr(StoreFolder, "upload", recorded)
    assert compose(f"{s3}/runs/parts", f"{s3}/fresh") == 0
    assert sent[-1] == "_info.json" and len(sent) > 3 and sent.count("_info.json") == 1
    sent.clear()
    assert compose(f"{s3}/runs/parts", f"{s3}/fresh") == 0  # the same command again: nothing to send
    assert sent == []
    assert f"dataset: {s3}/fresh/small" in capsys.readouterr().out


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_stream_from_the_store_yields_the_local_samples_per_rank(composed, world_size):
    local, url = composed
    split = next(iter(json.loads((local / "_info.json").read_text())["splits"]))
    for rank in range(world_size):
        here = [s["key"] for s in ShardStream(local, split=split, rank=rank, world_size=world_size, keep_json=True)]
        there = [s["key"] for s in ShardStream(url, split=split, rank=rank, world_size=world_size, keep_json=True)]
        assert here == there and here


def test_a_second_run_on_a_locked_store_folder_is_refused_in_one_line(s3, parts, capsys):
    store = StoreFolder(f"{s3}/busy/small")
    with exclusive_store_folder(store):
        with pytest.raises(StoreLocked):
            with exclusive_store_folder(store):
                pass
        assert compose(f"{s3}/runs/parts", f"{s3}/busy") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another hsi run" in err[0] and f"{s3}/busy/.small.lock" in err[0]
    assert not StoreFolder(f"{s3}/busy/small").files()  # nothing written before the refusal


def test_a_store_without_conditional_writes_is_refused(tmp_path, monkeypatch):
    from fsspec.implementations.local import LocalFileSystem

    original = LocalFileSystem.pipe_file
    monkeypatch.setattr(LocalFileSystem, "pipe_file", lambda self, path, value, **kw: original(self, path, value))
    with pytest.raises(ObjectStoreError, match="ignores conditional writes"):
        with exclusive_store_folder(StoreFolder(f"file://{tmp_path}/out/small")):
            pass
    assert not (tmp_path / "out" / ".small.lock").exists()


def test_a_file_url_store_takes_the_same_lock(tmp_path):
    store = StoreFolder(f"file://{tmp_path}/out/small")
    with exclusive_store_folder(store):
        assert (tmp_path / "out" / ".small.lock").is_file()
        with pytest.raises(StoreLocked):
            with exclusive_store_folder(store):
                pass
    assert not (tmp_path / "out" / ".small.lock").exists()


def test_validate_and_release_read_a_store_folder(s3, composed, tmp_path, capsys):
    local, url = composed
    assert main(["validate", url, "--no-previews"]) == 0
    report = json.loads(StoreFolder(url).read_bytes("validation.json"))  # the report went back to the store
    splits = json.loads((local / "_info.json").read_text())["splits"]
    assert report["integrity"]["samples_checked"] == sum(entry["num_samples"] for entry in splits.values()) > 0
    assert not report["integrity"]["failures"]
    assert main(["validate", str(local), "--no-previews"]) == 0
    capsys.readouterr()
    assert main(["release", url, "--out", str(tmp_path / "hard-spurious-imagenet"), "--version", "v1.0.0"]) == 0
    released = tmp_path / "hard-spurious-imagenet" / "data" / "small"
    assert shard_hashes(released) == shard_hashes(local)


def test_hsi_open_reads_a_store_folder(composed):
    import hsi

    local, url = composed
    split = next(iter(json.loads((local / "_info.json").read_text())["splits"]))
    there, here = hsi.open(url, split=split, announce=lambda _: None), hsi.open(local, split=split)
    assert len(there) == len(here) > 0 and there.config == here.config == "small"
    assert there.fingerprint == here.fingerprint
