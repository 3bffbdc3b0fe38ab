"""hf_scripts.release_checks without a Hub: the fingerprint recomputed from a real compose output,
the card read as `datasets` reads it (globs, data_dir, a missing config), the files record."""

from __future__ import annotations

import json

import yaml
from parts_factory import fake_images, write_parts
from release_factory import make_composed_dataset

from builder.compose.stage import compose_dataset
from builder.core.manifest import Manifest
from builder.core.stage import RunOptions
from cards.release import build_release
from hf_scripts.release_checks import (
    card_problems,
    fingerprint_problems,
    recomputed_fingerprint,
    recorded_file_problems,
)

NAME = "hard-spurious-imagenet"


def test_a_real_compose_manifest_recomputes_to_its_own_fingerprint(tmp_path):
    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(["n01443537", "n02437312"], per_class=1)}, shard_size=4)
    summary = compose_dataset(parts, NAME, tmp_path / "out", options=RunOptions(progress=False))
    manifest = Manifest.read(summary.dataset_dir)
    assert recomputed_fingerprint(manifest) == manifest.fingerprint
    assert fingerprint_problems(NAME, manifest, manifest.fingerprint) == []
    manifest.spec["sizes"] = [56]
    assert fingerprint_problems(NAME, manifest, manifest.fingerprint)[0].startswith(
        f"data/{NAME}/_info.json: fingerprint {manifest.fingerprint} is not that of the settings it records"
    )


def test_a_real_extract_manifest_of_two_splits_recomputes_to_its_own_fingerprint(tmp_path):
    from fake_imagenet import write_tree

    from hsi.cli import main

    for split, count in (("val", 1), ("train", 1)):
        write_tree(tmp_path / "imagenet", split=split, count=count)
        argv = ["extract", "--no-progress", "--source", tmp_path / "imagenet", "--split", split, "--out", tmp_path]
        assert main(list(map(str, argv))) == 0
    manifest = Manifest.read(tmp_path / "parts")
    assert sorted(manifest.splits) == ["train", "val"]
    assert recomputed_fingerprint(manifest) == manifest.fingerprint
    manifest.settings["val"]["max_pixels"] = 1
    assert recomputed_fingerprint(manifest) != manifest.fingerprint


def release_card(tmp_path):
    release = build_release(tmp_path / NAME, [make_composed_dataset(tmp_path / "a", splits={"test": 5}, shard_size=2)])
    text = (release / "README.md").read_text()
    manifests = {NAME: Manifest.read(release / "data" / NAME)}
    return release, text, manifests


def with_configs(text: str, edit) -> str:
    _, header, body = text.split("---\n", 2)
    metadata = yaml.safe_load(header)
    edit(metadata["configs"][0])
    return f"---\n{yaml.safe_dump(metadata, sort_keys=False)}---\n{body}"


def test_the_card_must_read_exactly_the_manifests_shards(tmp_path):
    _, text, manifests = release_card(tmp_path)
    assert card_problems(text, manifests) == ([], {NAME})

    def glob(config):
        config["data_files"] = [{"split": "test", "path": f"data/{NAME}/*.tar"}]

    problems, exact = card_problems(with_configs(text, glob), manifests)
    assert exact == set() and problems == [
        f"README.md: config '{NAME}' split 'test' reads data/{NAME}/*.tar, which data/{NAME}/_info.json does not list",
        *(
            f"README.md: config '{NAME}' split 'test' does not read data/{NAME}/test-0000{n}.tar, which "
            f"data/{NAME}/_info.json lists"
            for n in range(3)
        ),
    ]

    def data_dir(config):
        config["data_dir"] = "elsewhere"

    problems, exact = card_problems(with_configs(text, data_dir), manifests)
    assert exact == {NAME} and problems == [
        f"README.md: config '{NAME}' sets data_dir, which `hsi release` never writes (it changes which files "
        "load_dataset reads)"
    ]
    problems, exact = card_problems(text, {**manifests, "other": manifests[NAME]})
    assert problems == ["README.md: declares no config 'other'; _release.json lists it"]


def test_the_files_record_is_compared_both_ways(tmp_path):
    release, _, _ = release_card(tmp_path)
    record = json.loads((release / "_release.json").read_text())
    present = {p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file()}
    shards = {p: d for p, d in record["files"].items() if p.endswith(".tar")}

    def digest(path):
        return "0" * 64 if path == "README.md" else record["files"][path]

    revision = (present | {"extra.bin"}) - {f"data/{NAME}/validation.md"}
    problems = recorded_file_problems(record, revision, digest, shards)
    assert problems == [
        "README.md: sha256 differs from _release.json's record (changed since `hsi release` wrote it)",
        f"data/{NAME}/validation.md: _release.json records it, the revision lacks it",
        "extra.bin: in the revision but not part of the release (_release.json does not list it)",
    ]
    del record["files"]
    assert recorded_file_problems(record, present, digest, shards)[0].startswith(
        "_release.json records no file's sha256"
    )
