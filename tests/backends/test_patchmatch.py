"""The patchmatch inpainter: only the hole changes, the object never leaks into its own fill, each
image's fill depends on its id alone, and too few source pixels falls back to Telea, reported."""

import cv2
import numpy as np
import pytest

from builder.backends import make_backend
from builder.backends.classical import TeleaInpainter
from builder.backends.patchmatch import RIM_PIXELS, PatchMatchConfig, image_seed, parse_scale
from builder.core.config import ConfigError
from builder.core.imaging import resize_rgb
from builder.extract.shard_builder import ExtractConfig
from builder.formats.parts import PARTS_CANVAS_FILTER

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
def test_only_the_fill_mask_changes_and_no_object_colour_is_copied_into_it(scale):
    image, mask = striped_photo()
    (made,) = patchmatch(scale=scale).fill_images([image], [mask], ["ILSVRC2012_val_1"])
    filled, replaced = made.background, made.replaced
    assert made.fallback is None
    assert filled.shape == image.shape and filled.dtype == np.uint8
    assert replaced[mask].all()  # the fill mask holds the erase mask...
    assert np.array_equal(filled[~replaced], image[~replaced])  # ...and nothing outside it changed
    # ...and at most the band the working mask was grown by (2 working px, 400/224 photo px each)
    photo_px = {"canvas": 400 / 224, "full": 0, 100: 3}[scale]  # photo px per working px (the larger axis)
    band = int(np.ceil(RIM_PIXELS * photo_px)) + 2 if photo_px else 0
    near = cv2.dilate(mask.astype(np.uint8), np.ones((2 * band + 1, 2 * band + 1), np.uint8)) > 0
    assert not (replaced & ~near).any()
    assert (replaced & ~mask).any() == (scale != "full")  # the grown band is pasted too, never put back
    hole = filled[replaced].astype(int)
    # the red object is gone: the fill holds the stripes' red channel (noise under 30), no object red
    assert (hole[:, 0] < 60).all(), hole[:, 0].max()


def test_at_canvas_scale_the_canvas_is_the_fill_as_made_the_librarys_own():
    from patchmatch_cython import CythonSolver, inpaint_pyramid

    image, mask = striped_photo()
    (made,) = patchmatch().fill_images([image], [mask], ["ILSVRC2012_val_1"])
    work = resize_rgb(image, 224, 224, PARTS_CANVAS_FILTER)
    area = cv2.resize(mask.astype(np.float32), (224, 224), interpolation=cv2.INTER_AREA) > 0
    grown = cv2.dilate(area.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    seed = image_seed("ILSVRC2012_val_1")
    direct = inpaint_pyramid(work, grown, patch_size=5, solver_class=CythonSolver, seed=seed)
    assert np.array_equal(made.canvas, direct)  # not round-tripped through full resolution
    assert np.array_equal(made.canvas_replaced, grown)
    assert patchmatch(scale="full").fill_images([image], [mask], ["x"])[0].canvas is None


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


def test_the_quality_knobs_reach_the_library_are_recorded_and_checked():
    image, mask = striped_photo()
    plain = patchmatch().fill_images([image], [mask], ["a"])[0].canvas
    feathered = patchmatch(mask_feather=4.0).fill_images([image], [mask], ["a"])[0].canvas
    assert not np.array_equal(plain, feathered)
    params = patchmatch(em_loops=2, edge_weighted=True).info().params
    assert params["em_loops"] == 2 and params["edge_weighted"] is True and params["poisson_blend"] is True
    for bad in ({"em_loops": 0}, {"hole_refine": -1}, {"mask_feather": -1.0}, {"em_loops": True}):
        with pytest.raises(ConfigError, match="patchmatch"):
            PatchMatchConfig(**bad)
