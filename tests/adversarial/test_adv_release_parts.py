"""Hostile parts configs (issue 31): a release whose parts manifest names `../x`, a parts shard or
manifest that is a link, on disk and through the loopback Hub. Each is refused in one line (exit 2)
before a shard is read, and nothing is written outside the release, the cache or the output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hub_server import LoopbackHub, hub_env
from release_factory import release_with_parts
from subprocesses import run_hsi

from builder.core.hashing import sha256_file
from hsi.cli import main

REPO = "lab/hard-spurious-imagenet"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return release_with_parts(tmp_path_factory.mktemp("built"))


@pytest.fixture
def release(built, tmp_path):
    """A fresh copy of the release, for one test to break."""
    import shutil

    copy = tmp_path / "copy" / built["release"].name
    shutil.copytree(built["release"], copy)
    return copy


def rename_parts_shard(release: Path, new: str, record_too: bool) -> None:
    """List the parts' first shard as `new` in the parts manifest (and in _release.json when asked,
    with the manifest's new sha256 recorded, so only the name is wrong)."""
    manifest_path = release / "data" / "parts" / "_info.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["splits"]["val"]["shards"][0]["filename"] = new
    manifest_path.write_text(json.dumps(manifest))
    if record_too:
        record_path = release / "_release.json"
        record = json.loads(record_path.read_text())
        record["configs"]["parts"]["splits"]["val"][0]["filename"] = new
        record["files"]["data/parts/_info.json"] = sha256_file(manifest_path)
        record_path.write_text(json.dumps(record))


def compose_refused(parts: str, out: Path, capsys) -> str:
    assert main(["compose", "--parts", parts, "--out", str(out), "--sizes", "40", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not out.exists() or not list(out.rglob("*.tar"))
    return err


@pytest.mark.parametrize("record_too", [False, True], ids=["manifest-only", "manifest-and-record"])
def test_a_parts_manifest_naming_dot_dot_is_refused(release, tmp_path, capsys, record_too):
    (release / "data" / "x").write_bytes(b"not a shard")
    rename_parts_shard(release, "../x", record_too)
    err = compose_refused(str(release), tmp_path / "out", capsys)
    assert "../x" in err or "different parts shards" in err
    assert (release / "data" / "x").read_bytes() == b"not a shard"


def test_a_parts_shard_that_is_a_link_is_refused(release, tmp_path, capsys):
    shard = release / "data" / "parts" / "val-00000.tar"
    elsewhere = tmp_path / "elsewhere.tar"
    elsewhere.write_bytes(shard.read_bytes())  # the very bytes: only the link is wrong
    shard.unlink()
    os.symlink(elsewhere, shard)
    err = compose_refused(str(release), tmp_path / "out", capsys)
    assert "val-00000.tar" in err and "not a regular file" in err


def test_a_parts_manifest_that_is_a_link_is_refused(release, tmp_path, capsys):
    manifest = release / "data" / "parts" / "_info.json"
    elsewhere = tmp_path / "info.json"
    elsewhere.write_bytes(manifest.read_bytes())
    manifest.unlink()
    os.symlink(elsewhere, manifest)
    err = compose_refused(str(release), tmp_path / "out", capsys)
    assert "symbolic link" in err


def test_a_parts_folder_that_is_a_link_is_refused(release, tmp_path, capsys):
    parts = release / "data" / "parts"
    moved = tmp_path / "moved-parts"
    parts.rename(moved)
    os.symlink(moved, parts)
    err = compose_refused(str(release), tmp_path / "out", capsys)
    assert "symbolic link" in err or "leads outside" in err


def test_release_refuses_hostile_parts_folders(built, tmp_path, capsys):
    import shutil

    parts = tmp_path / "parts"
    shutil.copytree(built["parts"], parts)
    manifest = json.loads((parts / "_info.json").read_text())
    manifest["splits"]["val"]["shards"][0]["filename"] = "../victim.tar"
    (parts / "_info.json").write_text(json.dumps(manifest))
    (tmp_path / "victim.tar").write_bytes(b"precious")
    out = tmp_path / "rel" / "hard-spurious-imagenet"
    assert main(["release", "--out", str(out), str(built["dataset"]), "--parts", str(parts)]) == 2
    assert "../victim.tar" in capsys.readouterr().err and not out.exists()
    assert (tmp_path / "victim.tar").read_bytes() == b"precious"

    shutil.rmtree(parts)
    shutil.copytree(built["parts"], parts)
    shard = parts / "val-00001.tar"
    target = tmp_path / "elsewhere.tar"
    target.write_bytes(shard.read_bytes())
    shard.unlink()
    os.symlink(target, shard)
    assert main(["release", "--out", str(out), str(built["dataset"]), "--parts", str(parts)]) == 2
    assert "val-00001.tar" in capsys.readouterr().err and not out.exists()


def test_a_published_parts_manifest_naming_dot_dot_is_refused_before_download(built, tmp_path):
    with LoopbackHub() as hub:
        home = tmp_path / "hf-home"
        env = hub_env(hub.endpoint, home)
        assert (
            run_hsi(["publish", str(built["release"]), "--repo", REPO, "--version", "v1.0.0", "--yes"], env).returncode
            == 0
        )
        files = hub.state.repos[REPO].commits[hub.state.repos[REPO].tags["v1.0.0"]].files
        for path in ("data/parts/_info.json", "_release.json"):
            text = files[path].decode().replace('"val-00000.tar"', '"../../../../x"')
            files[path] = text.encode()
        run = run_hsi(["compose", "--parts", f"hf://datasets/{REPO}@v1.0.0", "--out", str(tmp_path / "o")], env)
        assert run.returncode == 2, run.stderr
        assert "../../../../x" in run.stderr and len(run.stderr.strip().splitlines()) == 1
        # the manifest alone names it: it no longer lists the record's shards (a fresh cache: a commit's
        # files never change on the Hub, so a cached copy of the record is kept)
        files["_release.json"] = files["_release.json"].decode().replace('"../../../../x"', '"val-00000.tar"').encode()
        env = hub_env(hub.endpoint, tmp_path / "hf-home-2")
        run = run_hsi(["compose", "--parts", f"hf://datasets/{REPO}@v1.0.0", "--out", str(tmp_path / "o")], env)
        assert run.returncode == 2 and "different parts shards" in run.stderr
    assert not [p for p in tmp_path.rglob("x")] and not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.rglob("*.tar")]  # refused before any shard was downloaded
