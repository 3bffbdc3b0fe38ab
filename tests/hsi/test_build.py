"""`hsi build`: an ImageNet-layout folder to a versioned release in one command, that `hsi verify`
passes, that holds its parts config, that `hsi compose --parts RELEASE` regenerates byte for byte,
and that the same command resumes."""

import json
import re

from fake_imagenet import extract_args, shard_hashes, write_tree

from hsi.cli import main

RELEASE = "hard-spurious-imagenet"


def build_args(source, out, *extra: str, version: str = "v1.0.0") -> list[str]:
    return ["build", "--no-progress", "--source", str(source), "--out", str(out), "--version", version, *extra]


def test_build_gives_a_verified_release_that_regenerates(tmp_path, capsys):
    tree = write_tree(tmp_path / "imagenet", count=6)
    out = tmp_path / "B"
    assert main(build_args(tree.root, out)) == 0
    printed = capsys.readouterr().out
    assert re.findall(r"^\[(\d)/4\] (\w+):", printed, re.M) == [
        ("1", "extract"),
        ("2", "compose"),
        ("3", "validate"),
        ("4", "release"),
    ]
    release = out / RELEASE
    assert f"hsi verify {release} --version v1.0.0" in printed
    assert f"hsi publish {release} --version v1.0.0" in printed
    assert f"hsi compose --parts {release}" in printed
    record = json.loads((release / "_release.json").read_text())
    assert record["version"] == "v1.0.0" and set(record["configs"]) == {RELEASE, "parts"}
    # validated with the parts: the pixel checks of objects and backgrounds ran
    validation = json.loads((out / "datasets" / RELEASE / "validation.json").read_text())
    assert validation["ok"] is True and validation.get("fill_quality")

    assert main(["verify", str(release), "--version", "v1.0.0"]) == 0
    assert "OK:" in capsys.readouterr().out
    # the release alone (its parts config) composes the same bytes as the build did
    assert main(["compose", "--no-progress", "--parts", str(release), "--out", str(tmp_path / "again")]) == 0
    built = shard_hashes(out / "datasets" / RELEASE)
    assert built and shard_hashes(tmp_path / "again" / RELEASE) == built


def test_build_resumes_after_a_stage_and_keeps_what_is_current(tmp_path, capsys):
    tree = write_tree(tmp_path / "imagenet", count=6)
    out = tmp_path / "B"
    # a build stopped after its extract: the same parts the build would write
    assert main(extract_args(tree.root, out, "--shard-size", "2")) == 0
    parts = shard_hashes(out / "parts")
    capsys.readouterr()
    assert main(build_args(tree.root, out, "--shard-size", "2")) == 0
    first = capsys.readouterr().out
    assert "[1/4] extract: 6 parts of 6 images" in first and "(0 shards built, 3 reused)" in first
    assert shard_hashes(out / "parts") == parts
    release_record = (out / RELEASE / "_release.json").read_bytes()
    stamp = (out / RELEASE / "_release.json").stat().st_mtime_ns

    assert main(build_args(tree.root, out, "--shard-size", "2")) == 0
    again = capsys.readouterr().out
    assert "passed earlier, kept" in again and f"{out / RELEASE} v1.0.0 is current, kept" in again
    assert (out / RELEASE / "_release.json").stat().st_mtime_ns == stamp
    # a new version of the same data: the release is rewritten, nothing upstream rebuilt
    assert main(build_args(tree.root, out, "--shard-size", "2", version="v1.0.1")) == 0
    bumped = capsys.readouterr().out
    assert "(0 shards built, 3 reused)" in bumped and "v1.0.1, with the parts config" in bumped
    assert (out / RELEASE / "_release.json").read_bytes() != release_record


def test_build_refuses_before_writing_anything(tmp_path, capsys):
    tree = write_tree(tmp_path / "imagenet", count=2)
    out = tmp_path / "B"
    assert main(build_args(tree.root, out, version="1.0")) == 2
    assert "not of the form vMAJOR.MINOR.PATCH" in capsys.readouterr().err
    assert main(build_args(tree.root, out, "--variant", "no-such-variant")) == 2
    assert "no-such-variant" in capsys.readouterr().err
    assert not out.exists()
