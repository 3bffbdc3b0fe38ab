"""`openclip:` and `hf-clip:` specs load tiny saved models through the real code paths, read the
model's own preprocessing, and refuse missing or unfit weights with what to pass."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_clip import IMAGE_SIZE, TINY_ARCH, register_tiny_openclip, save_tiny_hf_clip

from builder.core.errors import HsiError
from evaluation.zero_shot.clip_models import (
    WEIGHTS_VARIABLE,
    ClipModelError,
    is_clip_spec,
    load_clip,
    resolve_openclip_weights,
)

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)


@dataclass
class Payload:
    """An object a checkpoint could smuggle in: unpickling it would import this module's code."""

    command: str = "echo never run"


@pytest.fixture(autouse=True)
def _registered(tiny_openclip_file, monkeypatch):
    register_tiny_openclip(tiny_openclip_file.parent / "open_clip_configs")
    monkeypatch.delenv(WEIGHTS_VARIABLE, raising=False)


def test_an_openclip_file_spec_loads_the_files_weights_with_open_clips_preprocessing(tiny_openclip_file):
    loaded = load_clip(f"openclip:{TINY_ARCH}:{tiny_openclip_file}")
    saved = load_file(str(tiny_openclip_file))
    state = loaded.model.state_dict()
    assert set(state) == set(saved) and all(torch.equal(state[name], saved[name]) for name in saved)
    assert loaded.spec == f"openclip:{TINY_ARCH}:tiny-clip.safetensors"  # a file by its name only
    assert loaded.kind == "open_clip" and not loaded.model.training
    assert (
        list(loaded.weights_sha256) == ["tiny-clip.safetensors"]
        and len(loaded.weights_sha256["tiny-clip.safetensors"]) == 64
    )
    assert loaded.tokenizer(["a photo of a tench."]).shape == (1, 77)
    pre = loaded.preprocessing
    assert (pre.resize, pre.input_size, pre.interpolation, pre.mean) == ((32, 32), (32, 32), "bicubic", OPENAI_MEAN)
    assert not pre.crops_canvas and pre.preprocessing_fields()["crop_pct"] is None


def test_an_openclip_spec_without_weights_takes_the_file_the_variable_names(tiny_openclip_file, monkeypatch):
    with pytest.raises(
        ClipModelError, match=f"openclip:{TINY_ARCH} names no weights: .* or set {WEIGHTS_VARIABLE}=FILE"
    ):
        load_clip(f"openclip:{TINY_ARCH}")
    monkeypatch.setenv(WEIGHTS_VARIABLE, str(tiny_openclip_file))
    loaded = load_clip(f"openclip:{TINY_ARCH}")
    assert loaded.weights == tiny_openclip_file.name


@pytest.mark.parametrize(
    ("weights", "problem"),
    [
        ("absent.safetensors", r"the weights file \(openclip:hsi-tiny-clip:FILE\) not found: .* pass the file as"),
        ("laion2b", "'laion2b' is neither a pretrained tag of hsi-tiny-clip nor a weights file"),
    ],
)
def test_missing_openclip_weights_are_refused_never_replaced(tmp_path, weights, problem):
    spec = f"openclip:{TINY_ARCH}:{tmp_path / weights if weights.endswith('.safetensors') else weights}"
    with pytest.raises(ClipModelError, match=problem) as caught:
        load_clip(spec)
    assert isinstance(caught.value, HsiError) and "\n" not in str(caught.value)


def test_a_linked_or_unfit_or_pickled_weights_file_is_refused(tiny_openclip_file, tmp_path):
    link = tmp_path / "link.safetensors"
    os.symlink(tiny_openclip_file, link)
    with pytest.raises(ClipModelError, match="is a link; links are never followed"):
        load_clip(f"openclip:{TINY_ARCH}:{link}")
    partial = load_file(str(tiny_openclip_file))
    partial.pop("logit_scale")
    save_file(partial, str(tmp_path / "partial.safetensors"))
    with pytest.raises(
        ClipModelError, match=r"cannot load partial.safetensors into openclip:hsi-tiny-clip \(RuntimeError"
    ):
        load_clip(f"openclip:{TINY_ARCH}:{tmp_path / 'partial.safetensors'}")
    torch.save({"state_dict": load_file(str(tiny_openclip_file)), "code": Payload()}, tmp_path / "pickled.pt")
    with pytest.raises(ClipModelError, match="the weights file holds more than tensors and plain values, and is never"):
        load_clip(f"openclip:{TINY_ARCH}:{tmp_path / 'pickled.pt'}")


def test_a_pretrained_tag_not_in_the_hub_cache_names_where_it_is_published(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ClipModelError) as caught:
        resolve_openclip_weights("ViT-B-32-quickgelu", "openai")
    message = str(caught.value)
    assert "the weights of openclip:ViT-B-32-quickgelu:openai are not available here" in message
    assert "https://huggingface.co/timm/vit_base_patch32_clip_224.openai" in message
    assert "HF_HOME" in message and WEIGHTS_VARIABLE in message and "\n" not in message


def test_an_unknown_architecture_is_refused():
    with pytest.raises(ClipModelError, match="open_clip has no architecture 'ViT-Q-99'"):
        load_clip("openclip:ViT-Q-99:openai")
    assert is_clip_spec("hf-clip:org/name") and is_clip_spec("openclip:ViT-B-32") and not is_clip_spec("timm:resnet50")


def test_an_hf_clip_folder_loads_with_its_tokenizer_and_image_processor(tiny_hf_folder):
    loaded = load_clip(f"hf-clip:{tiny_hf_folder}")
    assert loaded.spec == "hf-clip:tiny-hf-clip" and loaded.kind == "transformers" and not loaded.model.training
    assert list(loaded.weights_sha256) == ["model.safetensors"]
    ids = loaded.tokenizer(["a photo of a tench."])["input_ids"][0]
    assert ids[0] == 49406 and ids[-1] == 49407  # CLIP's start and end tokens
    pre = loaded.preprocessing
    assert (pre.resize, pre.input_size, pre.interpolation, pre.mean) == ((32, 32), (32, 32), "bicubic", OPENAI_MEAN)
    assert not pre.crops_canvas


def test_an_hf_clip_processor_that_centre_crops_says_so(tmp_path):
    folder = save_tiny_hf_clip(tmp_path / "cropping", shortest_edge=36)
    pre = load_clip(f"hf-clip:{folder}").preprocessing
    assert pre.resize == (36, 36) and pre.input_size == (IMAGE_SIZE, IMAGE_SIZE) and pre.crops_canvas
    assert pre.preprocessing_fields()["crop_pct"] == pytest.approx(32 / 36)


def test_hf_clip_weights_missing_tensors_or_not_cached_are_refused(tiny_hf_folder, tmp_path):
    folder = tmp_path / "partial"
    folder.mkdir()
    for path in tiny_hf_folder.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    weights = load_file(str(folder / "model.safetensors"))
    weights.pop("logit_scale")
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ClipModelError, match=r"the weights lack 1 of the model's tensors \(logit_scale\)"):
        load_clip(f"hf-clip:{folder}")
    with pytest.raises(ClipModelError) as caught:
        load_clip("hf-clip:no-such-org/no-such-clip")
    message = str(caught.value)
    assert "is neither a local folder nor in the Hugging Face Hub cache" in message
    assert "https://huggingface.co/no-such-org/no-such-clip" in message and "HF_HUB_OFFLINE" in message


def test_a_pretrained_tag_loads_from_the_local_hub_cache_with_the_tags_preprocessing(
    tiny_openclip_file, tmp_path, monkeypatch
):
    import open_clip
    from huggingface_hub import constants

    # a tag for the tiny architecture, as open_clip's pretrained list declares OpenAI's: weights on the Hub,
    # QuickGELU, its own normalisation
    tag = {"hf_hub": "hsi-test/tiny-clip/", "quick_gelu": True, "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
    monkeypatch.setitem(open_clip.pretrained._PRETRAINED, TINY_ARCH, {"tinytag": tag})
    cache = tmp_path / "hub"
    snapshot = cache / "models--hsi-test--tiny-clip" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "open_clip_model.safetensors").write_bytes(tiny_openclip_file.read_bytes())
    (cache / "models--hsi-test--tiny-clip" / "refs").mkdir()
    (cache / "models--hsi-test--tiny-clip" / "refs" / "main").write_text("0" * 40, "utf-8")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    loaded = load_clip(f"openclip:{TINY_ARCH}:tinytag")
    saved = load_file(str(tiny_openclip_file))
    assert all(torch.equal(loaded.model.state_dict()[name], saved[name]) for name in saved)
    assert loaded.spec == f"openclip:{TINY_ARCH}:tinytag" and loaded.weights == "tinytag"
    assert list(loaded.weights_sha256) == ["open_clip_model.safetensors"]
    assert type(loaded.model.visual.transformer.resblocks[0].mlp.gelu).__name__ == "QuickGELU"
    assert loaded.notes == [f"QuickGELU, as the pretrained config of {TINY_ARCH}:tinytag declares"]
    assert loaded.preprocessing.mean == (0.5, 0.5, 0.5) and "tinytag" in loaded.preprocessing.source
