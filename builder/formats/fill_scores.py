"""No-reference scores of one inpainted background: how visibly the fill differs from the photo
around it, measured on the 224 x 224 canvas compose pastes objects onto.

All three compare the filled pixels (the part's fill mask, resized to the canvas) with a ring of the
photo's own pixels just outside them (every pixel outside within `RING_PIXELS`, Euclidean):

  texture  (mean |Laplacian| inside the fill + 0.5) / (mean |Laplacian| in the ring + 0.5), on grey
           levels 0-255. Under 1 the fill is smoother than its surroundings: a flat slab or a smear
           on textured ground scores near 0; a fill as busy as the ground scores about 1.
  seam     mean Sobel gradient magnitude on the fill's 1-px inner contour over that of the ring
           (+0.5 each). About 1 when the border is invisible, above 1 when an edge runs around it.
  step     the colour jump across the border: the distance between the mean RGB of the 3-px band
           just inside and the 3-px band just outside, over the ring's colour spread (the RMS of its
           per-channel standard deviations, +0.5). 0 when the colours meet.

  score    min(1, texture) * min(1, 1 / seam) / (1 + step): one number in [0, 1] for ranking and
           for `hsi compose --min-fill`; 1 is a fill these measures cannot tell from the photo.

A fill is called poor under `POOR_SCORE`, its texture low under `TEXTURE_LOW` and its seam high over
`SEAM_HIGH` (the thresholds the docs' tables count). A background with nothing filled has no scores
(None): it is the photo itself. One filled everywhere (no pixel of the photo left, or none within
the ring) scores 0 by definition: texture 0, seam 1, step 0, so every `--min-fill` leaves it out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

RING_PIXELS = 8
BAND_PIXELS = 3
TEXTURE_LOW = 0.3
SEAM_HIGH = 1.5
POOR_SCORE = 0.5
SCORE_NAMES = ("texture", "seam", "step", "score")
_EPS = 0.5


@dataclass(frozen=True)
class FillScores:
    texture: float
    seam: float
    step: float

    @property
    def score(self) -> float:
        return min(1.0, self.texture) * min(1.0, 1.0 / self.seam) / (1.0 + self.step)

    def to_json(self) -> dict[str, float]:
        return {name: round(float(getattr(self, name)), 4) for name in SCORE_NAMES}


def canvas_mask(mask: np.ndarray, size: int) -> np.ndarray:
    """A full-resolution fill mask at canvas scale: a canvas pixel counts as filled when any of the
    photo pixels it is averaged from was filled."""
    if mask.shape[:2] == (size, size):
        return mask.astype(bool)
    return cv2.resize(mask.astype(np.float32), (size, size), interpolation=cv2.INTER_AREA) > 0


def _band(mask: np.ndarray, pixels: int) -> tuple[np.ndarray, np.ndarray]:
    """(pixels of the mask within `pixels` of its border, pixels outside within `pixels` of it)."""
    inside = cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, 5)
    outside = cv2.distanceTransform((~mask).astype(np.uint8), cv2.DIST_L2, 5)
    return mask & (inside <= pixels), ~mask & (outside <= pixels)


def score_fill(canvas: np.ndarray, mask: np.ndarray) -> FillScores | None:
    """The scores of `canvas` (H x W x 3 uint8) filled inside `mask` (H x W bool, same size)."""
    if not mask.any():
        return None
    _, ring = _band(mask, RING_PIXELS)
    if not ring.any():  # all fill: nothing of the photo to compare with, the worst case
        return FillScores(texture=0.0, seam=1.0, step=0.0)
    grey = cv2.cvtColor(canvas, cv2.COLOR_RGB2GRAY).astype(np.float32)
    laplacian = np.abs(cv2.Laplacian(grey, cv2.CV_32F, ksize=3))
    texture = (float(laplacian[mask].mean()) + _EPS) / (float(laplacian[ring].mean()) + _EPS)
    gradient = cv2.magnitude(cv2.Sobel(grey, cv2.CV_32F, 1, 0, ksize=3), cv2.Sobel(grey, cv2.CV_32F, 0, 1, ksize=3))
    contour = mask & ~(cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8), borderValue=1) > 0)
    seam = (float(gradient[contour].mean()) + _EPS) / (float(gradient[ring].mean()) + _EPS)
    band_in, band_out = _band(mask, BAND_PIXELS)
    colour = canvas.astype(np.float32)
    jump = float(np.linalg.norm(colour[band_in].mean(axis=0) - colour[band_out].mean(axis=0)))
    spread = float(np.sqrt(np.mean(colour[ring].std(axis=0) ** 2)))
    return FillScores(texture=texture, seam=seam, step=jump / (spread + _EPS))


def _quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    median, p10, p90 = np.percentile(np.asarray(values, dtype=np.float64), [50, 10, 90])
    return {"median": round(float(median), 4), "p10": round(float(p10), 4), "p90": round(float(p90), 4)}


def summarise_fill_scores(rows: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """The manifest's summary of many parts' `fill_scores` (None for a part with nothing filled)."""
    kept: list[Mapping[str, Any]] = []
    unscored = 0
    for row in rows:
        if row is None:
            unscored += 1
        else:
            kept.append(row)
    summary: dict[str, Any] = {"scored": len(kept), "poor_score": POOR_SCORE}
    for name in SCORE_NAMES:
        summary[name] = _quantiles([float(row[name]) for row in kept])
    summary["share_below_poor_score"] = (
        round(sum(float(row["score"]) < POOR_SCORE for row in kept) / len(kept), 4) if kept else None
    )
    summary["unscored"] = unscored
    return summary


def check_fill_scores(value: Any, where: str) -> dict[str, float] | None:
    """A part json's `fill_scores` (None, or an object of the four finite, non-negative numbers);
    ValueError naming `where` otherwise."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or sorted(value) != sorted(SCORE_NAMES):
        raise ValueError(
            f"{where}: fill_scores must be null or an object of {', '.join(SCORE_NAMES)}, got {value!r:.80}"
        )
    for name in SCORE_NAMES:
        number = value[name]
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number) or number < 0:
            raise ValueError(f"{where}: fill_scores.{name} must be a finite number of 0 or more, got {number!r:.40}")
    return {name: float(value[name]) for name in SCORE_NAMES}
