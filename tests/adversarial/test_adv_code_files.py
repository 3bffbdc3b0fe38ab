"""TorchScript files from a stranger, attacked: a scripted module whose exported `__setstate__`
writes a file while `torch.jit.load` reads it (before any image), and one whose `forward` writes a
file on every batch. Both write with `torch.from_file(..., shared=True)` and `copy_`, as the attack
on issue 30 did, so the marker's bytes prove the file's code ran.

Every route that loads a TorchScript file refuses it in one line, before `torch.jit.load`, unless
the user trusts it (`--trust-file SHA256`, a models.yaml entry's or an extract config's
`trusted_sha256`, or `--trust-code`): `hsi eval --model`/`--models` (also with `--model-workers`),
`hsi probe`, `hsi.evaluate`, SCGS's model loader and `hsi extract --lama-checkpoint`. Trusted, the
same file loads and its code runs (the marker appears): the files are really hostile.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from fake_imagenet import extract_args, write_tree
from release_factory import make_composed_dataset

from builder.extract.shard_builder import unload_backends
from hsi.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")

PAYLOAD = b"hostile"


class SetStateWriter(torch.nn.Module):
    """A classifier of the mean colour whose `__setstate__`, run by torch.jit.load, writes `path`."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x.mean((2, 3))] * 334, 1)[:, :1000]

    @torch.jit.export
    def __getstate__(self) -> tuple[str, bool]:
        return (self.path, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[str, bool]) -> None:
        self.path = state[0]
        written = torch.from_file(self.path, shared=True, size=7, dtype=torch.uint8)
        written.copy_(torch.tensor([104, 111, 115, 116, 105, 108, 101], dtype=torch.uint8))  # "hostile"
        self.training = state[1] and bool(written.sum() > 0)  # used, so TorchScript keeps the write


class ForwardWriter(torch.nn.Module):
    """A classifier of the mean colour whose `forward` writes `path` on every batch."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        written = torch.from_file(self.path, shared=True, size=7, dtype=torch.uint8)
        written.copy_(torch.tensor([104, 111, 115, 116, 105, 108, 101], dtype=torch.uint8))
        return torch.cat([x.mean((2, 3))] * 334, 1)[:, :1000] + written.sum() * 0


class LamaSetStateWriter(SetStateWriter):
    """big-lama's call signature (`model(image, mask)`), with the same `__setstate__`."""

    def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return image * (1 - mask) + 0.5 * mask


def hostile(kind: type, path: Path, marker: Path) -> Path:
    """`kind` scripted and saved at `path`; scripting runs `__setstate__` once, so the marker it
    leaves is removed: the tests see only what loading the file writes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(kind(str(marker))), str(path))
    marker.unlink(missing_ok=True)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def untrusted_line(command: str, spec: str, digest: str) -> str:
    return (
        f"hsi {command}: error: {spec}: refused: a TorchScript file is code that runs with your permissions as it "
        f"loads, and its sha256 {digest} is not one you trust; if you trust whoever made this very file, pass "
        f"--trust-file {digest} (or --trust-code to trust every TorchScript file of the run); or export the model as "
        "an ep: file (torch.export.save) or an onnx: file, which are checked to hold no code and need no trust"
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_composed_dataset(tmp_path_factory.mktemp("adv-code") / "data", splits={"test": 4})


WRITERS = {"__setstate__": SetStateWriter, "forward": ForwardWriter}


@pytest.fixture(params=sorted(WRITERS))
def attack(request, tmp_path) -> tuple[Path, Path]:
    marker = tmp_path / "marker"
    return hostile(WRITERS[request.param], tmp_path / "hostile.pt", marker), marker


def run_eval(dataset: Path, out: Path, *flags) -> int:
    return main(
        ["eval", str(dataset), "--out", str(out), "--workers", "0", "--no-progress", "--bootstrap", "20", *flags]
    )


def refused_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_torch_itself_runs_the_payloads(tmp_path):
    """Why TorchScript is treated as code: loading runs `__setstate__`, a batch runs `forward`."""
    loaded = hostile(SetStateWriter, tmp_path / "setstate.pt", tmp_path / "on-load")
    torch.jit.load(str(loaded))
    assert (tmp_path / "on-load").read_bytes() == PAYLOAD
    module = torch.jit.load(str(hostile(ForwardWriter, tmp_path / "forward.pt", tmp_path / "on-forward")))
    assert not (tmp_path / "on-forward").exists()
    module(torch.zeros(1, 3, 8, 8))
    assert (tmp_path / "on-forward").read_bytes() == PAYLOAD


def test_eval_refuses_an_untrusted_file_before_loading_it(attack, dataset, tmp_path, capsys):
    path, marker = attack
    out = tmp_path / "out"
    assert run_eval(dataset, out, "--model", f"ts:{path}") == 2
    assert refused_line(capsys) == untrusted_line("eval", f"ts:{path}", sha256(path))
    assert not marker.exists() and not out.exists()


def test_a_wrong_sha256_is_refused_and_a_malformed_one_is_one_line(attack, dataset, tmp_path, capsys):
    path, marker = attack
    out = tmp_path / "out"
    assert run_eval(dataset, out, "--model", f"ts:{path}", "--trust-file", "0" * 64) == 2
    assert refused_line(capsys) == untrusted_line("eval", f"ts:{path}", sha256(path))
    assert run_eval(dataset, out, "--model", f"ts:{path}", "--trust-file", "abc") == 2
    assert refused_line(capsys) == (
        "hsi eval: error: --trust-file takes the sha256 of a file (64 hex digits, as sha256sum prints it), got 'abc'"
    )
    assert not marker.exists() and not out.exists()


@pytest.mark.parametrize("trust", ["--trust-file", "--trust-code"])
def test_a_trusted_file_loads_and_its_code_runs(attack, trust, dataset, tmp_path):
    path, marker = attack
    flags = ["--trust-file", sha256(path).upper()] if trust == "--trust-file" else ["--trust-code"]
    assert run_eval(dataset, tmp_path / "out", "--model", f"ts:{path}", *flags) == 0
    assert marker.read_bytes() == PAYLOAD  # the file is hostile: trusted, its code ran
    assert (tmp_path / "out" / "ts_hostile.pt" / "eval.json").is_file()


def test_model_workers_refuse_it_before_any_worker_starts(attack, dataset, tmp_path, capsys):
    path, marker = attack
    assert run_eval(dataset, tmp_path / "out", "--model", f"ts:{path}", "--model-workers", "2") == 2
    assert refused_line(capsys) == untrusted_line("eval", f"ts:{path}", sha256(path))
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_a_models_yaml_trusts_only_what_it_lists(attack, dataset, tmp_path, capsys):
    path, marker = attack
    listing = tmp_path / "models.yaml"
    listing.write_text(yaml.safe_dump([{"model": "ts:hostile.pt", "entry_name": "From a stranger"}]))
    assert run_eval(dataset, tmp_path / "out", "--models", str(listing)) == 2
    assert refused_line(capsys) == untrusted_line("eval", f"ts:{path}", sha256(path))
    assert not marker.exists() and not (tmp_path / "out").exists()
    listing.write_text(yaml.safe_dump([{"model": "ts:hostile.pt", "trusted_sha256": "f" * 63}]))
    assert run_eval(dataset, tmp_path / "out", "--models", str(listing)) == 2
    assert refused_line(capsys) == (
        f"hsi eval: error: {listing}: [0].trusted_sha256: takes the sha256 of a file (64 hex digits) or a list of "
        f"them, got '{'f' * 40}'… (63 characters)"
    )
    listing.write_text(yaml.safe_dump([{"model": "ts:hostile.pt", "trusted_sha256": [sha256(path)]}]))
    assert run_eval(dataset, tmp_path / "out", "--models", str(listing)) == 0
    assert marker.read_bytes() == PAYLOAD


def test_probe_refuses_it(attack, tmp_path, capsys):
    path, marker = attack
    argv = ["probe", "--model", f"ts:{path}", "--cue-conflict", str(tmp_path), "--out", str(tmp_path / "probe")]
    assert main([*argv, "--no-progress"]) == 2
    assert refused_line(capsys) == untrusted_line("probe", f"ts:{path}", sha256(path))
    assert not marker.exists() and not (tmp_path / "probe").exists()


def test_the_python_api_and_the_scgs_loader_refuse_it(attack, dataset, tmp_path):
    import hsi
    from evaluation.model_formats.models import ModelError
    from training.scgs_classifier import load_scgs_classifier

    path, marker = attack
    expected = untrusted_line("x", f"ts:{path}", sha256(path)).split(": error: ", 1)[1]
    with pytest.raises(ModelError) as refused:
        hsi.evaluate(f"ts:{path}", dataset, workers=0, progress=False)
    assert str(refused.value) == expected
    with pytest.raises(ModelError) as refused:
        load_scgs_classifier(f"ts:{path}", None, ("n01440764",), 224, "cpu", flag="--check-model", check_only=True)
    assert str(refused.value) == expected
    assert not marker.exists()
    evaluation = hsi.evaluate(f"ts:{path}", dataset, workers=0, progress=False, trust_files=[sha256(path)])
    assert evaluation.metrics["samples"] == 4 and marker.read_bytes() == PAYLOAD


# --- hsi extract --inpainter lama ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_tree(tmp_path_factory.mktemp("imagenet"), split="val", count=2)


def lama_line(path: Path) -> str:
    digest = sha256(path)
    return (
        f"hsi extract: error: the big-lama TorchScript checkpoint {path.name} cannot be used (refused: a TorchScript "
        f"file is code that runs with your permissions as it loads, and its sha256 {digest} is not one you trust; "
        f"if you trust whoever made this very file, pass --trust-file {digest} (or --trust-code to trust every "
        "TorchScript file of the run); no sha256 of big-lama is published, so trust only a file you downloaded "
        "yourself; or use --inpainter patchmatch or telea, which load no model file): give it with "
        "--lama-checkpoint PATH or the LAMA_MODEL environment variable; the official file is published at the "
        "simple-lama-inpainting release on GitHub "
        "(https://github.com/enesmsahin/simple-lama-inpainting/releases/download/v0.1.0/big-lama.pt)"
    )


def extract(tree, out: Path, lama: Path, *flags) -> int:
    lama_flags = ["--inpainter", "lama", "--lama-checkpoint", str(lama), "--device", "cpu"]
    return main(extract_args(tree.root, out, *lama_flags, *flags))


def test_extract_refuses_an_untrusted_lama_checkpoint_from_the_flag_or_the_variable(
    tree, tmp_path, capsys, monkeypatch
):
    marker = tmp_path / "marker"
    lama = hostile(LamaSetStateWriter, tmp_path / "big-lama.pt", marker)
    assert extract(tree, tmp_path / "out", lama) == 2
    assert refused_line(capsys) == lama_line(lama)
    assert extract(tree, tmp_path / "out", lama, "--trust-file", "1" * 64) == 2
    assert refused_line(capsys) == lama_line(lama)
    monkeypatch.setenv("LAMA_MODEL", str(lama))
    assert main(extract_args(tree.root, tmp_path / "out", "--inpainter", "lama", "--device", "cpu")) == 2
    assert refused_line(capsys) == lama_line(lama)
    assert not marker.exists() and not (tmp_path / "out" / "parts").exists()


def test_extract_loads_a_lama_checkpoint_trusted_by_flag_or_config(tree, tmp_path, capsys):
    marker = tmp_path / "marker"
    lama = hostile(LamaSetStateWriter, tmp_path / "big-lama.pt", marker)
    config = tmp_path / "extract.yaml"
    config.write_text(yaml.safe_dump({"trust_code": True}))
    assert extract(tree, tmp_path / "refused", lama, "--config", str(config)) == 2
    assert refused_line(capsys) == (
        "hsi extract: error: trust_code cannot be set in a config file: pass --trust-code on the command line, or "
        "list the sha256 of each TorchScript file you trust under trusted_sha256"
    )
    assert not marker.exists()
    config.write_text(yaml.safe_dump({"trusted_sha256": [sha256(lama)]}))
    assert extract(tree, tmp_path / "by-config", lama, "--config", str(config)) == 0
    assert marker.read_bytes() == PAYLOAD and (tmp_path / "by-config" / "parts" / "_info.json").is_file()
    marker.unlink()
    unload_backends()  # this process keeps the model it loaded: a fresh load, as a new run's
    assert extract(tree, tmp_path / "by-flag", lama, "--trust-file", sha256(lama)) == 0
    assert marker.read_bytes() == PAYLOAD
