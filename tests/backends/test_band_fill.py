"""The band fill (#46): where the object fills the frame and only a band of the photo is known, the
library refuses or is not tried, and the patchmatch inpainter still fills the hole from the band's
patches, with texture, deterministically, with no object colour copied, and says nothing of a
fallback; under `band_min_source` known it still falls back to Telea, reported."""

import cv2
import numpy as np
import pytest
from patchmatch_cython import CythonSolver, inpaint_pyramid

from builder.backends import make_backend
from builder.backends.band_fill import MIN_SOURCE_PATCHES, band_levels, fill_from_band
from builder.backends.classical import TeleaInpainter
from builder.backends.patchmatch import PatchMatchConfig
from builder.core.config import ConfigError
from builder.formats.fill_scores import score_fill

RED = np.array([255, 0, 0], np.uint8)


def banded_photo(known_columns: int, height: int = 224, width: int = 224, seed: int = 0):
    """Blue/green stripes with noise under a red object covering all but `known_columns` on the left."""
    rng = np.random.default_rng(seed)
    xx = np.arange(width)[None, :].repeat(height, 0)
    stripes = ((xx // 4) % 2).astype(np.int16)
    image = np.stack([np.zeros_like(stripes), 60 + 150 * stripes, 200 - 150 * stripes], axis=-1)
    image = np.clip(image + rng.integers(0, 30, (height, width, 1)), 0, 255).astype(np.uint8)
    mask = np.zeros((height, width), bool)
    mask[:, known_columns:] = True
    image[mask] = RED
    return image, mask


def patchmatch(**settings):
    return make_backend("inpainter", "patchmatch", PatchMatchConfig(**settings))


def test_the_library_refuses_a_frame_filling_hole_and_the_band_fill_fills_it_with_texture():
    image, mask = banded_photo(22)  # 10% known, grown by the 2-px rim: 9%
    with pytest.raises(ValueError, match="mask covers the entire image"):
        inpaint_pyramid(image, mask, patch_size=5, solver_class=CythonSolver, seed=1)
    (made,) = patchmatch().fill_images([image], [mask], ["ILSVRC2012_val_7"])
    assert made.fallback is None
    assert np.array_equal(made.background[~made.replaced], image[~made.replaced])
    assert made.replaced[mask].all()
    assert not (made.background[made.replaced] == RED).all(axis=-1).any()  # no object colour copied
    telea = TeleaInpainter(radius=3).inpaint_batch([image], [made.replaced])[0]
    ours, smear = score_fill(made.background, made.replaced), score_fill(telea, made.replaced)
    assert ours.texture > 2 * smear.texture and ours.score > smear.score


def test_the_band_fill_is_deterministic_and_its_seed_is_the_image_id():
    image, mask = banded_photo(30)
    first = patchmatch().inpaint_batch([image], [mask], ["a"])[0]
    assert np.array_equal(first, patchmatch().inpaint_batch([image, image], [mask, mask], ["b", "a"])[1])
    assert not np.array_equal(first, patchmatch().inpaint_batch([image], [mask], ["b"])[0])


def test_between_the_band_fills_and_the_librarys_minimum_the_band_fill_fills():
    image, mask = banded_photo(8)  # 3.6% known: under the library's 5%, the rim left 1.8%
    (made,) = patchmatch().fill_images([image], [mask], ["x"])
    assert made.fallback is None
    assert not (made.background[made.replaced] == RED).all(axis=-1).any()


def test_a_band_the_grown_rim_would_eat_is_filled_from_the_ungrown_mask():
    image, mask = banded_photo(6, height=448, width=448)  # 1.3% known; 3 px at the canvas, the rim eats 2
    (made,) = patchmatch().fill_images([image], [mask], ["x"])
    assert made.fallback is None
    assert not made.canvas_replaced[:, :3].any() and made.canvas_replaced[:, 3:].all()


def test_under_the_band_fills_minimum_it_falls_back_to_telea_and_says_why():
    image, mask = banded_photo(1)  # 0.4% known
    (made,) = patchmatch().fill_images([image], [mask], ["x"])
    assert made.fallback is not None and made.fallback.reason == "inpaint-fallback"
    assert "under the 1% the band fill needs" in made.fallback.detail
    assert np.array_equal(made.background, TeleaInpainter(radius=3).inpaint_batch([image], [mask])[0])


def test_the_pyramid_stops_above_the_first_level_the_band_does_not_survive():
    _, thin = banded_photo(12)
    _, wide = banded_photo(100)
    thin_levels, wide_levels = band_levels(thin, 5), band_levels(wide, 5)
    assert [level[:2] for level in thin_levels] == [(224, 224), (112, 112)]
    assert len(wide_levels) > len(thin_levels)
    kernel = np.ones((5, 5), np.uint8)
    for _, _, level_mask in thin_levels[1:] + wide_levels[1:]:
        patches = cv2.erode((~level_mask).astype(np.uint8), kernel, borderType=cv2.BORDER_CONSTANT, borderValue=0)
        assert patches.sum() >= MIN_SOURCE_PATCHES


def test_nothing_known_is_no_band_fill_and_the_knob_is_checked_and_recorded():
    image, mask = banded_photo(0)
    assert fill_from_band(image, mask, 5, 1, 3, True) is None
    assert patchmatch().info().params["band_fill"] == {"min_source": 0.01, "min_source_patches": MIN_SOURCE_PATCHES}
    for bad in (0, 1, -0.1, "x"):
        with pytest.raises(ConfigError, match="band_min_source"):
            PatchMatchConfig(band_min_source=bad)
