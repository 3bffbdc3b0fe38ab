"""Issue 10 hardening of releases, cards and publishing: what the card says is what was built, a
release compares against the last published release only, the dry run works offline."""

from __future__ import annotations

import json

import pytest
from release_factory import make_composed_dataset
from subprocesses import run_hsi

from cards.release import ReleaseError, build_release

NAME = "hard-spurious-imagenet"


def release_meta(release):
    return json.loads((release / "_release.json").read_text("utf-8"))


# ---------------------------------------------------------------- 10.13: the last published release


def test_overwriting_an_unversioned_build_leaves_no_stale_unreleased_entry(tmp_path):
    release = tmp_path / "out" / NAME
    first = make_composed_dataset(tmp_path / "a", splits={"test": 3})
    build_release(release, [first])  # a trial build, never published
    build_release(release, [first], overwrite=True, version="v1.0.0")
    assert [e["version"] for e in release_meta(release)["changelog"]] == ["v1.0.0"]
    changed = make_composed_dataset(tmp_path / "b", splits={"test": 4})
    build_release(release, [changed], overwrite=True, version="v1.1.0")
    changelog = release_meta(release)["changelog"]
    assert [e["version"] for e in changelog] == ["v1.1.0", "v1.0.0"]
    assert any("samples changed (3 -> 4 samples)" in line for line in changelog[0]["changes"])
    assert "unreleased" not in (release / "README.md").read_text("utf-8")


def test_rebuilding_the_same_version_compares_with_the_release_before_it(tmp_path):
    release = tmp_path / "out" / NAME
    build_release(release, [make_composed_dataset(tmp_path / "a", splits={"test": 3})], version="v1.0.0")
    # v1.0.0 was never published: a rebuild with other samples keeps v1.0.0 (it is not its own base)
    build_release(
        release, [make_composed_dataset(tmp_path / "b", splits={"test": 5})], overwrite=True, version="v1.0.0"
    )
    meta = release_meta(release)
    assert meta["version"] == "v1.0.0" and meta["previous"] is None
    assert meta["changelog"] == [{"version": "v1.0.0", "changes": ["first release"]}]
    # v1.0.0 is the base of v1.1.0; rebuilding v1.1.0 compares with v1.0.0 again, not with itself
    build_release(
        release, [make_composed_dataset(tmp_path / "c", splits={"test": 6})], overwrite=True, version="v1.1.0"
    )
    build_release(
        release, [make_composed_dataset(tmp_path / "d", splits={"test": 7})], overwrite=True, version="v1.1.0"
    )
    meta = release_meta(release)
    assert [e["version"] for e in meta["changelog"]] == ["v1.1.0", "v1.0.0"]
    assert meta["changelog"][0]["changes"] == ["hard-spurious-imagenet/test: samples changed (5 -> 7 samples)"]
    assert meta["previous"]["version"] == "v1.0.0"
    # a patch of the published v1.1.0 with other samples is still refused
    with pytest.raises(ReleaseError, match="must raise the minor or major version"):
        build_release(
            release, [make_composed_dataset(tmp_path / "e", splits={"test": 2})], overwrite=True, version="v1.1.1"
        )


def test_previous_must_be_a_published_release(tmp_path):
    trial = build_release(tmp_path / "trial" / NAME, [make_composed_dataset(tmp_path / "a", splits={"test": 3})])
    with pytest.raises(ReleaseError, match="unversioned build, not a published release"):
        build_release(
            tmp_path / "next" / NAME,
            [make_composed_dataset(tmp_path / "b", splits={"test": 3})],
            version="v1.0.0",
            previous_release=trial,
        )


# ---------------------------------------------------------------- 10.5: publish offline, unversioned


def hsi_offline(args, tmp_path):
    import os

    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf-home"), HF_ENDPOINT="http://127.0.0.1:9")
    return run_hsi(args, env)


def test_publish_dry_run_offline_says_what_it_cannot_check_and_refuses_yes(tmp_path):
    release = build_release(
        tmp_path / "r" / NAME, [make_composed_dataset(tmp_path / "a", splits={"test": 3})], version="v1.0.0"
    )
    args = ["publish", str(release), "--repo", "lab/hsi", "--version", "v1.0.0"]
    dry = hsi_offline(args, tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "Traceback" not in dry.stderr and "OfflineModeIsEnabled" not in dry.stderr
    assert "offline (HF_HUB_OFFLINE is set)" in dry.stdout and "cannot check whether the repo exists" in dry.stdout
    assert "upload data/hard-spurious-imagenet/test-00000.tar" in dry.stdout
    assert "dry run: nothing changed" in dry.stdout
    real = hsi_offline(args + ["--yes"], tmp_path)
    assert real.returncode != 0 and "Traceback" not in real.stderr
    assert "cannot publish to lab/hsi offline" in real.stderr


def test_publishing_an_unversioned_release_names_the_fix_not_none(tmp_path):
    release = build_release(tmp_path / "r" / NAME, [make_composed_dataset(tmp_path / "a", splits={"test": 3})])
    result = hsi_offline(["publish", str(release), "--repo", "lab/hsi", "--version", "v1.0.0"], tmp_path)
    assert result.returncode != 0 and "None" not in result.stderr and "Traceback" not in result.stderr
    assert "was built without a version" in result.stderr and "hsi release --version v1.0.0" in result.stderr


# ---------------------------------------------------------------- 10.15: examples/train_stream.py


def run_example(args, cwd):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "train_stream.py"
    env = dict(os.environ, PYTHONPATH=str(script.parents[1]))
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_train_stream_example_reads_splits_and_classes_from_the_manifest(tmp_path):
    # a release whose default config has only `val` and 3 classes, a second config with train and test
    main = make_composed_dataset(tmp_path / "a", splits={"val": 6}, num_classes=3)
    ten = make_composed_dataset(
        tmp_path / "a", config="hard-spurious-imagenet-10", splits={"train": 4, "test": 4}, num_classes=2
    )
    release = build_release(tmp_path / "r" / NAME, [main, ten], version="v1.0.0")
    plain = run_example([NAME, "--steps", "2", "--batch-size", "2", "--workers", "0"], release.parent)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert "training on split val of hard-spurious-imagenet: 3 classes" in plain.stdout
    assert "epoch 0 step 2" in plain.stdout
    other = run_example(
        [NAME, "--config", "hard-spurious-imagenet-10", "--steps", "1", "--workers", "0"], release.parent
    )
    assert other.returncode == 0, other.stderr[-2000:]
    assert "training on split train of hard-spurious-imagenet-10: 2 classes" in other.stdout
    wrong = run_example([NAME, "--split", "train", "--steps", "1", "--workers", "0"], release.parent)
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert "split 'train' is not in hard-spurious-imagenet; it has val" in wrong.stderr


# ---------------------------------------------------------------- 10.12: the card says what was built


def composed(tmp_path, name: str, overrides=None, wnids=("n01440764", "n01443537", "n01484850")):
    """A real compose of fake parts (one image per class), with a passing validation report."""
    from parts_factory import fake_images, write_parts

    from builder.compose.stage import compose_dataset
    from builder.core.manifest import Manifest, write_json_atomic
    from builder.core.stage import RunOptions

    parts = tmp_path / f"parts-{name}"
    if not parts.exists():
        write_parts(parts, {"val": fake_images(list(wnids), per_class=1)})
    summary = compose_dataset(
        parts,
        "hard-spurious-imagenet",
        tmp_path / f"out-{name}",
        overrides=overrides,
        options=RunOptions(progress=False),
    )
    manifest = Manifest.read(summary.dataset_dir)
    write_json_atomic(
        summary.dataset_dir / "validation.json",
        {"ok": True, "fingerprint": manifest.fingerprint, "shards": manifest.shard_sha256()},
    )
    return summary.dataset_dir


def card_of(release):
    return (release / "README.md").read_text("utf-8")


def test_card_counts_the_classes_present_and_names_the_backends(tmp_path):
    import yaml

    release = build_release(tmp_path / "r" / NAME, [composed(tmp_path, "paper")], version="v1.0.0")
    card = card_of(release)
    # 3 images of 3 classes: not "1000"
    assert "| hard-spurious-imagenet | yes | val | 36 | 3 of 1000 labels |" in card
    assert "# Hard-Spurious-ImageNet (v1.0.0)" in card and "It is the benchmark of" in card
    assert yaml.safe_load(card.split("---\n")[1])["pretty_name"] == "Hard-Spurious-ImageNet"
    backends = json.loads((release / "data" / NAME / "_info.json").read_text())["parts"]["backends"]
    masker, inpainter = backends["masker"]["name"], backends["inpainter"]["name"]
    assert (masker, inpainter) != ("sam", "lama")  # the fake parts: so the prose must say so
    assert "Objects were cut out with" in card and "The paper used SAM masks and LaMa inpainting" in card
    assert "errors (skipped inputs)" not in card
    assert "| compose issues (inputs skipped or composites dropped) | 0 |" in card


def test_custom_release_is_not_titled_or_described_as_the_papers_benchmark(tmp_path):
    import yaml

    overrides = {"positions": ["bottom-left", "left"], "backgrounds": ["original", "gray"], "sizes": [56, 84]}
    dataset = composed(tmp_path, "custom", overrides)
    release = build_release(tmp_path / "r" / NAME, [dataset], version="v1.0.0")
    card = card_of(release)
    assert "# Hard-Spurious-ImageNet toolkit: a custom build (v1.0.0)" in card
    assert yaml.safe_load(card.split("---\n")[1])["pretty_name"] == "Hard-Spurious-ImageNet toolkit: a custom build"
    assert "It is the benchmark of" not in card and "CeO (centre, own" not in card
    assert "It is not that benchmark" in card and "bottom-left/gray" in card
    # the spec kept the paper's description; the card describes what this spec holds instead
    assert json.loads((release / "data" / dataset.name / "_info.json").read_text())["spec"]["description"].startswith(
        "ImageNet objects pasted at 56, 84 or 112 px"
    )
    assert "ImageNet objects pasted at 56, 84 or 112 px" not in card
    assert (
        "A custom spec: objects at 56 and 84 px (square) on a 224 px canvas; placed at bottom-left and left; "
        "on original and gray backgrounds." in card
    )


def test_release_title_and_description_options(tmp_path):
    from hsi.cli import main as hsi_main

    dataset = composed(tmp_path, "paper")
    out = tmp_path / "r" / NAME
    assert (
        hsi_main(
            [
                "release",
                str(dataset),
                "--out",
                str(out),
                "--version",
                "v1.0.0",
                "--title",
                "Gray corners",
                "--description",
                "Our lab's gray-background corner set.",
            ]
        )
        == 0
    )
    card = card_of(out)
    assert "# Gray corners (v1.0.0)\n\nOur lab's gray-background corner set.\n" in card
    assert "pretty_name: Gray corners" in card and "It is the benchmark of" not in card


def test_compose_issues_are_named_by_reason(tmp_path):
    from manifest_io import read_manifest

    from cards.render import render_card
    from cards.summary import ConfigSummary

    manifest = read_manifest(make_composed_dataset(tmp_path))
    manifest["errors"] = {"total": 3, "by_reason": {"no-foreign-background": 2, "unreadable-parts": 1}}
    card = render_card([ConfigSummary(NAME, manifest, {"ok": True}, (), True, 3)])
    assert (
        "| compose issues (inputs skipped or composites dropped) | 3 (no-foreign-background: 2, "
        "unreadable-parts: 1) |" in card
    )


def test_bibtex_key_is_the_same_in_readme_and_card(tmp_path):
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
    card = card_of(build_release(tmp_path / "r" / NAME, [make_composed_dataset(tmp_path / "a")], version="v1.0.0"))
    keys = [re.findall(r"@article\{([^,]+),", text) for text in (readme, card)]
    assert keys[0] and keys[0] == keys[1]


def test_card_webdataset_snippet_runs_without_the_shardshuffle_warning(tmp_path, monkeypatch):
    import re
    import warnings

    release = build_release(
        tmp_path / "r" / NAME, [make_composed_dataset(tmp_path / "a", splits={"test": 9})], version="v1.0.0"
    )
    card = card_of(release)
    snippet = re.search(r"With WebDataset.*?```python\n(.*?)```", card, re.S)[1]
    assert "{00000..00002}" in snippet  # the three shards the manifest lists
    monkeypatch.chdir(release.parent)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scope: dict = {}
        exec(snippet, scope)  # noqa: S102 - the card's own snippet, as a user would paste it
        rows = list(scope["ds"])
    assert len(rows) == 9 and rows[0][2]["group"] == "CeO"
    assert not [w for w in caught if "shardshuffle" in str(w.message)], [str(w.message) for w in caught]


# ---------------------------------------------------------------- 10.18: the git mirror stores shards in LFS


def test_git_mirror_keeps_shards_in_lfs_with_pointers_and_gitattributes(tmp_path, capsys):
    import hashlib
    import subprocess

    from hf_scripts.git_mirror import git, lfs_object_path
    from hsi.cli import main as hsi_main

    release = build_release(
        tmp_path / "r" / NAME, [make_composed_dataset(tmp_path / "a", splits={"test": 9})], version="v1.0.0"
    )
    mirror = tmp_path / "mirror"
    assert hsi_main(["publish", str(release), "--to-git", str(mirror), "--version", "v1.0.0"]) == 0
    assert "git LFS for *.tar (.gitattributes" in capsys.readouterr().out
    assert hsi_main(["publish", str(release), "--to-git", str(mirror), "--version", "v1.0.0", "--yes"]) == 0
    assert git(mirror, "show", "v1.0.0:.gitattributes") == "*.tar filter=lfs diff=lfs merge=lfs -text"
    shards = sorted((release / "data" / NAME).glob("*.tar"))
    assert len(shards) == 3
    for shard in shards:
        data = shard.read_bytes()
        oid = hashlib.sha256(data).hexdigest()
        pointer = subprocess.run(
            ["git", "-C", str(mirror), "show", f"v1.0.0:data/{NAME}/{shard.name}"], capture_output=True, check=True
        ).stdout
        assert pointer == f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n".encode()
        assert lfs_object_path(mirror, oid).read_bytes() == data
        assert (mirror / "data" / NAME / shard.name).read_bytes() == pointer  # the checkout holds pointers too
    # no git object holds a shard's bytes
    listing = git(mirror, "cat-file", "--batch-all-objects", "--batch-check=%(objecttype) %(objectsize)")
    blob_sizes = {int(size) for kind, size in (line.split() for line in listing.splitlines()) if kind == "blob"}
    assert not blob_sizes & {shard.stat().st_size for shard in shards}
    assert git(mirror, "status", "--porcelain", "--untracked-files=all") == ""


# ---------------------------------------------------------------- 10.17: loading a composed folder


def test_a_composed_folder_loads_with_load_composed_and_other_folders_are_refused(tmp_path):
    from datasets import load_dataset
    from parts_factory import fake_images, write_parts

    from cards.release import load_composed

    dataset = make_composed_dataset(tmp_path / "out", splits={"test": 5, "train": 3}, shard_size=2)
    with pytest.raises(ValueError, match="validation"):  # why: datasets takes validation.json for a split
        load_dataset(str(dataset), cache_dir=str(tmp_path / "cache0"))
    loaded = load_composed(dataset, cache_dir=str(tmp_path / "cache1"))
    assert {name: ds.num_rows for name, ds in loaded.items()} == {"test": 5, "train": 3}
    assert loaded["test"].features["cls"].names == ["tench", "cock", "indigo bunting"]
    assert loaded["test"][0]["json"]["group"] == "CeO" and loaded["test"][0]["__key__"] == "test_000000"
    one = load_composed(dataset, split="train", cache_dir=str(tmp_path / "cache2"))
    assert one.num_rows == 3
    with pytest.raises(ReleaseError, match="split 'val' is not in .*; it has test, train"):
        load_composed(dataset, split="val")
    # a release folder loads by its card
    release = build_release(tmp_path / "r" / NAME, [dataset], version="v1.0.0")
    assert load_composed(release, split="test", cache_dir=str(tmp_path / "cache3")).num_rows == 5
    # not a composed dataset: the message says what it is and points to `hsi release`
    with pytest.raises(ReleaseError, match="neither a composed dataset folder nor a release.*hsi release"):
        load_composed(tmp_path / "out")
    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(["n01440764"], per_class=1)})
    with pytest.raises(ReleaseError, match="holds the output of stage 'extract', not a composed dataset"):
        load_composed(parts)
