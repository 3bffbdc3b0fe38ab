"""`hsi verify` checks what the Hub's dataset viewer needs of each WebDataset config (issue 32,
hf_scripts/viewer_checks.py): the same extensions in every sample, no dot in a key, the first 5
samples' features those of every sample, every group and size inside the viewer's first 5 GB. The
5 GB budget is the module constant `VIEWER_BUDGET_BYTES`, lowered here with monkeypatch to one
shard's bytes (20,480) so a tiny release shows what a large one would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from release_factory import make_composed_dataset, rewrite_release_shard

import hf_scripts.viewer_checks as viewer_checks
from cards.release import build_release
from hsi.cli import main

NAME = "hard-spurious-imagenet"
DATA = f"data/{NAME}"


def release(tmp_path: Path, **composed) -> Path:
    dataset = make_composed_dataset(tmp_path / "composed", splits={"test": 8}, shard_size=2, **composed)
    return build_release(tmp_path / "release" / NAME, [dataset], version="v1.0.0")


def dotted_key(members: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    return [(name.replace("test_000003", "test.000003"), data) for name, data in members]


def verify(folder: Path, capsys) -> tuple[int, list[str]]:
    status = main(["verify", str(folder)])
    return status, [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAILED:")]


def test_a_good_release_passes_the_viewer_checks(tmp_path, capsys):
    folder = release(tmp_path)
    assert verify(folder, capsys) == (0, [])


def test_a_resealed_shard_passes_everything_but_the_change(tmp_path, capsys):
    """The helper itself: a shard rewritten with the same members is intact again."""
    folder = release(tmp_path)
    rewrite_release_shard(folder, "test-00001.tar", lambda members: members)
    assert verify(folder, capsys) == (0, [])


def test_a_dotted_key_is_refused(tmp_path, capsys):
    folder = release(tmp_path)
    rewrite_release_shard(folder, "test-00001.tar", dotted_key)
    status, failed = verify(folder, capsys)
    assert status == 1
    dotted = [line for line in failed if "keys hold a dot" in line]
    assert len(dotted) == 1 and "test-00001.tar:test.000003.cls" in dotted[0] and "(3:" in dotted[0]
    # the viewer reads key `test` with columns `000003.cls`...: another line names those extensions
    assert any("extensions differ" in line and "{000003.cls, 000003.jpg, 000003.json}" in line for line in failed)


def test_a_sample_missing_its_json_is_refused(tmp_path, capsys):
    folder = release(tmp_path)
    rewrite_release_shard(folder, "test-00002.tar", lambda ms: [(n, d) for n, d in ms if n != "test_000005.json"])
    status, failed = verify(folder, capsys)
    assert status == 1
    assert failed == [
        f"FAILED: {NAME}: samples whose extensions differ from the first sample's {{cls, jpg, json}} (the viewer "
        "refuses such archives) (1: test-00002.tar:test_000005 {cls, jpg})"
    ]


def test_a_config_whose_first_shards_hold_one_group_is_refused(tmp_path, capsys, monkeypatch):
    folder = release(tmp_path, groups_in_order=True)
    assert verify(folder, capsys) == (0, [])  # all 4 shards are within 5 GB
    monkeypatch.setattr(viewer_checks, "VIEWER_BUDGET_BYTES", 20_480)  # one shard: 2 samples of CeO
    status, failed = verify(folder, capsys)
    assert status == 1
    groups = [line for line in failed if "groups" in line]
    assert groups == [
        f"FAILED: {NAME}/test: the viewer shows only the first 20,480 bytes of a split (its shards in order); "
        "they hold groups CeO of CeO, CeR, CoO, CoR, not CeR, CoO, CoR (interleave the samples so every shard "
        "holds every group and size)"
    ]
    assert any("sizes 56, 84 of 56, 84, 112, not 112" in line for line in failed)


def test_interleaved_groups_pass_a_budget_of_one_shard(tmp_path, capsys, monkeypatch):
    dataset = make_composed_dataset(tmp_path / "composed", splits={"test": 24}, shard_size=12)
    folder = build_release(tmp_path / "release" / NAME, [dataset], version="v1.0.0")
    shard_bytes = (folder / DATA / "test-00000.tar").stat().st_size
    monkeypatch.setattr(viewer_checks, "VIEWER_BUDGET_BYTES", shard_bytes)
    assert verify(folder, capsys) == (0, [])


def test_a_later_sample_with_other_json_fields_or_types_is_refused(tmp_path, capsys):
    folder = release(tmp_path)

    def change(members):
        out = []
        for name, data in members:
            if name == "test_000007.json":
                meta = json.loads(data)
                meta["size"] = "large"  # a string where the first 5 samples hold integers
                meta["extra"] = 1
                data = json.dumps(meta, sort_keys=True).encode()
            if name == "test_000006.json":
                meta = json.loads(data)
                meta["size"] = "large"
                data = json.dumps(meta, sort_keys=True).encode()
            out.append((name, data))
        return out

    rewrite_release_shard(folder, "test-00003.tar", change)
    status, failed = verify(folder, capsys)
    assert status == 1
    features = [line for line in failed if "features differ" in line]
    assert features == [
        f"FAILED: {NAME}: samples whose features differ from those the viewer infers from its first samples "
        "(2: test-00003.tar:test_000006: json size is string, the first samples' is int; "
        "test-00003.tar:test_000007: json fields adds extra)"
    ]


@pytest.mark.parametrize("budget", [0, 1])
def test_a_budget_smaller_than_the_first_sample_shows_nothing(tmp_path, capsys, monkeypatch, budget):
    folder = release(tmp_path)
    monkeypatch.setattr(viewer_checks, "VIEWER_BUDGET_BYTES", budget)
    status, failed = verify(folder, capsys)
    assert status == 1 and any("they hold groups none of CeO, CeR, CoO, CoR" in line for line in failed)
