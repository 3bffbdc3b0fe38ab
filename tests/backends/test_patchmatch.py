"""The patchmatch inpainter: only the hole changes, the object never leaks into its own fill, each
image's fill depends on its id alone, and too few source pixels falls back to Telea, reported."""

import numpy as np
import pytest

from builder.backends import make_backend
from builder.backends.classical import TeleaInpainter
from builder.backends.patchmatch import PatchMatchConfig, parse_scale
from builder.core.config import ConfigError
from builder.extract.shard_builder import ExtractConfig

RED = np.array([255, 0, 0], np.uint8)


def striped_photo(height: int = 300, width: int = 400, seed: int = 0) -> np.ndarray:
    """Blue and green stripes with noise (no red anywhere), and a red object filling the mask to its
    edge (larger than the canvas, so the canvas scale downsizes it and the rim is at risk)."""
    rng = np.random.default_rng(seed)
    xx = np.arange(width)[None, :].repeat(height, 0)
    stripes = ((xx // 6) % 2).astype(np.int16)
    image = np.stack([np.zeros_like(stripes), 60 + 150 * stripes, 200 - 150 * stripes], axis=-1)
    image = np.clip(image + rng.integers(0, 30, (height, width, 1)), 0, 255).astype(np.uint8)
    mask = np.zeros((height, width), bool)
    mask[80:220, 120:300] = True
    image[mask] = RED
    return image, mask


def patchmatch(**settings):
    return make_backend("inpainter", "patchmatch", PatchMatchConfig(**settings))


@pytest.mark.parametrize("scale", ["canvas", "full", 100])
def test_only_the_hole_changes_and_no_object_colour_is_copied_into_it(scale):
    image, mask = striped_photo()
    (filled,), (fallback,) = patchmatch(scale=scale).inpaint_with_fallbacks([image], [mask], ["ILSVRC2012_val_1"])
    assert fallback is None
    assert filled.shape == image.shape and filled.dtype == np.uint8
    assert np.array_equal(filled[~mask], image[~mask])
    hole = filled[mask].astype(int)
    # the red object is gone: the hole holds the stripes' red channel (noise under 30), no object red
    assert (hole[:, 0] < 60).all(), hole[:, 0].max()


def test_a_fill_depends_on_the_image_id_only_not_on_its_batch():
    inpainter = patchmatch()
    image, mask = striped_photo()
    other, other_mask = striped_photo(seed=1)
    alone = inpainter.inpaint_batch([image], [mask], ["a"])[0]
    batched = inpainter.inpaint_batch([other, image], [other_mask, mask], ["b", "a"])[1]
    assert np.array_equal(alone, batched)
    assert np.array_equal(alone, patchmatch().inpaint_batch([image], [mask], ["a"])[0])
    assert not np.array_equal(alone, inpainter.inpaint_batch([image], [mask], ["c"])[0])  # the seed is the id's


def test_too_few_source_pixels_falls_back_to_telea_and_says_so():
    image, _ = striped_photo()
    mask = np.ones(image.shape[:2], bool)
    mask[:20, :30] = False  # under 1% of the photo is left to copy from
    inpainter = patchmatch()
    (filled,), (fallback,) = inpainter.inpaint_with_fallbacks([image], [mask], ["x"])
    telea = TeleaInpainter(radius=3)
    assert np.array_equal(filled, telea.inpaint_batch([image], [mask])[0])
    assert fallback.reason == "inpaint-fallback" and "filled by telea" in fallback.detail
    assert fallback.to_json()["inpainter"] == telea.info().to_json()
    assert inpainter.info().params["fallback"] == telea.info().to_json()


def test_an_empty_mask_returns_the_image_and_the_settings_are_in_the_provenance():
    image, _ = striped_photo()
    (same,) = patchmatch().inpaint_batch([image], [np.zeros(image.shape[:2], bool)])
    assert np.array_equal(same, image)
    params = patchmatch(scale="256").info().params
    assert params["scale"] == 256 and params["patch_size"] == 5 and params["patchmatch_cython"] == "0.2.1"


def test_scales_and_settings_are_checked():
    assert parse_scale("canvas") == "canvas" and parse_scale("320") == 320 and parse_scale(64) == 64
    for bad in ("half", "0", "-5", "4", True, 1.5):
        with pytest.raises(ConfigError, match="--inpaint-scale"):
            parse_scale(bad)
    with pytest.raises(ConfigError, match="odd"):
        PatchMatchConfig(patch_size=4)
    config = ExtractConfig(inpainter="patchmatch", inpaint_scale="full", patchmatch_patch_size=7)
    assert config.inpainter_config() == PatchMatchConfig(scale="full", patch_size=7)
    with pytest.raises(ConfigError, match="applies to the patchmatch inpainter"):
        ExtractConfig(inpainter="telea", inpaint_scale="full").inpainter_config()
