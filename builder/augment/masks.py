"""Keep-masks: the Grad-CAM++ mask of the wrong prediction and the three controls of the same area.

- `cam`: keep = cam >= tau (the red and orange of the usual jet rendering at tau = 0.7).
- `random`: a blob mask with exactly the CAM mask's pixel count: white noise low-passed by a Gaussian
  (sigma = canvas / 16, seeded from (seed, key)) keeps its `n` highest pixels; ties are broken by
  raster order (a stable sort), so the count is exact, not a quantile's approximation.
- `shifted`: the CAM mask rolled (`np.roll`, wrapping round the edges) by a seeded offset drawn
  uniformly from [H/4, 3H/4] x [W/4, 3W/4], far enough to move it off the attended region.
- `none`: no mask; the whole image is regenerated (plain image-to-image at the same strength).

A CAM with no evidence (an all-zero map, e.g. from constant logits) keeps nothing: its mask has area
0, and so do its random and shifted controls; a map at or above tau everywhere keeps the whole
canvas (area 1), as do its controls. Both are ordinary recorded samples (`mask_area_fraction`).

The random and shifted draws depend only on (seed, source key, index), so the controls of one run
and the CAM variant share sampled images, prompts and generation seeds.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import gaussian_filter

from builder.core.errors import UsageError
from builder.core.rng import sample_rng

MASK_KINDS = ("cam", "random", "shifted", "none")


def check_mask_kind(kind: str) -> str:
    if kind not in MASK_KINDS:
        raise UsageError(f"--mask must be one of {', '.join(MASK_KINDS)}, got {kind!r}")
    return kind


def check_threshold(threshold: float) -> float:
    if not 0.0 < threshold <= 1.0:
        raise UsageError(f"--threshold must be in (0, 1] (the CAM is normalised to [0, 1]), got {threshold}")
    return float(threshold)


def resize_cam(cam: np.ndarray, height: int, width: int) -> np.ndarray:
    """A CAM at the classifier's input size, bilinearly resized to the canvas and clipped to [0, 1].
    A NaN value (a map with no usable gradient) counts as no evidence, 0: the mask keeps nothing there
    and the stored cam.png does not depend on how a platform casts NaN."""
    import cv2

    cam = np.nan_to_num(np.asarray(cam, dtype=np.float32), nan=0.0, posinf=1.0, neginf=0.0)
    if cam.shape != (height, width):
        cam = cv2.resize(cam, (width, height), interpolation=cv2.INTER_LINEAR)
    return np.clip(cam, 0.0, 1.0)


def cam_keep_mask(cam: np.ndarray, threshold: float) -> np.ndarray:
    return np.asarray(cam) >= threshold


def random_blob_mask(shape: tuple[int, int], count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` pixels of low-passed noise, the highest ones: blobs, with exactly `count` pixels kept."""
    height, width = shape
    if not 0 <= count <= height * width:
        raise ValueError(f"cannot keep {count} pixels of a {height}x{width} mask")
    noise = gaussian_filter(rng.standard_normal((height, width)), sigma=max(height, width) / 16, mode="wrap")
    order = np.argsort(-noise.ravel(), kind="stable")
    keep = np.zeros(height * width, dtype=bool)
    keep[order[:count]] = True
    return keep.reshape(height, width)


def shift_offset(shape: tuple[int, int], rng: np.random.Generator) -> tuple[int, int]:
    height, width = shape
    dy = int(rng.integers(height // 4, max(height // 4, 3 * height // 4) + 1))
    dx = int(rng.integers(width // 4, max(width // 4, 3 * width // 4) + 1))
    return dy, dx


def shifted_mask(keep: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    dy, dx = shift_offset(keep.shape, rng)
    return np.roll(keep, (dy, dx), axis=(0, 1))


def control_rng(seed: int, kind: str, source_key: str, index: int) -> np.random.Generator:
    return sample_rng(seed, f"scgs-mask:{kind}:{source_key}:{index}")


def sample_keep_mask(kind: str, cam_keep: np.ndarray, seed: int, source_key: str, index: int) -> np.ndarray | None:
    """The keep-mask of one generated image for mask `kind` (None for `none`: nothing is kept)."""
    if kind == "cam":
        return cam_keep.copy()
    if kind == "random":
        return random_blob_mask(cam_keep.shape, int(cam_keep.sum()), control_rng(seed, kind, source_key, index))
    if kind == "shifted":
        return shifted_mask(cam_keep, control_rng(seed, kind, source_key, index))
    if kind == "none":
        return None
    raise UsageError(f"unknown mask kind {kind!r}")
