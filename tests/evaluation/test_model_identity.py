"""An in-memory model's identity is recorded or said to be unknown, never invented (issue 33): a
module's class and the fingerprint of its state_dict (the same weights give the same fingerprint in
any process, other weights another), a numpy callable's declared weights sha256 or nothing; and no
page calls them "the library's published weights of the spec"."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch
from site_factory import report
from subprocesses import run_python

from builder.core.errors import HsiError
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.model_formats.identity import module_identity, state_dict_sha256
from evaluation.ranking.entries import read_entry
from hsi.cli import main

QUICK = {"mean": 0, "std": 1, "workers": 0, "progress": False, "bootstrap": BootstrapSettings(resamples=20)}
PUBLISHED = "the library's published weights of the spec"


class Corner(torch.nn.Module):
    """A tiny classifier: one linear map of the canvas's mean colour to 1000 logits."""

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.head = torch.nn.Linear(3, 1000)

    def forward(self, x):
        return self.head(x.mean(dim=(2, 3)))


def test_other_weights_give_another_fingerprint_the_same_weights_the_same():
    one, other = Corner(0), Corner(1)
    assert state_dict_sha256(one) != state_dict_sha256(other)
    again = Corner(5)
    again.load_state_dict(one.state_dict())
    assert state_dict_sha256(again) == state_dict_sha256(one)
    retyped = Corner(0).to(torch.float64)  # the same values in another dtype are other weights
    assert state_dict_sha256(retyped) != state_dict_sha256(one)
    identity = module_identity(one)
    assert (identity["kind"], identity["class"], identity["module"]) == ("module", "Corner", __name__)


def test_the_fingerprint_is_the_same_in_another_process(tmp_path):
    weights = tmp_path / "corner.pt"
    torch.save(Corner(0).state_dict(), weights)
    code = textwrap.dedent(
        f"""
        import torch
        from evaluation.model_formats.identity import state_dict_sha256
        module = torch.nn.Module()
        module.head = torch.nn.Linear(3, 1000)
        module.load_state_dict(torch.load({str(weights)!r}, weights_only=True))
        print(state_dict_sha256(module))
        """
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == state_dict_sha256(Corner(0))


def test_two_modules_give_two_identities_in_their_entries(paper_set, tmp_path):
    import hsi

    entries = []
    for seed in (0, 1):
        evaluation = hsi.evaluate(Corner(seed), paper_set, **QUICK)
        identity = evaluation.to_dict()["model"]["identity"]
        assert identity["state_dict_sha256"] == state_dict_sha256(Corner(seed))
        folder = evaluation.save(tmp_path / f"module-{seed}")
        entries.append(read_entry(folder / "entry.json"))
        md = (folder / "eval.md").read_text()
        assert f"an in-memory module {__name__}.Corner, not loaded from a spec" in md
    assert entries[0]["model"]["spec"] == entries[1]["model"]["spec"] == "module:Corner"
    assert entries[0]["model"]["identity"] != entries[1]["model"]["identity"]
    assert main(["leaderboard", "verify", str(tmp_path / "module-0"), "--data", str(paper_set)]) == 0


def test_a_callable_records_what_its_caller_declares_or_nothing(paper_set, tmp_path):
    import hsi

    weights = np.random.default_rng(0).normal(size=(3, 1000)).astype(np.float32)

    def classify(batch: np.ndarray) -> np.ndarray:
        return (batch.astype(np.float32) / 255).mean(axis=(1, 2)) @ weights

    quick = {**QUICK, "mean": None, "std": None}
    declared = "ab" * 32
    said = hsi.evaluate(classify, paper_set, weights_sha256=declared.upper(), **quick).to_dict()["model"]["identity"]
    assert said == {
        "kind": "callable",
        "class": "test_a_callable_records_what_its_caller_declares_or_nothing.<locals>.classify",
        "module": __name__,
        "state_dict_sha256": None,
        "weights_sha256": declared,
    }
    unsaid = hsi.evaluate(classify, paper_set, **quick)
    assert unsaid.to_dict()["model"]["identity"]["weights_sha256"] is None
    folder = unsaid.save(tmp_path / "callable")
    assert "weights not known" in (folder / "eval.md").read_text()
    site = tmp_path / "site"
    assert report(tmp_path / "callable", out=site) == 0
    page = next(site.glob("models/*/index.html")).read_text("utf-8")
    assert PUBLISHED not in page and "a numpy callable" in page and "weights not known" in page


def test_a_module_page_and_card_say_what_is_known(paper_set, tmp_path):
    import hsi
    from cards.results import ModelResult, _weights
    from evaluation.ranking.eval_reader import read_model_folder

    folder = hsi.evaluate(Corner(0), paper_set, **QUICK).save(tmp_path / "module")
    weights, sha = _weights(ModelResult(read_model_folder(folder)))
    assert weights.startswith(f"an in-memory module {__name__}.Corner") and PUBLISHED not in weights
    assert sha == f"`{state_dict_sha256(Corner(0))}` (the state_dict's fingerprint)"
    site = tmp_path / "site"
    assert report(folder, out=site) == 0
    page = next(site.glob("models/*/index.html")).read_text("utf-8")
    assert PUBLISHED not in page and state_dict_sha256(Corner(0)) in page


def test_weights_sha256_is_for_a_callable_and_a_sha256(paper_set):
    import hsi

    with pytest.raises(HsiError, match="weights_sha256 declares a numpy callable's weights"):
        hsi.evaluate(Corner(0), paper_set, weights_sha256="ab" * 32, **QUICK)
    with pytest.raises(HsiError, match="weights_sha256 is the 64 hex digits of a sha256, got 'abc'"):
        hsi.evaluate(lambda batch: batch, paper_set, weights_sha256="abc", workers=0, progress=False)
