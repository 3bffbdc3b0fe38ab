"""Compose's progress bar counts composites against a total of composites (issue 25: it counted
composites against a total of source images, overran it and lost its ETA)."""

from __future__ import annotations

import pytest
from parts_factory import compose_args, fake_images, write_parts

from hsi.cli import main


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """4 source images: the paper's set makes 12 composites of each (2 backgrounds x 3 sizes x 2 positions)."""
    root = tmp_path_factory.mktemp("compose-progress")
    write_parts(root / "parts", {"val": fake_images(["n01443537", "n02437312"], per_class=2)}, shard_size=2)
    return root / "parts"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_bar_counts_composites_to_its_total(parts, tmp_path, capsys, workers):
    assert main(compose_args(parts, tmp_path / "out", "--workers", workers, "--shard-size", "2")) == 0
    err = capsys.readouterr().err
    assert "compose hard-spurious-imagenet" in err and "48/48" in err and "composite" in err
    assert "/4 " not in err.replace("48/48", "")  # no total of source images


def test_no_bar_with_no_progress(parts, tmp_path, capsys):
    assert main(compose_args(parts, tmp_path / "out", "--no-progress")) == 0
    err = capsys.readouterr().err
    assert "48/48" not in err and "compose hard-spurious-imagenet:" not in err
