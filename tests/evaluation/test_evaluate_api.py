"""`hsi.evaluate`: an in-process module, a numpy callable and a spec string give the eval.json
metrics `hsi eval ts:FILE` gives the same model, and a module without normalisation is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from eval_cli import eval_args
from trusted_code import sha256

from builder.core.errors import HsiError
from evaluation.analysis.bootstrap import BootstrapSettings
from hsi.cli import main

QUICK = {"mean": 0, "std": 1, "workers": 0, "progress": False, "bootstrap": BootstrapSettings(resamples=100)}


def cli_metrics(paper_set, planted, out, *extra: str, **flags) -> dict:
    assert main(eval_args(paper_set, f"ts:{planted}", out, *extra, **flags)) == 0
    return json.loads((out / f"ts_{planted.name}" / "eval.json").read_text())["metrics"]


@pytest.fixture(scope="module")
def cli(paper_set, planted_corner, tmp_path_factory) -> dict:
    """`hsi eval ts:planted_corner.pt --mean 0 --std 1 --bootstrap 100`: its eval.json metrics."""
    return cli_metrics(paper_set, planted_corner, tmp_path_factory.mktemp("cli-eval"))


def test_a_module_gives_the_metrics_of_hsi_eval_and_saves_them(cli, paper_set, planted_corner, tmp_path):
    import hsi

    evaluation = hsi.evaluate(torch.jit.load(str(planted_corner)), paper_set, **QUICK)
    assert evaluation.metrics == cli and cli["samples"] > 0
    assert evaluation.to_dict()["preprocessing"]["mean"] == [0.0, 0.0, 0.0]
    folder = evaluation.save(tmp_path / "saved")
    assert json.loads((folder / "eval.json").read_text())["metrics"] == cli


def test_a_numpy_callable_gives_the_same_metrics(cli, paper_set, planted_corner):
    import hsi

    module = torch.jit.load(str(planted_corner))
    seen = []

    def classify(batch: np.ndarray) -> np.ndarray:
        seen.append((batch.dtype, batch.shape[1:]))
        with torch.no_grad():
            return module(torch.from_numpy(batch).permute(0, 3, 1, 2).float() / 255).numpy()

    evaluation = hsi.evaluate(classify, paper_set, **{**QUICK, "mean": None, "std": None})
    assert evaluation.metrics == cli
    assert set(seen) == {(np.dtype(np.uint8), (224, 224, 3))}
    assert evaluation.to_dict()["model"]["spec"] == "callable:classify"

    def probabilities(batch: np.ndarray) -> np.ndarray:
        return torch.from_numpy(classify(batch)).softmax(1).numpy()

    given = hsi.evaluate(probabilities, paper_set, outputs="probabilities", **{**QUICK, "mean": None, "std": None})
    assert given.metrics == cli


def test_a_spec_string_gives_the_same_metrics(cli, paper_set, planted_corner):
    import hsi

    assert hsi.evaluate(f"ts:{planted_corner}", paper_set, trust_files=[sha256(planted_corner)], **QUICK).metrics == cli


def test_a_plain_module_without_normalisation_is_refused_in_one_line(paper_set, planted_corner):
    import hsi

    with pytest.raises(HsiError) as caught:
        hsi.evaluate(torch.jit.load(str(planted_corner)), paper_set, std=1, workers=0, progress=False)
    message = str(caught.value)
    assert "pretrained_cfg" in message and "mean=" in message and "\n" not in message
