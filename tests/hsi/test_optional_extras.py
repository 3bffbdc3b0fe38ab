"""On the core install (no torch, timm or scikit-learn: what `make demo` installs) the model
commands refuse in one line naming the extra to install, never with a traceback."""

from __future__ import annotations

import sys

import pytest

from hsi.cli import main


@pytest.mark.parametrize(("command", "missing"), [("eval", "timm"), ("train", "sklearn"), ("probe", "pyrtools")])
def test_a_model_command_without_its_extra_names_the_extra(tmp_path, capsys, monkeypatch, command, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` now fails as on a core install
    args = {
        "eval": ["eval", str(tmp_path), "--model", "timm:resnet18"],
        "train": ["train", str(tmp_path), "--method", "erm", "--out", str(tmp_path / "runs")],
        "probe": ["probe", "--model", "timm:resnet18", "--out", str(tmp_path / "probes")],
    }[command]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"hsi {command}: error: hsi {command} needs {missing}, which is not installed; install the extra "
        "with: pip install 'hard-spurious-imagenet[models]'"
    )
