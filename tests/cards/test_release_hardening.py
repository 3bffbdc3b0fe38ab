"""Issue 10 hardening of releases, cards and publishing: what the card says is what was built, a
release compares against the last published release only, the dry run works offline."""

from __future__ import annotations

import json

import pytest

from cards.release import ReleaseError, build_release
from release_factory import make_composed_dataset

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
    build_release(release, [make_composed_dataset(tmp_path / "b", splits={"test": 5})], overwrite=True, version="v1.0.0")
    meta = release_meta(release)
    assert meta["version"] == "v1.0.0" and meta["previous"] is None
    assert meta["changelog"] == [{"version": "v1.0.0", "changes": ["first release"]}]
    # v1.0.0 is the base of v1.1.0; rebuilding v1.1.0 compares with v1.0.0 again, not with itself
    build_release(release, [make_composed_dataset(tmp_path / "c", splits={"test": 6})], overwrite=True,
                  version="v1.1.0")
    build_release(release, [make_composed_dataset(tmp_path / "d", splits={"test": 7})], overwrite=True,
                  version="v1.1.0")
    meta = release_meta(release)
    assert [e["version"] for e in meta["changelog"]] == ["v1.1.0", "v1.0.0"]
    assert meta["changelog"][0]["changes"] == ["hard-spurious-imagenet/test: samples changed (5 -> 7 samples)"]
    assert meta["previous"]["version"] == "v1.0.0"
    # a patch of the published v1.1.0 with other samples is still refused
    with pytest.raises(ReleaseError, match="must raise the minor or major version"):
        build_release(release, [make_composed_dataset(tmp_path / "e", splits={"test": 2})], overwrite=True,
                      version="v1.1.1")


def test_previous_must_be_a_published_release(tmp_path):
    trial = build_release(tmp_path / "trial" / NAME, [make_composed_dataset(tmp_path / "a", splits={"test": 3})])
    with pytest.raises(ReleaseError, match="unversioned build, not a published release"):
        build_release(tmp_path / "next" / NAME, [make_composed_dataset(tmp_path / "b", splits={"test": 3})],
                      version="v1.0.0", previous_release=trial)


# ---------------------------------------------------------------- 10.5: publish offline, unversioned


def hsi_offline(args, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf-home"), HF_ENDPOINT="http://127.0.0.1:9")
    return subprocess.run([sys.executable, "-m", "hsi.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[2])


def test_publish_dry_run_offline_says_what_it_cannot_check_and_refuses_yes(tmp_path):
    release = build_release(tmp_path / "r" / NAME, [make_composed_dataset(tmp_path / "a", splits={"test": 3})],
                            version="v1.0.0")
    args = ["publish", str(release), "--repo", "lab/hsi", "--version", "v1.0.0"]
    dry = hsi_offline(args, tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "Traceback" not in dry.stderr and "OfflineModeIsEnabled" not in dry.stderr
    assert "offline (HF_HUB_OFFLINE is set)" in dry.stdout and "cannot check whether the repo exists" in dry.stdout
    assert "upload data/hard-spurious-imagenet/test-00000.tar" in dry.stdout and "dry run: nothing changed" in dry.stdout
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
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_train_stream_example_reads_splits_and_classes_from_the_manifest(tmp_path):
    # a release whose default config has only `val` and 3 classes, a second config with train and test
    main = make_composed_dataset(tmp_path / "a", splits={"val": 6}, num_classes=3)
    ten = make_composed_dataset(tmp_path / "a", config="hard-spurious-imagenet-10", splits={"train": 4, "test": 4},
                                num_classes=2)
    release = build_release(tmp_path / "r" / NAME, [main, ten], version="v1.0.0")
    plain = run_example([NAME, "--steps", "2", "--batch-size", "2", "--workers", "0"], release.parent)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert "training on split val of hard-spurious-imagenet: 3 classes" in plain.stdout
    assert "epoch 0 step 2" in plain.stdout
    other = run_example([NAME, "--config", "hard-spurious-imagenet-10", "--steps", "1", "--workers", "0"],
                        release.parent)
    assert other.returncode == 0, other.stderr[-2000:]
    assert "training on split train of hard-spurious-imagenet-10: 2 classes" in other.stdout
    wrong = run_example([NAME, "--split", "train", "--steps", "1", "--workers", "0"], release.parent)
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert "split 'train' is not in hard-spurious-imagenet; it has val" in wrong.stderr
