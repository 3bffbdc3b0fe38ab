"""Every call into a third-party model loader goes through the one gate (builder/backends/loader_gate.py).

The product's packages are read as Python syntax (nothing is imported) and every call whose function
is one of the loaders' entry points is listed with its file and line: transformers' and diffusers'
`from_pretrained`, open_clip's model, tokenizer, config and weight functions, timm's and
torchvision's model builders and weight loaders, segment-anything's registry, the Hub's snapshot
download. Each must be in the gate. `torch.load` (weights_only) belongs to the reading layer the gate
builds on, `builder/core/untrusted.py`, and `torch.jit.load` to the TorchScript trust check,
`builder/backends/code_trust.py`; anywhere else they fail this test too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
PRODUCT = ("builder", "validation", "evaluation", "training", "cards", "hf_scripts", "hsi")
GATE = "builder/backends/loader_gate.py"
# function names whose call loads a model, a tokenizer, a processor, a pipeline or their weights
LOADER_FUNCTIONS = {
    "from_pretrained",  # transformers models, tokenizers, processors; diffusers pipelines and models
    "from_single_file",  # diffusers
    "create_model",  # timm, open_clip
    "create_model_and_transforms",
    "create_model_from_pretrained",
    "get_tokenizer",  # open_clip
    "add_model_config",
    "download_pretrained",
    "load_checkpoint",  # open_clip, timm
    "load_pretrained",  # timm
    "get_model",  # torchvision.models
    "load_state_dict_from_url",  # torch.hub, torchvision weights
    "get_state_dict",  # torchvision weights enum
    "snapshot_download",  # a Hub model folder
}
NAMES = {"sam_model_registry"}  # segment-anything's builders, reached by subscript
OWNED = {("torch", "load"): "builder/core/untrusted.py", ("jit", "load"): "builder/backends/code_trust.py"}


def loader_calls(source: str) -> list[tuple[int, str]]:
    """(line, what) of every loader call and registry use in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in LOADER_FUNCTIONS:
                found.append((node.lineno, name))
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                pair = (func.value.id, func.attr)
                if pair in OWNED:
                    found.append((node.lineno, ".".join(pair)))
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute):
                pair = (func.value.attr, func.attr)
                if pair in OWNED:
                    found.append((node.lineno, ".".join(pair)))
        elif isinstance(node, ast.Name) and node.id in NAMES:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.alias) and node.name in NAMES | LOADER_FUNCTIONS:
            found.append((0, f"import of {node.name}"))
    return found


def product_files() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (REPOSITORY / package).rglob("*.py"))


def allowed_in(relative: str, what: str) -> bool:
    if relative == GATE:
        return True
    owner = OWNED.get(tuple(what.split(".")[-2:]))
    return owner == relative


def test_every_loader_call_of_the_product_is_inside_the_gate():
    outside = []
    for path in product_files():
        relative = path.relative_to(REPOSITORY).as_posix()
        for line, what in loader_calls(path.read_text("utf-8")):
            if not allowed_in(relative, what):
                outside.append(f"{relative}:{line}: {what}")
    assert not outside, "loader calls outside builder/backends/loader_gate.py:\n" + "\n".join(outside)


def test_the_scan_finds_the_calls_the_gate_itself_makes():
    """The gate holds one of each kind: a scan that found none there would find none anywhere."""
    found = {what for _, what in loader_calls((REPOSITORY / GATE).read_text("utf-8"))}
    assert {"from_pretrained", "create_model", "get_tokenizer", "add_model_config", "get_model"} <= found
    assert {"sam_model_registry", "snapshot_download", "download_pretrained"} <= found


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from transformers import AutoTokenizer\nAutoTokenizer.from_pretrained('x')\n", "from_pretrained"),
        ("import open_clip\nopen_clip.create_model_and_transforms('ViT-B-32')\n", "create_model_and_transforms"),
        ("import torchvision\ntorchvision.models.get_model('resnet18')\n", "get_model"),
        ("from segment_anything import sam_model_registry\nsam_model_registry['vit_b']()\n", "sam_model_registry"),
        ("import torch\ntorch.load('f.pt')\n", "torch.load"),
        ("import torch\ntorch.jit.load('f.pt')\n", "jit.load"),
        ("from open_clip import get_tokenizer as tok\n", "import of get_tokenizer"),
    ],
)
def test_a_new_call_outside_the_gate_is_found(source, expected):
    assert expected in {what for _, what in loader_calls(source)}
    assert not allowed_in("evaluation/new_module.py", expected)
