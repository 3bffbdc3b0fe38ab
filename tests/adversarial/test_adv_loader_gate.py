"""Model configs and folders from a stranger, handed to the libraries' loaders through the one gate
(builder/backends/loader_gate.py): each is refused by `hsi eval` in one line with exit status 2,
before anything is written and before any of the stranger's code could run.

- an open_clip config whose `tokenizer_kwargs` say `trust_remote_code: true` (open_clip would hand
  it to transformers, which imports the tokenizer folder's Python), or with a key open_clip's
  config classes do not define, or one that makes open_clip load another model;
- an `hf-clip:` folder that is a link, or holds a link (its sha256 would be published), or holds
  Python files, or has an `auto_map` in its processor config (transformers would ask on the
  terminal whether to run the folder's code: a "y" on stdin must never be read);
- sizes: an input side of a million pixels (from an hf-clip processor config, or any
  preprocessing `count_outputs` is handed), a safetensors header of more tensors than any model has;
- an open_clip tokenizer without a pad token, a template file naming one set twice, a `--models`
  file past its size, a state_dict file that holds an object: one line, not a traceback.

The payloads create a marker file when they run; the marker must not exist afterwards.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import sys
from pathlib import Path

import pytest
from release_factory import make_composed_dataset
from subprocesses import run_hsi
from tiny_clip import OPENCLIP_CONFIG, save_tiny_hf_clip, save_tiny_openclip
from tiny_sd import clip_tokenizer

from builder.backends.loader_gate import MAX_INPUT_SIDE, MAX_TENSORS
from evaluation.model_formats.models import ModelError, Preprocessing, count_outputs
from hsi.cli import main

pytest.importorskip("open_clip")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("adv-loader-gate")
    return {
        "root": root,
        "dataset": make_composed_dataset(root / "data", splits={"test": 4}),
        "openclip_weights": save_tiny_openclip(root / "tiny" / "tiny-clip.safetensors"),
        "hf_clip": save_tiny_hf_clip(root / "hf-clip"),
    }


def refused(capfd, world: dict, model: str, out: Path, *needles: str, extra: tuple = ()) -> str:
    """`hsi eval DATA --model MODEL` exits 2 with one line (at the file descriptors: a library's
    logging counts too) holding every needle, and `out` was never created."""
    code = main(["eval", str(world["dataset"]), "--model", model, "--out", str(out), "--no-progress", *extra])
    captured = capfd.readouterr()
    err = captured.err.strip()
    assert code == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "\x1b" not in err + captured.out
    for needle in needles:
        assert needle in err, (needle, err)
    assert not out.exists()
    return err


def marker_code(marker: Path) -> str:
    """Python that leaves `marker` behind when it runs (imported as a tokenizer's or processor's module)."""
    return f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"


def hf_clip_copy(world: dict, folder: Path) -> Path:
    shutil.copytree(world["hf_clip"], folder)
    return folder


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text("utf-8"))
    change(data)
    path.write_text(json.dumps(data), "utf-8")


def openclip_config(folder: Path, stem: str, change) -> Path:
    """An open_clip model config of the tiny architecture under a stem of its own, edited by `change`."""
    config = json.loads(json.dumps(OPENCLIP_CONFIG))
    change(config)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(config), "utf-8")
    return path


# --- open_clip configs ---------------------------------------------------------------------------


def code_tokenizer_folder(folder: Path, marker: Path) -> Path:
    """A tokenizer folder whose config maps AutoTokenizer to its own module, which touches `marker`."""
    folder.mkdir(parents=True)
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"auto_map": {"AutoTokenizer": ["evil_tokenizer.EvilTokenizer", None]}}), "utf-8"
    )
    (folder / "evil_tokenizer.py").write_text(marker_code(marker), "utf-8")
    return folder


def test_an_open_clip_config_asking_to_trust_remote_code_is_refused_and_runs_nothing(world, tmp_path, capfd):
    marker = tmp_path / "ran"
    tokenizer = code_tokenizer_folder(tmp_path / "tokenizer", marker)

    def trusting(config):
        config["text_cfg"].update(hf_tokenizer_name=str(tokenizer), tokenizer_kwargs={"trust_remote_code": True})

    config = openclip_config(tmp_path / "configs", "hsi-gate-trusting", trusting)
    spec = f"openclip:{config}:{world['openclip_weights']}"
    refused(capfd, world, spec, tmp_path / "out", "text_cfg.tokenizer_kwargs.trust_remote_code", "remove it")
    assert not marker.exists()


@pytest.mark.parametrize(
    "stem, change, needle",
    [
        ("hsi-gate-unknown", lambda c: c.update(auto_map={"x": "y"}), "'auto_map'"),
        ("hsi-gate-hf-model", lambda c: c["text_cfg"].update(hf_model_name="org/model"), "text_cfg.hf_model_name"),
        (
            "hsi-gate-kwargs",
            lambda c: c["text_cfg"].update(tokenizer_kwargs={"use_fast": False}),
            "text_cfg.tokenizer_kwargs.use_fast",
        ),
        ("hsi-gate-path", lambda c: c["text_cfg"].update(hf_tokenizer_name="/etc"), "is not a Hub id"),
        ("hsi-gate-width", lambda c: c["vision_cfg"].update(width=10**6), "vision_cfg.width is 1000000"),
        ("hsi-gate-side", lambda c: c["vision_cfg"].update(image_size=10**5), "vision_cfg.image_size is 100000"),
    ],
)
def test_an_open_clip_config_with_a_key_or_size_it_does_not_take_is_refused(
    world, tmp_path, capfd, stem, change, needle
):
    config = openclip_config(tmp_path / "configs", stem, change)
    refused(capfd, world, f"openclip:{config}:{world['openclip_weights']}", tmp_path / "out", needle)


def test_an_open_clip_tokenizer_without_a_pad_token_is_one_line(world, tmp_path):
    """In a process of its own: the Hub cache (where open_clip finds a tokenizer by id) is read from
    the environment at import."""
    snapshot = tmp_path / "hub" / "models--hsi-test--no-pad" / "snapshots" / ("0" * 40)
    tokenizer = clip_tokenizer()
    tokenizer.pad_token = None
    tokenizer.save_pretrained(snapshot)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "clip"}), "utf-8")  # AutoTokenizer reads it
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    config = openclip_config(
        tmp_path / "configs", "hsi-gate-no-pad", lambda c: c["text_cfg"].update(hf_tokenizer_name="hsi-test/no-pad")
    )
    out = tmp_path / "out"
    env = dict(os.environ, HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_OFFLINE="1")
    spec = f"openclip:{config}:{world['openclip_weights']}"
    result = run_hsi(["eval", world["dataset"], "--model", spec, "--out", out, "--no-progress"], env)
    err = result.stderr.strip()
    assert result.returncode == 2, err
    assert len(err.splitlines()) == 1 and "has no pad token" in err, err
    assert not out.exists()


# --- hf-clip folders -----------------------------------------------------------------------------


def test_an_hf_clip_folder_that_is_a_link_is_refused(world, tmp_path, capfd):
    link = tmp_path / "linked-clip"
    link.symlink_to(world["hf_clip"], target_is_directory=True)
    refused(capfd, world, f"hf-clip:{link}", tmp_path / "out", "is a link; links are never followed")


@pytest.mark.parametrize("name", ["model.safetensors", "preprocessor_config.json", "notes.txt"])
def test_an_hf_clip_folder_holding_a_link_is_refused_and_its_target_never_hashed(world, tmp_path, capfd, name):
    folder = hf_clip_copy(world, tmp_path / "clip")
    outside = tmp_path / "outside" / name
    outside.parent.mkdir()
    if (folder / name).exists():
        shutil.move(folder / name, outside)
    else:
        outside.write_text("a file of the user's that is no part of the model\n")
    (folder / name).symlink_to(outside)
    refused(capfd, world, f"hf-clip:{folder}", tmp_path / "out", f"{name} in the model folder", "is a link")


def test_an_hf_clip_folder_holding_python_is_refused(world, tmp_path, capfd):
    marker = tmp_path / "ran"
    folder = hf_clip_copy(world, tmp_path / "clip")
    (folder / "modeling_evil.py").write_text(marker_code(marker), "utf-8")
    refused(capfd, world, f"hf-clip:{folder}", tmp_path / "out", "holds code (modeling_evil.py)")
    assert not marker.exists()


def test_an_auto_map_in_the_processor_config_is_refused_before_transformers_could_ask(
    world, tmp_path, capfd, monkeypatch
):
    """transformers asks on the terminal whether to run the folder's code; a 'y' waits on stdin and
    must never be read."""
    marker = tmp_path / "ran"
    folder = hf_clip_copy(world, tmp_path / "clip")
    edit_json(
        folder / "preprocessor_config.json",
        lambda config: config.update(auto_map={"AutoImageProcessor": "evil_processor.EvilProcessor"}),
    )
    shutil.copy(world["hf_clip"] / "config.json", tmp_path / "config.json")  # the folder keeps no .py to refuse
    answers = io.StringIO("y\n" * 10)
    monkeypatch.setattr(sys, "stdin", answers)
    refused(capfd, world, f"hf-clip:{folder}", tmp_path / "out", "preprocessor_config.json", "'auto_map'")
    assert answers.tell() == 0
    assert not marker.exists()


@pytest.mark.parametrize(
    "file, change, needle",
    [
        ("preprocessor_config.json", lambda c: c.update(crop_size={"height": 10**6, "width": 10**6}), "crop_size"),
        ("preprocessor_config.json", lambda c: c.update(size={"shortest_edge": 10**6}), "size.shortest_edge"),
        ("config.json", lambda c: c["vision_config"].update(image_size=10**6), "vision_config.image_size"),
        ("config.json", lambda c: c["text_config"].update(hidden_size=10**5), "text_config.hidden_size"),
        ("tokenizer_config.json", lambda c: c.update(tokenizer_class="EvilTokenizer"), "tokenizer_class"),
    ],
)
def test_an_hf_clip_config_past_its_bounds_or_naming_another_class_is_refused(
    world, tmp_path, capfd, file, change, needle
):
    folder = hf_clip_copy(world, tmp_path / "clip")
    edit_json(folder / file, change)
    refused(capfd, world, f"hf-clip:{folder}", tmp_path / "out", file, needle)


def safetensors_of_empty_tensors(path: Path, names: list[str]) -> Path:
    """A safetensors file declaring `names`, each an empty float tensor (the header is all there is)."""
    header = {name: {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for name in names}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return path


def test_a_safetensors_header_of_more_tensors_than_any_model_is_one_line(world, tmp_path, capfd):
    folder = hf_clip_copy(world, tmp_path / "clip")
    names = [f"text_model.extra.{n}.weight" for n in range(MAX_TENSORS + 1)]
    safetensors_of_empty_tensors(folder / "model.safetensors", names)
    refused(capfd, world, f"hf-clip:{folder}", tmp_path / "out", f"declares {MAX_TENSORS + 1} tensors")
    weights = safetensors_of_empty_tensors(tmp_path / "many.safetensors", names)
    config = openclip_config(tmp_path / "configs", "hsi-gate-many", lambda c: None)
    refused(capfd, world, f"openclip:{config}:{weights}", tmp_path / "out", f"declares {MAX_TENSORS + 1} tensors")


def test_terminal_escapes_in_a_tensor_name_never_reach_the_terminal(world, tmp_path, capfd):
    """An extra tensor is reported by transformers' load report, name and all; the gate holds the
    report back (the model loads: an unexpected tensor is not one the model lacks)."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = hf_clip_copy(world, tmp_path / "clip")
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["\x1b]0;owned\x07\x1b[31mred\x1b[0m"] = torch.zeros(1)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    out = tmp_path / "out"
    code = main(["eval", str(world["dataset"]), "--model", f"hf-clip:{folder}", "--out", str(out), "--no-progress"])
    captured = capfd.readouterr()
    assert code == 0, captured.err
    assert "\x1b" not in captured.err + captured.out
    assert "red" not in captured.err


# --- sizes before allocation ---------------------------------------------------------------------


@pytest.mark.parametrize("size", [(10**6, 10**6), (224, MAX_INPUT_SIDE + 1), (0, 224)])
def test_count_outputs_refuses_an_input_size_before_allocating_it(size):
    import torch

    module = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 10))
    with pytest.raises(ModelError, match=f"input side of 1 to {MAX_INPUT_SIDE} pixels") as refusal:
        count_outputs(module, Preprocessing(input_size=size), "ep:huge.pt2")
    assert len(str(refusal.value).splitlines()) == 1
    assert count_outputs(module, Preprocessing(input_size=(8, 8))) == 10


# --- files that were several lines, or a traceback -----------------------------------------------


def test_a_template_file_naming_one_set_twice_is_refused_naming_the_set(world, tmp_path, capfd):
    templates = tmp_path / "mine.yaml"
    templates.write_text('mine:\n  - "a photo of a {}."\nmine:\n  - "a drawing of a {}."\n', "utf-8")
    config = openclip_config(tmp_path / "configs", "hsi-gate-templates", lambda c: None)
    spec = f"openclip:{config}:{world['openclip_weights']}"
    refused(
        capfd, world, spec, tmp_path / "out", "the key 'mine' is given twice", extra=("--templates", str(templates))
    )


def test_a_models_list_past_its_size_is_refused_before_it_is_parsed(world, tmp_path, capfd):
    from evaluation.orchestration.model_list import MAX_LIST_BYTES, MAX_MODELS

    huge = tmp_path / "huge.yaml"
    huge.write_text("- timm:resnet18\n" * (MAX_LIST_BYTES // 16 + 1), "utf-8")
    many = tmp_path / "many.yaml"
    many.write_text("- timm:resnet18\n" * (MAX_MODELS + 1), "utf-8")
    for listing, needle in ((huge, f"more than {MAX_LIST_BYTES}"), (many, f"more than {MAX_MODELS}")):
        out = tmp_path / "out"
        assert main(["eval", str(world["dataset"]), "--models", str(listing), "--out", str(out)]) == 2
        err = capfd.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
        assert not out.exists()


class CreatesFile:
    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_an_arch_state_dict_holding_an_object_is_one_plain_line(world, tmp_path, capfd):
    """torch's own refusal is several lines with colour codes and advice to turn weights_only off."""
    import torch

    marker = tmp_path / "ran"
    weights = tmp_path / "weights.pt"
    torch.save({"fc.weight": CreatesFile(marker)}, weights)
    err = refused(capfd, world, str(weights), tmp_path / "out", "weights.pt", extra=("--arch", "resnet18"))
    assert "weights_only" not in err and "never unpickled" in err
    assert not marker.exists()


def test_an_ep_program_declaring_a_huge_static_input_is_refused_before_allocating(world, tmp_path, capfd):
    """The input size an `ep:` file fixes is read from its graph: a side of 100,000 pixels would be a
    120 GB blank input for the first forward pass."""
    import zipfile

    import torch

    class Mean(torch.nn.Module):
        def forward(self, x):
            return x.mean((2, 3)).repeat(1, 4)

    plain = tmp_path / "plain.pt2"
    torch.export.save(torch.export.export(Mean(), (torch.rand(1, 3, 8, 8),)), str(plain))
    huge = tmp_path / "huge.pt2"
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(huge, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            if name.endswith("models/model.json"):
                program = json.loads(data)
                for value in program["graph_module"]["graph"]["tensor_values"].values():
                    if [size.get("as_int") for size in value["sizes"]] == [1, 3, 8, 8]:
                        value["sizes"][2] = value["sizes"][3] = {"as_int": 100_000}
                data = json.dumps(program).encode()
            target.writestr(name, data)
    refused(capfd, world, f"ep:{huge}", tmp_path / "out", "input side of 1 to 8192 pixels, got 100000")
