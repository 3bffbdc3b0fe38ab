"""Hostile inputs to `hsi release` (issue 11): manifests naming paths outside the release, planted
links, stale or forged validation reports, kills during the folder swap, leftovers of killed runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from json_fuzz import fuzz_reader, value_paths
from release_factory import make_composed_dataset
from subprocesses import run_python

from builder.core.errors import HsiError
from builder.core.hashing import sha256_file
from cards.release import ReleaseError, build_release

NAME = "hard-spurious-imagenet"


def tamper_manifest(dataset: Path, change) -> None:
    path = dataset / "_info.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def snapshot(root: Path, skip: Path) -> dict[str, bytes]:
    """Every file under `root` except under `skip`, with its bytes: what a release must not touch."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"")
        for p in root.rglob("*")
        if not p.is_relative_to(skip)
    }


def test_config_name_with_dot_dot_writes_nothing_outside_the_release(tmp_path):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    tamper_manifest(dataset, lambda m: m.update(config="../../../newcfg"))
    before = snapshot(tmp_path, tmp_path / "rel")
    # refused where the manifest is read (#30: the one name check where the name enters), before any release code
    with pytest.raises(HsiError, match="manifest.config: '../../../newcfg' is not one safe path component"):
        build_release(tmp_path / "rel" / NAME, [dataset])
    assert not (tmp_path / "newcfg").exists()
    assert snapshot(tmp_path, tmp_path / "rel") == before
    assert not (tmp_path / "rel").exists() or not any((tmp_path / "rel").iterdir())


def test_shard_filename_leading_out_never_overwrites_a_foreign_file(tmp_path):
    # The dataset sits so deep that `../../../../victim/important.txt` names the attacker's file
    # from the dataset and the victim's file from the release's staging folder.
    victim = tmp_path / "victim" / "important.txt"
    victim.parent.mkdir()
    victim.write_text("precious")
    dataset = make_composed_dataset(tmp_path / "evil" / "d1" / "d2" / "d3", splits={"test": 3})
    forged = tmp_path / "evil" / "victim" / "important.txt"
    forged.parent.mkdir()
    forged.write_text("overwritten")
    hostile = "../../../../victim/important.txt"

    def change(manifest):
        shard = manifest["splits"]["test"]["shards"][0]
        shard.update(filename=hostile, sha256=sha256_file(forged), bytes=forged.stat().st_size)
        manifest["splits"]["test"]["filenames"][0] = hostile

    tamper_manifest(dataset, change)
    with pytest.raises(ReleaseError, match="not of the form <split>-NNNNN.tar"):
        build_release(tmp_path / "rel" / NAME, [dataset])
    assert victim.read_text() == "precious"


@pytest.mark.parametrize(
    "filename",
    [
        "/etc/passwd",
        "test-00000.tar/../../x",
        "train-00000.tar",
        "test-0.tar",
        "..\\test-00000.tar",
        "test-00000.tar\0",
        "test\u2024-00000.tar",
    ],
)
def test_every_shard_filename_but_split_nnnnn_tar_is_refused(tmp_path, filename):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    tamper_manifest(dataset, lambda m: m["splits"]["test"]["shards"][0].update(filename=filename))
    with pytest.raises(ReleaseError, match="shard filename"):
        build_release(tmp_path / "rel" / NAME, [dataset])


def test_a_shard_listed_twice_is_refused_not_copied_over_itself(tmp_path):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3}, shard_size=2)

    def change(manifest):
        entry = manifest["splits"]["test"]
        entry["shards"][1] = dict(entry["shards"][0])
        entry["num_samples"] = 4

    tamper_manifest(dataset, change)
    with pytest.raises(ReleaseError, match="listed twice"):
        build_release(tmp_path / "rel" / NAME, [dataset])


def test_a_shard_that_is_a_link_out_of_the_dataset_is_refused(tmp_path):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    outside = tmp_path / "elsewhere.tar"
    os.replace(dataset / "test-00000.tar", outside)
    (dataset / "test-00000.tar").symlink_to(outside)
    with pytest.raises(HsiError, match="leads outside|symbolic link"):
        build_release(tmp_path / "rel" / NAME, [dataset])


def test_a_link_planted_in_previews_is_never_followed(tmp_path):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    secret = tmp_path / "secret.txt"
    secret.write_text("id_rsa contents")
    (dataset / "previews" / "sheet-0.png").unlink()
    (dataset / "previews" / "sheet-0.png").symlink_to(secret)  # in place of a preview the report lists
    (dataset / "previews" / "zz-planted.png").symlink_to(secret)
    with pytest.raises(ReleaseError, match="symbolic link"):
        build_release(tmp_path / "rel" / NAME, [dataset])
    copied = [p for p in tmp_path.rglob("*.png") if not p.is_symlink() and p.read_bytes() == secret.read_bytes()]
    assert copied == []


def test_a_picture_the_toolkit_did_not_write_is_never_published(tmp_path):
    """Failed before: every *.png in a config's previews/ went into the release, a user's own too."""
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    (dataset / "previews" / "holiday.png").write_bytes((dataset / "previews" / "sheet-0.png").read_bytes())
    release = build_release(tmp_path / "rel" / NAME, [dataset])
    published = sorted(p.name for p in release.rglob("*.png"))
    assert published == ["sheet-0.png"]
    assert "holiday" not in (release / "README.md").read_text()


def test_a_pass_report_for_other_shard_bytes_is_refused(tmp_path):
    # A rebuild (or a crashed validate) left the old PASS report; the manifest now lists other bytes.
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3}, shard_size=2)
    replacement = make_composed_dataset(tmp_path / "other", splits={"test": 3}, shard_size=2, seed=5)
    os.replace(replacement / "test-00001.tar", dataset / "test-00001.tar")
    new = dataset / "test-00001.tar"
    tamper_manifest(
        dataset, lambda m: m["splits"]["test"]["shards"][1].update(sha256=sha256_file(new), bytes=new.stat().st_size)
    )
    with pytest.raises(ReleaseError, match=r"validation is stale: .*test-00001.tar.*re-run `hsi validate"):
        build_release(tmp_path / "rel" / NAME, [dataset])
    assert not (tmp_path / "rel").exists() or not any((tmp_path / "rel").iterdir())


def test_a_report_without_shard_digests_is_stale(tmp_path):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    report = json.loads((dataset / "validation.json").read_text())
    del report["shards"]
    (dataset / "validation.json").write_text(json.dumps(report))
    with pytest.raises(ReleaseError, match=r"validation is stale .*re-run `hsi validate"):
        build_release(tmp_path / "rel" / NAME, [dataset])


KILLED_RELEASE = """
import os, signal, sys
from pathlib import Path
from cards.release import build_release
name, where = sys.argv[3], sys.argv[4]
real_replace, real_link = os.replace, os.link

def replace(src, dst):
    # the swap's second rename: staging folder -> the release's name
    if where == "swap" and Path(dst).name == name and Path(src).name.endswith(".tmp"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(src, dst)

def link(*args, **kwargs):
    if where == "staging":
        os.kill(os.getpid(), signal.SIGKILL)
    return real_link(*args, **kwargs)

os.replace, os.link = replace, link
build_release(Path(sys.argv[1]), [Path(sys.argv[2])], overwrite=True, version="v1.1.0")
"""


def killed_release(release: Path, dataset: Path, where: str) -> None:
    import signal

    result = run_python(KILLED_RELEASE, release, dataset, release.name, where)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]


def leftovers(release: Path) -> list[str]:
    """The staging and swap folders beside the release; not its lock file, which stays by design
    (builder.core.locks: deleting it would let a waiting run lock another inode)."""
    lock = f".{release.name}.lock"
    return sorted(p.name for p in release.parent.iterdir() if p.name.startswith(f".{release.name}.") and p.name != lock)


def test_sigkill_between_the_swaps_renames_keeps_the_release_history(tmp_path):
    release = tmp_path / "out" / NAME
    build_release(release, [make_composed_dataset(tmp_path / "a", splits={"test": 3})], version="v1.0.0")
    changed = make_composed_dataset(tmp_path / "b", splits={"test": 4})
    killed_release(release, changed, "swap")
    assert not release.exists() and len(leftovers(release)) == 2  # the kill really hit the swap
    # the history survived: a downgrade is still refused, and the next release carries v1.0.0
    with pytest.raises(ReleaseError, match="must raise the minor or major version"):
        build_release(release, [changed], overwrite=True, version="v1.0.1")
    assert json.loads((release / "_release.json").read_text())["version"] == "v1.0.0"
    build_release(release, [changed], overwrite=True, version="v1.1.0")
    meta = json.loads((release / "_release.json").read_text())
    assert [e["version"] for e in meta["changelog"]] == ["v1.1.0", "v1.0.0"]
    assert leftovers(release) == []


def test_a_release_killed_while_staging_leaves_nothing_after_the_next_run(tmp_path):
    release = tmp_path / "out" / NAME
    dataset = make_composed_dataset(tmp_path / "a", splits={"test": 3})
    killed_release(release, dataset, "staging")
    assert [n.endswith(".tmp") for n in leftovers(release)] == [True]
    # folders that only look like ours, or belong to a live run (pid 1), are left alone
    keep = [
        release.parent / f".{NAME}.notes.tmp",
        release.parent / f".{NAME}.1.tmp",
        release.parent / f".{NAME}.12.tmp.bak",
    ]
    for folder in keep:
        folder.mkdir()
    build_release(release, [dataset], version="v1.0.0")
    assert (release / "_release.json").is_file()
    assert leftovers(release) == sorted(p.name for p in keep)


# ---------------------------------------------------------------- issue 21: --overwrite and _release.json


def results_folder(root: Path) -> Path:
    """An `hsi eval --out` folder with one model's report and plot, measured on make_composed_dataset's build."""
    from test_adv_results import eval_report, model_folder

    model_folder(root, "resnet18", eval_report())
    return root


def test_overwrite_never_deletes_a_users_file_named_like_a_results_plot(tmp_path):
    """Failed before (issue 21, 13): results/*_accuracy_vs_size.png was ours by its name, so the
    swap deleted a user's my_accuracy_vs_size.png."""
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 8})
    release = build_release(tmp_path / "out" / NAME, [dataset], results_dirs=[results_folder(tmp_path / "evals")])
    ours = release / "results" / f"{NAME}_resnet18_accuracy_vs_size.png"
    assert ours.is_file()
    mine = release / "results" / "my_accuracy_vs_size.png"
    mine.write_bytes(b"a plot I made by hand")
    with pytest.raises(ReleaseError, match=r"--overwrite would delete results/my_accuracy_vs_size.png"):
        build_release(release, [dataset], overwrite=True)
    assert mine.read_bytes() == b"a plot I made by hand"
    # a file the release wrote but someone changed since is not deleted either
    mine.unlink()
    (release / "data" / NAME / "validation.md").write_text("my notes on the validation\n")
    with pytest.raises(ReleaseError, match=r"--overwrite would delete data/hard-spurious-imagenet/validation.md"):
        build_release(release, [dataset], overwrite=True)
    assert (release / "data" / NAME / "validation.md").read_text() == "my notes on the validation\n"
    # and unchanged files of its own record are replaced as before
    (release / "data" / NAME / "validation.md").write_bytes((dataset / "validation.md").read_bytes())
    build_release(release, [dataset], overwrite=True, results_dirs=[tmp_path / "evals"])
    assert ours.is_file()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("[1, 2]", "_release.json: expected an object, got a list"),
        ("{bad json", "_release.json: _release.json is not valid JSON"),
        ('{"default_config": "x", "configs": {"x": {"splits": []}}}', "_release.json: configs.x.splits: expected an"),
        ('{"default_config": "a", "configs": {}}', "_release.json: default_config: 'a' is not one of its configs"),
    ],
)
def test_a_previous_release_record_that_is_not_ours_is_one_line(tmp_path, capsys, content, expected):
    """Failed before: `hsi release --previous` with a list or bad JSON in _release.json was a traceback."""
    from hsi.cli import main

    previous = tmp_path / "previous"
    previous.mkdir()
    (previous / "_release.json").write_text(content)
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    args = ["release", str(dataset), "--out", str(tmp_path / NAME), "--version", "v1.1.0", "--previous", str(previous)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_release_record_reader_survives_seeded_mutations(tmp_path):
    """Fuzz: every mutation of a real `_release.json` is read or refused as an HsiError, never a crash."""
    import random

    from cards.release import read_release_record

    base = json.loads(
        (build_release(tmp_path / "r" / NAME, [make_composed_dataset(tmp_path / "ds")], version="v1.0.0"))
        .joinpath("_release.json")
        .read_text()
    )
    rng = random.Random(2021)
    junk = [None, -1, 0, 1.5, "", "../x", "x" * 64, [], {}, [{}], {"a": []}, True, "v1.0", "test-00000.tar"]

    every = [p for p in value_paths(base) if p]
    path = tmp_path / "_release.json"
    outcomes = fuzz_reader(read_release_record, path, base, rng, junk, every, renames=junk[5:7])  # renamed keys
    assert outcomes["read"] > 0 and outcomes["refused"] > 0
