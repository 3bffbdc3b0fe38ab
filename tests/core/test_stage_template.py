"""The stage template's shared behaviour, seen through the commands: where errors land, what a
refused run leaves behind, and how a bug is told apart from a usage error."""

from __future__ import annotations

import json
import sys

import pytest
from parts_factory import compose_args, fake_images, write_parts

from hsi.cli import main


def test_compose_error_rows_carry_their_split_and_shard(tmp_path, capsys):
    # One image of a class no other class can lend a background to cannot get a random background.
    write_parts(tmp_path / "parts", {"val": fake_images(["n01443537"], per_class=2)})
    assert main(compose_args(tmp_path / "parts", tmp_path / "out", "--no-progress")) == 0
    rows = [
        json.loads(line)
        for line in (tmp_path / "out" / "hard-spurious-imagenet" / "errors.jsonl").read_text().splitlines()
    ]
    assert rows and {row["reason"] for row in rows} == {"no-foreign-background"}
    assert {row["split"] for row in rows} == {"val"} and {row["shard"] for row in rows} == {"val-00000.tar"}
    manifest = json.loads((tmp_path / "out" / "hard-spurious-imagenet" / "_info.json").read_text())
    assert manifest["errors"]["total"] == len(rows)


@pytest.mark.parametrize("command", ["extract", "compose"])
def test_runner_ray_without_ray_is_a_one_line_error_that_writes_nothing(tmp_path, capsys, monkeypatch, command):
    from fake_imagenet import write_tree

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if Ray were not installed
    if command == "extract":
        write_tree(tmp_path / "imagenet", count=2)
        args = ["extract", "--source", str(tmp_path / "imagenet"), "--out", str(tmp_path / "out")]
    else:
        write_parts(tmp_path / "parts", {"val": fake_images(["n01443537", "n02437312"], per_class=1)})
        args = compose_args(tmp_path / "parts", tmp_path / "out")
    assert main([*args, "--runner", "ray", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"hsi {command}: error: --runner ray needs Ray Data")
    assert "pip install 'hard-spurious-imagenet[ray]'" in err
    assert not (tmp_path / "out").exists()


def test_a_programming_error_in_validate_is_a_traceback_not_a_usage_error(tmp_path, monkeypatch):
    import validation.report  # imported before patching: a first import now would bind the broken one for good

    write_parts(tmp_path / "parts", {"val": fake_images(["n01443537", "n02437312"], per_class=1)})

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the integrity checks")

    monkeypatch.setattr(validation.report, "check_dataset", broken)  # where validate calls it
    with pytest.raises(RuntimeError, match="a bug in the integrity checks"):
        main(["validate", str(tmp_path / "parts"), "--no-previews"])


def test_a_usage_error_in_validate_exits_2_with_one_line(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"hsi validate: error: no such folder: {tmp_path / 'missing'}; pass a composed config folder (OUT/<config>) "
        "or a parts folder"
    )
