"""The smaller holes of issue 30, each refused: a user's file named like a shard under `--overwrite`,
Ctrl-C in eval and train, CSV cells a spreadsheet would run, config names that restructure Markdown,
a refused `eval --from` leaving something publishable, a stranger's huge string echoed whole, and
`--predictions` parsed leniently. Each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from parts_factory import compose_args, fake_images, write_parts

from hsi.cli import main

WNIDS = ["n01443537", "n02437312"]


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry below `folder` by relative path: a file's bytes, None for a folder."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))
    }


# --- 1. compose --overwrite and a user's file named like a shard -------------------------------------


@pytest.fixture()
def composed(tmp_path) -> tuple[list[str], Path]:
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=1)})
    args = compose_args(tmp_path / "parts", tmp_path / "out", "--sizes", "56", "--name", "small", "--no-progress")
    assert main(args) == 0
    return args, tmp_path / "out" / "small"


def test_overwrite_keeps_a_users_file_named_like_a_shard_and_refuses_in_one_line(composed, capsys):
    """Failed before: any `<split>-NNNNN.tar` was taken as ours and deleted with the folder."""
    args, dataset = composed
    (dataset / "val-00007.tar").write_bytes(b"my own tar, not in the manifest")
    before = tree(dataset)
    capsys.readouterr()
    assert main([*args, "--overwrite"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err]
    assert f"--overwrite would delete val-00007.tar in {dataset}, which this toolkit did not write" in err
    assert tree(dataset) == before


def test_overwrite_refuses_a_listed_shard_whose_bytes_changed(composed, capsys):
    args, dataset = composed
    shard = sorted(dataset.glob("val-*.tar"))[0]
    shard.write_bytes(shard.read_bytes() + b"\0" * 512)  # edited since the manifest recorded its sha256
    before = tree(dataset)
    capsys.readouterr()
    assert main([*args, "--overwrite"]) == 2
    assert f"--overwrite would delete {shard.name} in {dataset}" in capsys.readouterr().err
    assert tree(dataset) == before


def test_a_killed_runs_shard_vouched_for_by_its_state_record_is_ours(composed):
    """Before any manifest, a shard is ours when its `_state/` record (size and sha256) says so."""
    args, dataset = composed
    shards = {p.name: p.read_bytes() for p in dataset.glob("val-*.tar")}
    assert shards and all((dataset / "_state" / f"{name}.json").is_file() for name in shards)
    (dataset / "_info.json").unlink()  # as a run killed before its manifest leaves it
    assert main([*args, "--overwrite"]) == 0
    assert {p.name: p.read_bytes() for p in dataset.glob("val-*.tar")} == shards
