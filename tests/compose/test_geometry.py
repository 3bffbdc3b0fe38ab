"""Placement maths and pixel operations: every placement and mode, found back pixel-exactly."""

from __future__ import annotations

import numpy as np
import pytest

from builder.compose.geometry import CORNERS, GeometryError, check_position, object_size, paste, place, resize_mask
from builder.core.imaging import resize_rgb
from builder.core.rng import sample_rng

C = 224
OBJECT = (250, 240, 230)
BACK = (10, 20, 30)

# size 56 on a 224 canvas: free range 168 on each axis, half of it 84.
EXPECTED_56 = {
    "center": (84, 84),
    "top-right": (168, 0),
    "top-left": (0, 0),
    "bottom-left": (0, 168),
    "bottom-right": (168, 168),
    "top": (84, 0),
    "bottom": (84, 168),
    "left": (0, 84),
    "right": (168, 84),
    "xy:0.25,0.75": (42, 126),
    "xy:0,1": (0, 168),
}


def found_box(canvas: np.ndarray, color=OBJECT) -> tuple[int, int, int, int]:
    """x, y, w, h of the pixels of exactly `color`."""
    ys, xs = np.nonzero(np.all(canvas == np.array(color, np.uint8), axis=-1))
    return int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)


def composite(position: str, size: int, crop_wh=(60, 40), mode="square", margin=0, rng=None):
    crop = np.full((crop_wh[1], crop_wh[0], 3), OBJECT, np.uint8)
    w, h = object_size(crop_wh[0], crop_wh[1], size, C, mode, margin)
    placed = place(position, w, h, C, margin, rng)
    canvas = np.full((C, C, 3), BACK, np.uint8)
    paste(canvas, resize_rgb(crop, w, h), placed)
    return canvas, placed


@pytest.mark.parametrize("position,xy", sorted(EXPECTED_56.items()))
def test_every_named_placement_is_pixel_exact_at_56(position, xy):
    canvas, placed = composite(position, 56)
    assert (placed.x, placed.y, placed.w, placed.h) == (*xy, 56, 56)
    assert found_box(canvas) == (*xy, 56, 56)
    assert np.count_nonzero(np.all(canvas == OBJECT, axis=-1)) == 56 * 56  # a flat object stays flat


@pytest.mark.parametrize("size", [56, 84, 112])
def test_paper_centre_and_flush_top_right_corner(size):
    canvas, placed = composite("center", size)
    assert found_box(canvas) == (C // 2 - size // 2, C // 2 - size // 2, size, size)
    canvas, placed = composite("top-right", size)
    assert found_box(canvas) == (C - size, 0, size, size)
    assert placed.position == "top-right"


def test_margin_moves_corners_and_edges_inwards():
    assert found_box(composite("top-right", 56, margin=8)[0]) == (224 - 56 - 8, 8, 56, 56)
    assert found_box(composite("bottom-left", 84, margin=10)[0]) == (10, 224 - 84 - 10, 84, 84)
    assert found_box(composite("left", 56, margin=5)[0]) == (5, 84, 56, 56)
    assert found_box(composite("center", 56, margin=5)[0]) == (84, 84, 56, 56)  # the centre ignores margins


def test_aspect_ratio_mode_keeps_ratio_with_short_side_s_and_shrinks_long_objects():
    assert object_size(60, 30, 56, C, "ar") == (112, 56)
    assert object_size(30, 60, 84, C, "ar") == (84, 168)
    assert object_size(30, 200, 112, C, "ar") == (34, 224)  # 747 > 224: the whole object shrinks (33.6)
    assert object_size(30, 200, 56, C, "ar", margin=10) == (31, 204)  # shrunk inside the margins (30.6)
    assert object_size(61, 40, 56, C, "ar") == (85, 56)  # 85.4 rounds to 85
    assert object_size(60, 30, 56, C, "square") == (56, 56)
    canvas, placed = composite("bottom-right", 56, crop_wh=(60, 30), mode="ar")
    assert found_box(canvas) == (224 - 112, 224 - 56, 112, 56)
    canvas, placed = composite("center", 112, crop_wh=(30, 200), mode="ar")
    assert found_box(canvas) == (112 - 17, 0, 34, 224)


def test_random_corner_is_seeded_per_sample_and_reaches_all_corners():
    chosen = {place("random-corner", 56, 56, C, rng=sample_rng(0, f"k{i}")).position for i in range(40)}
    assert chosen == set(CORNERS)
    first = place("random-corner", 84, 56, C, rng=sample_rng(3, "ILSVRC2012_val_00000001"))
    again = place("random-corner", 84, 56, C, rng=sample_rng(3, "ILSVRC2012_val_00000001"))
    assert first == again and first.position in CORNERS
    canvas, placed = composite("random-corner", 56, rng=sample_rng(0, "k1"))
    assert found_box(canvas) == (placed.x, placed.y, 56, 56)
    assert (placed.x, placed.y) == EXPECTED_56[placed.position]
    with pytest.raises(GeometryError, match="RNG"):
        place("random-corner", 56, 56, C)


def test_mask_paste_leaves_background_outside_the_mask():
    crop = np.full((40, 40, 3), OBJECT, np.uint8)
    yy, xx = np.mgrid[0:40, 0:40]
    mask = (xx - 19.5) ** 2 + (yy - 19.5) ** 2 <= 20**2
    obj, obj_mask = resize_rgb(crop, 80, 80), resize_mask(mask, 80, 80)
    canvas = np.full((C, C, 3), BACK, np.uint8)
    placed = place("top-left", 80, 80, C)
    paste(canvas, obj, placed, obj_mask)
    assert tuple(canvas[0, 0]) == BACK and tuple(canvas[79, 79]) == BACK  # box corners: outside the disc
    assert tuple(canvas[40, 40]) == OBJECT and tuple(canvas[0, 40]) == OBJECT  # centre and top edge middle
    assert np.count_nonzero(np.all(canvas == OBJECT, axis=-1)) == np.count_nonzero(obj_mask)
    assert found_box(canvas) == (0, 0, 80, 80)


def test_bad_positions_and_sizes_are_refused():
    for bad in ("middle", "xy:1.5,0", "xy:0.5", "top_right"):
        with pytest.raises(GeometryError):
            check_position(bad)
    with pytest.raises(GeometryError, match="does not fit"):
        place("center", 230, 56, C)
    with pytest.raises(GeometryError, match="does not fit"):
        place("top-left", 220, 56, C, margin=4)
