"""Hostile shards against the viewer checks of `hsi verify` and `hsi publish` (issue 32,
hf_scripts/viewer_checks.py): bytes that are not a tar, links and folders inside it, names without
an extension, json that is not an object or too large, a dotted key uploaded straight to the Hub
(past `hsi publish`, which refuses it). Each is a line, never a crash."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hub_server import LoopbackHub, Repo, hub_env
from release_factory import make_composed_dataset, rewrite_release_shard, tar_members

import hf_scripts.viewer_checks as viewer_checks
from builder.core.manifest import Manifest
from cards.release import build_release
from hf_scripts.viewer_checks import viewer_problems
from hsi.cli import main

NAME = "hard-spurious-imagenet"
DATA = f"data/{NAME}"


@pytest.fixture
def folder(tmp_path) -> Path:
    dataset = make_composed_dataset(tmp_path / "composed", splits={"test": 8}, shard_size=2)
    return build_release(tmp_path / "release" / NAME, [dataset], version="v1.0.0")


def problems_of(folder: Path, shard: str, data: bytes) -> list[str]:
    """The viewer lines of the release's config with `shard` replaced by `data` (no reseal: the
    checks are called on the shards directly)."""
    (folder / DATA / shard).write_bytes(data)
    manifest = Manifest.from_json(json.loads((folder / DATA / "_info.json").read_text()))
    paths = {s.filename: folder / DATA / s.filename for e in manifest.splits.values() for s in e.shards}
    unreadable, partial = viewer_problems(NAME, manifest, paths)
    return unreadable + partial


def tar_of(entries) -> bytes:
    """A tar of (TarInfo, bytes or None) entries."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def file_info(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def members_of(folder: Path, shard: str) -> list[tuple[str, bytes]]:
    return tar_members(folder / DATA / shard)


@pytest.mark.parametrize("data", [b"", b"not a tar at all" * 100, b"\0" * 511, os.urandom(4096)])
def test_bytes_that_are_not_a_tar_are_one_line(folder, data):
    problems = problems_of(folder, "test-00001.tar", data)
    # an empty or zero-filled file reads as an empty tar: its samples are missing, which the counts
    # and hashes of `hsi verify` report; garbage is a line of its own
    assert all("Traceback" not in line for line in problems)
    if data and data.strip(b"\0"):
        assert any("shards that do not read as tar archives" in line and "test-00001.tar" in line for line in problems)


def test_links_folders_and_names_without_an_extension_are_lines(folder):
    good = members_of(folder, "test-00001.tar")
    link = tarfile.TarInfo("test_000002.jpg")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    directory = tarfile.TarInfo("test_000002")
    directory.type = tarfile.DIRTYPE
    entries = [(directory, None), (link, None), file_info("README", b"hello")]
    entries += [file_info(name, data) for name, data in good if not name.endswith(".jpg") or "000003" in name]
    problems = problems_of(folder, "test-00001.tar", tar_of(entries))
    not_files = "not regular files (2: test-00001.tar:test_000002; test-00001.tar:test_000002.jpg)"
    assert any(not_files in p for p in problems)
    assert any("members without an extension (the viewer skips them) (1: test-00001.tar:README)" in p for p in problems)
    assert any("extensions differ" in p and "test_000002 {cls, json}" in p for p in problems)


@pytest.mark.parametrize(
    "payload, why",
    [
        (b"[1, 2, 3]", "json does not read as an object"),
        (b"\xff\xfe not utf-8", "json does not read as an object"),
        (b"{", "json does not read as an object"),
        (b'{"a": 1}', "json fields lacks"),
    ],
)
def test_a_json_that_is_not_the_schemas_object_is_a_feature_line(folder, payload, why):
    members = [(n, payload if n == "test_000007.json" else d) for n, d in members_of(folder, "test-00003.tar")]
    problems = problems_of(folder, "test-00003.tar", tar_of([file_info(n, d) for n, d in members]))
    assert problems == [
        f"{NAME}: samples whose features differ from those the viewer infers from its first samples "
        f"(1: test-00003.tar:test_000007: {why}" + (problems[0].split(why, 1)[1] if why == "json fields lacks" else ")")
    ]


def test_an_oversized_json_is_not_read(folder, monkeypatch):
    monkeypatch.setattr(viewer_checks, "JSON_LIMIT", 10)
    problems = problems_of(folder, "test-00000.tar", (folder / DATA / "test-00000.tar").read_bytes())
    assert problems == []  # no json reads, so none is compared, and no group counts: nothing to show
    # the streamed schema check of `hsi verify` is what reports a json it cannot read


def test_a_dotted_name_in_a_folder_of_the_tar_counts_only_the_last_component(folder):
    members = [(f"sub.dir/{n}", d) for n, d in members_of(folder, "test-00001.tar")]
    problems = problems_of(folder, "test-00001.tar", tar_of([file_info(n, d) for n, d in members]))
    assert not any("keys hold a dot" in p for p in problems)  # the viewer splits the base name only
    assert problems == []  # the keys `sub.dir/test_000002`... have no dot in their last component


def test_publish_refuses_a_dotted_key_before_any_upload(folder, capsys, monkeypatch):
    def dotted(members):
        return [(n.replace("test_000003", "test.000003"), d) for n, d in members]

    rewrite_release_shard(folder, "test-00001.tar", dotted)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status = main(["publish", str(folder), "--repo", "lab/dotted", "--version", "v1.0.0"])
    err = capsys.readouterr().err
    assert status != 0
    assert "the Hub's dataset viewer would refuse or show only part of it" in err
    assert "keys hold a dot" in err and "test-00001.tar:test.000003.cls" in err


VERIFY = """
import sys
from hsi.cli import main
sys.exit(main(["verify", sys.argv[1], "--version", "v1.0.0"]))
"""


def test_verify_on_the_hub_refuses_a_dotted_key_uploaded_past_publish(folder, tmp_path):
    def dotted(members):
        return [(n.replace("test_000003", "test.000003"), d) for n, d in members]

    rewrite_release_shard(folder, "test-00001.tar", dotted)
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    with LoopbackHub() as hub:
        repo = Repo(private=False)
        repo.tags["v1.0.0"] = repo.commit(None, files, "Release v1.0.0")
        hub.state.repos["lab/dotted"] = repo
        env = hub_env(hub.endpoint, tmp_path / "home")
        result = subprocess.run(
            [sys.executable, "-c", VERIFY, "lab/dotted"],
            env=dict(env, PYTHONPATH=os.pathsep.join(sys.path)),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode == 1, result.stderr[-2000:]
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED:")]
    assert len(failed) == 2, failed
    assert "keys hold a dot" in failed[0] and "test-00001.tar:test.000003.cls" in failed[0]
    assert "extensions differ" in failed[1]
    assert f"{NAME}/test: 4 shards hashed, not streamed (see its samples)" in result.stdout
