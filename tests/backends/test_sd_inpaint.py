"""Stable Diffusion inpainting (`builder.backends.sd_inpaint`) with a tiny randomly initialised
pipeline built from diffusers' own classes, saved and loaded through the production loader
offline: mask polarity, sizes, paste-back, determinism per seed, batch independence, provenance
and the refusals that name --sd-model."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from PIL import Image  # noqa: E402
from tiny_sd import TINY_NATIVE_SIZE, clip_tokenizer, one_intra_op_thread  # noqa: E402

from builder.backends import available, make_backend  # noqa: E402
from builder.backends.registry import BackendUnavailable  # noqa: E402
from builder.backends.sd_inpaint import (  # noqa: E402
    DEFAULT_SD_MODEL,
    GenerationSettings,
    GenerationSettingsError,
    SdInpaintConfig,
    SdInpainter,
    pipeline_mask,
    pipeline_weights_sha256,
)
from builder.core.errors import HsiError  # noqa: E402

FAST = GenerationSettings(steps=3, batch_size=3)  # int(3 * 0.9) = 2 denoising steps
HUB_PAGE = f"https://huggingface.co/{DEFAULT_SD_MODEL}"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with one_intra_op_thread():
        yield


@pytest.fixture(scope="module")
def inpainter(tiny_sd_folder):
    return SdInpainter.load(str(tiny_sd_folder), device="cpu")


def photos(count: int, height: int = 96, width: int = 96, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8) for _ in range(count)]


def left_half(height: int = 96, width: int = 96) -> np.ndarray:
    keep = np.zeros((height, width), bool)
    keep[:, : width // 2] = True
    return keep


class RecordingPipeline:
    """Stands in front of the real pipeline and records what it is called with."""

    def __init__(self, pipeline) -> None:
        self.pipeline = pipeline
        self.calls: list[dict] = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return self.pipeline(**kwargs)


def test_the_pipeline_mask_is_white_exactly_where_a_pixel_is_repainted():
    keep = np.zeros((5, 7), bool)
    keep[1:3, 2:6] = True
    mask = pipeline_mask(keep)
    assert mask.mode == "L" and mask.size == (7, 5)
    values = np.asarray(mask)
    assert set(np.unique(values)) == {0, 255}
    assert np.array_equal(values == 255, ~keep)
    everything = pipeline_mask(None, (5, 7))
    assert everything.mode == "L" and everything.size == (7, 5) and np.asarray(everything).min() == 255
    with pytest.raises(ValueError, match="2-D bool"):
        pipeline_mask(keep.astype(np.uint8))


def test_diffusers_gets_the_resized_mask_and_kept_source_pixels_survive_bit_for_bit(inpainter, monkeypatch):
    recorder = RecordingPipeline(inpainter.pipeline)
    monkeypatch.setattr(inpainter, "pipeline", recorder)
    images, keep = photos(2), [left_half(), np.zeros((96, 96), bool)]
    out = inpainter.generate(images, keep, ["a photo of a tench"] * 2, [1, 2], FAST, progress=False)
    (call,) = recorder.calls
    side = TINY_NATIVE_SIZE
    assert call["height"] == call["width"] == side and call["strength"] == 0.9 and call["num_inference_steps"] == 3
    for given, kept in zip(call["mask_image"], keep):
        assert given.mode == "L" and given.size == (side, side)
        expected = np.where(np.asarray(Image.fromarray(kept).resize((side, side), Image.NEAREST)), 0, 255)
        assert np.array_equal(np.asarray(given), expected)
    assert np.asarray(call["mask_image"][0])[:, : side // 2].max() == 0
    assert np.asarray(call["mask_image"][0])[:, side // 2 :].min() == 255
    assert [image.size for image in call["image"]] == [(side, side)] * 2
    assert [g.initial_seed() for g in call["generator"]] == [1, 2]
    assert call["negative_prompt"] == ["", ""] and call["prompt"] == ["a photo of a tench"] * 2
    # paste-back: every kept pixel is the source's; the repainted ones are new
    assert np.array_equal(out[0][keep[0]], images[0][keep[0]])
    assert (out[0][~keep[0]] != images[0][~keep[0]]).any(axis=-1).mean() > 0.9
    assert (out[1] != images[1]).any(axis=-1).mean() > 0.9


def test_without_paste_back_diffusers_changes_the_kept_pixels_too(inpainter):
    """The 9-channel UNet's output goes through the VAE: diffusers does not keep the unmasked
    pixels, which is why paste-back exists."""
    images, keep = photos(1), [left_half()]
    settings = GenerationSettings(steps=3, paste_back=False)
    out = inpainter.generate(images, keep, ["a photo of a tench"], [1], settings, progress=False)
    unchanged = (out[0][keep[0]] == images[0][keep[0]]).all(axis=-1).mean()
    assert unchanged < 0.05, unchanged  # measured 0.0: a random VAE's output, nothing kept
    pasted = inpainter.generate(images, keep, ["a photo of a tench"], [1], FAST, progress=False)
    assert np.array_equal(pasted[0][~keep[0]], out[0][~keep[0]])  # paste-back touches only the kept pixels


def test_output_size_equals_input_size(inpainter):
    images = photos(1, 224, 224) + photos(1, 90, 150, seed=1)
    keep = [left_half(224, 224), None]
    out = inpainter.generate(images, keep, ["a photo of a tench"] * 2, [3, 4], FAST, progress=False)
    assert [o.shape for o in out] == [(224, 224, 3), (90, 150, 3)]
    assert all(o.dtype == np.uint8 for o in out)


def test_no_mask_repaints_the_whole_image_with_a_white_mask(inpainter, monkeypatch):
    recorder = RecordingPipeline(inpainter.pipeline)
    monkeypatch.setattr(inpainter, "pipeline", recorder)
    images = photos(1)
    out = inpainter.generate(images, [None], ["a photo of a tench"], [5], FAST, progress=False)
    assert np.asarray(recorder.calls[0]["mask_image"][0]).min() == 255
    assert (out[0] != images[0]).any(axis=-1).mean() > 0.9


def test_results_are_deterministic_per_seed_and_independent_of_batch_mates(inpainter):
    images, keep = photos(3, seed=2), [left_half()] * 3
    prompts, seeds = ["a photo of a tench", "a photo of a goldfinch", "x"], [10, 11, 12]
    first = inpainter.generate(images, keep, prompts, seeds, FAST, progress=False)
    again = inpainter.generate(images, keep, prompts, seeds, FAST, progress=False)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[0], first[1])
    # another seed for image 0 changes image 0 only
    reseeded = inpainter.generate(images, keep, prompts, [99, 11, 12], FAST, progress=False)
    assert not np.array_equal(reseeded[0], first[0])
    assert np.array_equal(reseeded[1], first[1]) and np.array_equal(reseeded[2], first[2])
    # image 0 among other batch-mates (one unmasked), last in a batch of the same size
    mates = photos(2, seed=7)
    with_mates = inpainter.generate(
        [mates[0], mates[1], images[0]],
        [None, keep[0], keep[0]],
        ["y", "z", prompts[0]],
        [1, 2, 10],
        FAST,
        progress=False,
    )
    assert np.array_equal(with_mates[2], first[0])


def test_the_batch_size_moves_at_most_a_few_pixels_by_one_level(inpainter):
    """Kernels are chosen by shape, so a batch of 1 against 3 may differ in the last float bits
    (see the module's determinism note); the seed's noise is the image's own either way."""
    images, keep = photos(3, seed=3), [left_half()] * 3
    prompts, seeds = ["a photo of a tench"] * 3, [20, 21, 22]
    batched = inpainter.generate(images, keep, prompts, seeds, FAST, progress=False)
    single = inpainter.generate(images, keep, prompts, seeds, GenerationSettings(steps=3, batch_size=1), progress=False)
    differences = np.stack([np.abs(a.astype(int) - b) for a, b in zip(batched, single)])
    assert differences.max() <= 1
    assert (differences > 0).mean() < 0.01  # measured: 0 to 0.01% of the values


def test_prompt_template_and_settings_checks(inpainter):
    assert inpainter.prompt_for("tench", GenerationSettings()) == "a photo of a tench"
    assert (
        inpainter.prompt_for("tench", GenerationSettings(prompt_template="{class_name}, a photo")) == "tench, a photo"
    )
    with pytest.raises(GenerationSettingsError, match=r"--prompt-template must contain \{class_name\}"):
        GenerationSettings(prompt_template="a photo")
    with pytest.raises(GenerationSettingsError, match="--steps 1 at --strength 0.5 leaves no denoising step"):
        GenerationSettings(steps=1, strength=0.5)
    with pytest.raises(GenerationSettingsError, match=r"--strength must be within \(0, 1\]"):
        GenerationSettings(strength=0.0)
    with pytest.raises(GenerationSettingsError, match="may hold only the field .class_name.*KeyError: 'name'"):
        GenerationSettings(prompt_template="a {name} photo of a {class_name}")
    assert GenerationSettings(prompt_template="{{x}} {class_name}").prompt_template == "{{x}} {class_name}"
    with pytest.raises(ValueError, match="a keep-mask must be bool, got uint8"):
        inpainter.generate(photos(1), [np.ones((96, 96), np.uint8)], ["a"], [1], FAST, progress=False)
    with pytest.raises(ValueError, match="one entry per image"):
        inpainter.generate(photos(2), [None], ["a"], [1], FAST, progress=False)
    with pytest.raises(ValueError, match=r"a keep-mask of shape \(4, 4\) for an image of \(96, 96\)"):
        inpainter.generate(photos(1), [np.zeros((4, 4), bool)], ["a"], [1], FAST, progress=False)


def test_provenance_names_the_folder_and_hashes_the_weights(tiny_sd_folder, tmp_path):
    loaded = SdInpainter.load(str(tiny_sd_folder), device="cpu")
    assert loaded.model_id == tiny_sd_folder.name and "/" not in loaded.model_id
    assert len(loaded.weights_sha256) == 64 and loaded.native_size == TINY_NATIVE_SIZE
    info = loaded.info().to_json()
    assert info["checkpoint"] == tiny_sd_folder.name and info["checkpoint_sha256"] == loaded.weights_sha256
    assert info["params"] == {"device": "cpu", "dtype": "float32", "native_size": TINY_NATIVE_SIZE}
    copy = shutil.copytree(tiny_sd_folder, tmp_path / "sd-copy")
    assert pipeline_weights_sha256(copy) == loaded.weights_sha256  # what load records, by content
    # a file diffusers does not load (a hub snapshot's fp16 copy) is not part of the digest
    (copy / "unet" / "diffusion_pytorch_model.fp16.safetensors").write_bytes(b"not loaded")
    assert pipeline_weights_sha256(copy) == loaded.weights_sha256
    weights = copy / "unet" / "diffusion_pytorch_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01  # one bit of the last weight value
    weights.write_bytes(bytes(data))
    assert pipeline_weights_sha256(copy) != loaded.weights_sha256
    assert SdInpainter.load(str(copy), device="cpu").weights_sha256 == pipeline_weights_sha256(copy)


def test_the_registry_builds_the_generator_from_the_folder_offline(tiny_sd_folder, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "sd-inpaint" in available("generator")
    generator = make_backend("generator", "sd-inpaint", SdInpaintConfig(model_id=str(tiny_sd_folder), device="cpu"))
    assert isinstance(generator, SdInpainter) and generator.model_id == tiny_sd_folder.name
    out = generator.generate(photos(1), [left_half()], ["a photo of a tench"], [1], FAST, progress=False)
    assert out[0].shape == (96, 96, 3)


def test_a_cached_hub_id_loads_offline(tiny_sd_folder, tmp_path, monkeypatch):
    """The default id resolves through the Hugging Face cache (here a cache holding the tiny
    pipeline under that id), without the network."""
    import huggingface_hub.constants

    snapshot = tmp_path / "hub" / "models--stable-diffusion-v1-5--stable-diffusion-inpainting"
    shutil.copytree(tiny_sd_folder, snapshot / "snapshots" / ("0" * 40))
    (snapshot / "refs").mkdir()
    (snapshot / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    loaded = SdInpainter.load(device="cpu")
    assert loaded.model_id == DEFAULT_SD_MODEL
    assert loaded.weights_sha256 == pipeline_weights_sha256(tiny_sd_folder)


def test_missing_or_unusable_pipelines_are_refused_naming_the_flag(tmp_path, monkeypatch):
    import huggingface_hub.constants

    missing = tmp_path / "no-such-pipeline"
    with pytest.raises(BackendUnavailable) as err:
        SdInpainter.load(str(missing))
    assert isinstance(err.value, HsiError)
    assert str(err.value).startswith(f"--sd-model {missing}: the folder does not exist.")
    assert HUB_PAGE in str(err.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BackendUnavailable, match="'empty' cannot be used .no model_index.json") as err:
        SdInpainter.load(str(empty))
    assert "--sd-model" in str(err.value) and HUB_PAGE in str(err.value)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model_index.json").write_text('{"_class_name": "StableDiffusionInpaintPipeline"}')
    with pytest.raises(BackendUnavailable, match="'broken' cannot be used") as err:
        SdInpainter.load(str(broken))
    assert "--sd-model" in str(err.value)
    # an id that is not in the (empty) cache, offline
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(BackendUnavailable) as err:
        SdInpainter.load(DEFAULT_SD_MODEL)
    message = str(err.value)
    assert "neither a local folder nor available from the Hugging Face Hub" in message
    assert "--sd-model" in message and HUB_PAGE in message
    with pytest.raises(BackendUnavailable, match="--sd-dtype must be one of auto, float16, bfloat16, float32"):
        SdInpainter.load(str(missing.parent / "empty"), dtype="half")


def test_the_tiny_tokenizer_encodes_like_clip():
    """The offline tokenizer made from open-clip-torch's BPE file gives CLIP's token ids."""
    tokenizer = clip_tokenizer()
    assert len(tokenizer) == 49408 and tokenizer.model_max_length == 77
    # CLIP's ids: <|startoftext|> a photo of a goldfinch <|endoftext|>
    assert tokenizer("a photo of a goldfinch").input_ids == [49406, 320, 1125, 539, 320, 4999, 18523, 49407]
