"""The backend registry: built-in entries, configs read from flat settings, a backend added by one
registration, the errors a user sees, and that looking backends up never imports torch."""

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from fake_imagenet import extract_args, write_tree

from builder.backends import (
    BackendUnavailable,
    Inpainter,
    available,
    backend_config,
    from_setting,
    make_backend,
    register_backend,
)
from builder.backends.base import BackendInfo
from builder.backends.classical import BoxConfig, TeleaConfig
from builder.backends.registry import KINDS
from builder.core.errors import HsiError
from builder.extract.shard_builder import ExtractConfig
from hsi.cli import main

REPOSITORY = Path(__file__).resolve().parents[2]
TORCH_PACKAGES = ("torch", "torchvision", "segment_anything", "transformers")


@dataclass(frozen=True)
class ConstantFillConfig:
    value: int = from_setting("fill_value", 0)


class ConstantFill(Inpainter):
    """Fills every hole with one grey value: a backend a test adds with one registration."""

    def __init__(self, value: int) -> None:
        self.value = value

    def info(self) -> BackendInfo:
        return BackendInfo("test-constant-fill", {"value": self.value})

    def inpaint_batch(self, images, masks, ids=None):
        return [np.where(mask[..., None], np.uint8(self.value), image) for image, mask in zip(images, masks)]


@register_backend("inpainter", "test-constant-fill", config_class=ConstantFillConfig)
def make_constant_fill(config: ConstantFillConfig) -> ConstantFill:
    return ConstantFill(config.value)


@register_backend("masker", "test-needs-a-missing-package", config_class=BoxConfig, requires=("hsi_no_such_package",))
def make_unreachable_masker(config):
    raise AssertionError("a backend whose package is missing is never built")


def test_the_built_in_backends_are_registered():
    assert {"box", "sam"} <= set(available("masker"))
    assert {"telea", "lama"} <= set(available("inpainter"))
    assert "grounding-dino" in available("detector")
    assert all(available(kind) == sorted(available(kind)) for kind in KINDS)
    with pytest.raises(ValueError, match="unknown backend kind 'segmenter'"):
        available("segmenter")


def test_a_backend_registered_by_a_test_module_is_built_by_make_backend():
    assert "test-constant-fill" in available("inpainter")
    assert backend_config("inpainter", "test-constant-fill", SimpleNamespace(fill_value=7)) == ConstantFillConfig(7)
    inpainter = make_backend("inpainter", "test-constant-fill", ConstantFillConfig(value=200))
    image, mask = np.zeros((4, 4, 3), np.uint8), np.eye(4, dtype=bool)
    (filled,) = inpainter.inpaint_batch([image], [mask])
    assert (filled[mask] == 200).all() and (filled[~mask] == 0).all()
    assert make_backend("inpainter", "test-constant-fill").info().params == {"value": 0}  # None: the defaults


def test_the_registered_backend_runs_in_hsi_extract(tmp_path):
    tree = write_tree(tmp_path / "imagenet", count=2)
    out = tmp_path / "out"
    assert main(extract_args(tree.root, out, "--inpainter", "test-constant-fill")) == 0
    manifest = json.loads((out / "parts" / "_info.json").read_text())
    assert manifest["backends"]["inpainter"] == {
        "name": "test-constant-fill",
        "params": {"value": 0},
        "checkpoint": None,
        "checkpoint_sha256": None,
    }


def test_extract_settings_become_each_backends_own_config():
    from builder.backends.lama import LamaConfig
    from builder.backends.sam import SamConfig

    config = ExtractConfig(
        masker="sam",
        inpainter="lama",
        sam_model="auto",
        sam_checkpoint="sam.pth",
        lama_checkpoint="big-lama.pt",
        device="cpu",
        batch_size=3,
        telea_radius=5,
    )
    assert config.masker_config() == SamConfig(model="auto", checkpoint="sam.pth", device="cpu", batch_size=3)
    assert config.inpainter_config() == LamaConfig(checkpoint="big-lama.pt", device="cpu", batch_size=3)
    assert ExtractConfig(inpainter="telea", telea_radius=5).inpainter_config() == TeleaConfig(radius=5)
    assert ExtractConfig().masker_config() == BoxConfig()


def test_an_unknown_name_lists_the_choices():
    with pytest.raises(BackendUnavailable) as err:
        make_backend("masker", "segment-everything")
    assert str(err.value) == f"unknown masker 'segment-everything'; choose one of: {', '.join(available('masker'))}"
    assert isinstance(err.value, HsiError) and err.value.exit_status == 2


def test_an_unknown_masker_in_hsi_extract_is_a_usage_error_before_any_output(tmp_path, capsys):
    tree = write_tree(tmp_path / "imagenet", count=2)
    assert main(extract_args(tree.root, tmp_path / "out", "--masker", "segment-everything")) == 2
    assert "hsi extract: error: unknown masker 'segment-everything'; choose one of: box," in capsys.readouterr().err
    assert not (tmp_path / "out" / "parts").exists()


def test_a_missing_package_names_the_pip_extra():
    with pytest.raises(BackendUnavailable) as err:
        make_backend("masker", "test-needs-a-missing-package")
    assert str(err.value) == (
        "the masker 'test-needs-a-missing-package' needs optional packages that are not "
        "installed (hsi_no_such_package); install them with: "
        "pip install 'hard-spurious-imagenet[models]'"
    )


def test_sam_without_torch_is_a_usage_error_naming_the_extra(tmp_path, capsys, monkeypatch):
    find_spec = importlib.util.find_spec  # what the registry asks whether a package is installed
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "torch" else find_spec(name, *rest)
    )
    tree = write_tree(tmp_path / "imagenet", count=2)
    assert main(extract_args(tree.root, tmp_path / "out", "--masker", "sam")) == 2
    err = capsys.readouterr().err
    assert "the masker 'sam' needs optional packages that are not installed (torch)" in err
    assert "pip install 'hard-spurious-imagenet[models]'" in err


def test_registrations_are_checked():
    @dataclass
    class MutableConfig:
        radius: int = 3

    with pytest.raises(TypeError, match="must be a frozen dataclass"):
        register_backend("inpainter", "test-mutable", config_class=MutableConfig)
    with pytest.raises(ValueError, match="registered twice"):
        register_backend("masker", "box", config_class=BoxConfig)(make_unreachable_masker)
    with pytest.raises(TypeError, match="takes a TeleaConfig, got BoxConfig"):
        make_backend("inpainter", "telea", BoxConfig())


def test_looking_up_backends_and_extracting_with_box_never_import_torch(tmp_path):
    """The core install has no torch: every registration is discovered, and `hsi extract --masker
    box` runs (with worker processes, which unload backends), without importing a torch package."""
    tree = write_tree(tmp_path / "imagenet", count=4)
    script = f"""
import sys
from builder.backends import available
from builder.backends.registry import KINDS
from hsi.cli import main
names = {{kind: available(kind) for kind in KINDS}}
status = main(["extract", "--no-progress", "--source", {str(tree.root)!r}, "--out", {str(tmp_path / "out")!r},
               "--masker", "box", "--workers", "2", "--shard-size", "2"])
print(status, "sam" in names["masker"], sorted(m for m in sys.modules if m.split(".")[0] in {TORCH_PACKAGES!r}))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPOSITORY, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "0 True []"


def test_classifier_specs_resolve_through_the_one_registry(monkeypatch):
    import sys

    import evaluation.model_formats.models as models
    from builder.backends.registry import BackendUnavailable, available, entry

    assert available("classifier") == ["ep", "hf-clip", "onnx", "openclip", "state-dict", "timm", "ts", "tv"]
    specs = ("ts:m.pt", "ep:m.pt2", "onnx:m.onnx", "tv:resnet18", "timm:vit_b", "resnet50", "w/best.pt")
    assert [models.classifier_entry(s) for s in specs] == [
        ("ts", "m.pt"),
        ("ep", "m.pt2"),
        ("onnx", "m.onnx"),
        ("tv", "resnet18"),
        ("timm", "vit_b"),
        ("timm", "resnet50"),
        ("state-dict", "w/best.pt"),
    ]
    # a zero-shot spec's weights file may hold a path: its prefix names the kind, never the path
    assert models.classifier_entry("openclip:ViT-B-32:w/x.safetensors") == ("openclip", "ViT-B-32:w/x.safetensors")
    assert models.classifier_entry("hf-clip:org/name") == ("hf-clip", "org/name")
    assert entry("classifier", "timm").requires == ("torch", "timm")
    with pytest.raises(BackendUnavailable, match="unknown classifier 'tflite'"):
        entry("classifier", "tflite")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as on an install without the onnx extra
    with pytest.raises(BackendUnavailable, match=r"\(onnxruntime\); install them with: pip install '.*\[onnx\]'"):
        models.load_model("onnx:m.onnx")
