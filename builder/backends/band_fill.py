"""A texture fill for holes that leave only a band of the frame known (the object fills the photo).

patchmatch-cython's `inpaint_pyramid` runs down to a level of about `patch_size` pixels, where a
pixel counts as known only if its whole block was; a band thinner than that block vanishes, and the
library refuses ("mask covers the entire image"). Here the pyramid stops at the coarsest level
where the band still holds `MIN_SOURCE_PATCHES` complete patches; that level's hole starts from a
smooth Telea fill, and PatchMatch (the library's solver) rebuilds every level from the band's
patches, each level's hole starting from the finer-resized fill of the one below. The smooth start
keeps the colours of the band where they are; the patches bring its texture.

Deterministic: the solver is seeded, and the resizes and Telea are OpenCV's fixed arithmetic.
"""

from __future__ import annotations

import cv2
import numpy as np

# complete source patches a level needs to be matched at (fewer: the pyramid stops above it)
MIN_SOURCE_PATCHES = 64


def band_levels(mask: np.ndarray, patch_size: int) -> list[tuple[int, int, np.ndarray]]:
    """(height, width, mask) of each pyramid level the known band survives, finest first. A level
    halves the one before; a pixel is in its hole when any pixel of its block is; the pyramid stops
    before a level with under `MIN_SOURCE_PATCHES` complete known patches or a side under two
    patches. The full-size level is always there."""
    height, width = mask.shape
    kernel = np.ones((patch_size, patch_size), np.uint8)
    levels = [(height, width, mask)]
    scale = 2
    while min(height, width) // scale >= 2 * patch_size:
        level_h, level_w = height // scale, width // scale
        level_mask = cv2.resize(mask.astype(np.float32), (level_w, level_h), interpolation=cv2.INTER_AREA) > 0
        known = (~level_mask).astype(np.uint8)
        patches = cv2.erode(known, kernel, borderType=cv2.BORDER_CONSTANT, borderValue=0)
        if int(patches.sum()) < MIN_SOURCE_PATCHES:
            break
        levels.append((level_h, level_w, level_mask))
        scale *= 2
    return levels


def fill_from_band(
    image: np.ndarray, mask: np.ndarray, patch_size: int, seed: int, telea_radius: int, blend: bool
) -> np.ndarray | None:
    """`image` (H x W x 3 uint8) with `mask`'s pixels filled from the known pixels' patches, or None
    when no pixel is known. `blend`: soften the rim as the library's `poisson_blend` does."""
    from patchmatch_cython import CythonSolver
    from patchmatch_cython.imageops import poisson_blend

    if mask.all():
        return None
    if not mask.any():
        return image.copy()
    previous: np.ndarray | None = None
    levels = band_levels(mask, patch_size)
    for step, (level_h, level_w, level_mask) in enumerate(reversed(levels)):
        pixels = image if (level_h, level_w) == mask.shape else _shrink(image, level_w, level_h)
        if previous is None:  # the coarsest level starts from a smooth fill of its band
            start = cv2.inpaint(pixels, level_mask.astype(np.uint8) * 255, telea_radius, cv2.INPAINT_TELEA)
        else:
            start = pixels.copy()
            grown = cv2.resize(previous, (level_w, level_h), interpolation=cv2.INTER_LINEAR)
            start[level_mask] = grown[level_mask]
        solver = CythonSolver(start.astype(np.float32), level_mask, patch_size)
        filled = solver(iterations=step + 3, randomize_nnf=True, nnf=None, seed=seed)
        previous = np.clip(np.rint(filled), 0, 255).astype(np.uint8)
    assert previous is not None
    result = image.astype(np.float32)
    result[mask] = previous[mask]
    if blend:
        result = poisson_blend(image, mask, result)
    return np.clip(np.rint(result), 0, 255).astype(np.uint8)


def _shrink(image: np.ndarray, width: int, height: int) -> np.ndarray:
    return cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)
