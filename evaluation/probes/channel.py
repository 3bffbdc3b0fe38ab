"""The critical band's channel: noise thresholds per band, a Gaussian fitted to them, and the
channel's bandwidth, centre frequency and peak noise sensitivity.

As in `find_thresholds`, `fit_gaussian` and `channel_props` of Subramanian et al.'s analysis code
(github.com/ajaysub110/critical-band-masking, analysis/analysis.py), re-implemented: per band, scan
the noise levels from the highest down and stop at the first whose accuracy exceeds the criterion;
the threshold is how many levels were scanned past (0 = even the strongest noise is tolerated, 4 when
none passes, as their loop leaves it). A * exp(-(x - mu)^2 / (2 sigma^2)) is fitted over band indices
0-6 with scipy's curve_fit, p0 = [1, 0, 1], A bounded to [0, 4]; bandwidth = 2 sqrt(ln 4) |sigma|
octaves, centre frequency = 1.75 * 2^mu cycles per image, peak noise sensitivity = 2^(A - 4).
"""

from __future__ import annotations

import warnings

import numpy as np

CRITERIA = ("absolute", "relative")
CRITERION_LEVEL = 0.5
BASE_FREQUENCY = 1.75
A_BOUNDS = (0.0, 4.0)
PROPERTIES = ("bandwidth_octaves", "centre_frequency", "peak_noise_sensitivity")


def find_thresholds(matrix: np.ndarray, criterion: str = "absolute", level: float = CRITERION_LEVEL) -> np.ndarray:
    """Threshold index (0-4) per band of an accuracy matrix (noise levels x bands, accuracies in
    [0, 1], row 0 noise-free). `relative`: the criterion is `level` times the noise-free accuracy."""
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {', '.join(CRITERIA)}")
    matrix = np.asarray(matrix, dtype=float)
    levels, bands = matrix.shape
    thresholds = np.zeros(bands, np.int64)
    for band in range(bands):
        bar = level * matrix[0, band] if criterion == "relative" else level
        scanned = 0
        for scanned in range(levels):
            if matrix[levels - 1 - scanned, band] > bar:
                break
        thresholds[band] = scanned
    return thresholds


def gaussian(x, a, mu, sigma):
    return a * np.exp(-((x - mu) ** 2) / (2.0 * sigma**2))


def channel_properties(a: float, mu: float, sigma: float) -> dict:
    return {
        "bandwidth_octaves": float(2 * np.sqrt(np.log(4)) * abs(sigma)),
        "centre_frequency": float(BASE_FREQUENCY * 2**mu),
        "peak_noise_sensitivity": float(2 ** (a - 4)),
    }


def degeneracies(thresholds: np.ndarray, a: float, mu: float, sigma: float) -> list[str]:
    """Why a fitted channel should not be read as a channel (empty when it can)."""
    bands = len(thresholds)
    reasons = []
    if len(set(thresholds.tolist())) == 1:
        reasons.append(f"every band has the same threshold ({int(thresholds[0])}): there is no peak to fit")
    if int((thresholds > 0).sum()) == 1:
        reasons.append("only one band has a non-zero threshold: the channel's width is not determined")
    if a <= A_BOUNDS[0] + 1e-6:
        reasons.append("the amplitude sits at its lower bound 0: no band is more sensitive than another")
    if not -0.5 <= mu <= bands - 0.5:
        reasons.append(f"the peak (mu = {mu:.2f}) lies outside the measured bands 0-{bands - 1}")
    bandwidth = 2 * np.sqrt(np.log(4)) * abs(sigma)
    if bandwidth > bands:
        reasons.append(f"the bandwidth ({bandwidth:.1f} octaves) is wider than the {bands} octaves measured")
    if bandwidth < 0.1:
        reasons.append(f"the bandwidth ({bandwidth:.3f} octaves) is narrower than one band can resolve")
    return reasons


def fit_channel(thresholds) -> dict:
    """The Gaussian fit and the channel's properties; `degenerate` lists why a fit is not a channel."""
    from scipy.optimize import OptimizeWarning, curve_fit

    thresholds = np.asarray(thresholds, dtype=np.int64)
    x = np.arange(len(thresholds), dtype=float)
    result: dict = {"thresholds": thresholds.tolist(), "fit": None, "degenerate": []}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            (a, mu, sigma), _ = curve_fit(
                gaussian,
                x,
                thresholds.astype(float),
                p0=[1.0, 0.0, 1.0],
                bounds=((A_BOUNDS[0], -np.inf, -np.inf), (A_BOUNDS[1], np.inf, np.inf)),
            )
    except (RuntimeError, ValueError) as exc:
        result["degenerate"] = [f"the Gaussian fit did not converge: {exc}"]
        return {**result, **dict.fromkeys(PROPERTIES)}
    result["fit"] = {"A": float(a), "mu": float(mu), "sigma": float(sigma)}
    result.update(channel_properties(a, mu, sigma))
    result["degenerate"] = degeneracies(thresholds, float(a), float(mu), float(sigma))
    if result["degenerate"]:  # the fitted parameters stay in `fit`; no channel figure is given for them
        result.update(dict.fromkeys(PROPERTIES))
    return result


def degenerate_cause(matrix: np.ndarray, thresholds, criterion: str, level: float) -> tuple[str, str | None]:
    """Why the thresholds leave nothing to fit, in the matrix's own numbers, and what to try (or None)."""
    from .critical_band import NOISE_SDS

    matrix = np.asarray(matrix, dtype=float)
    thresholds = np.asarray(thresholds)
    clean = float(matrix[0].max())
    if criterion == "absolute" and clean <= level:
        return (
            f"the noise-free accuracy ({clean:.2f}) is not above the absolute criterion ({level:.0%}): even "
            "without noise no band passes, so the thresholds say nothing about the noise",
            f"pass --criterion relative (a band passes above {level:.0%} of its noise-free accuracy), or probe a "
            "model and images it classifies better than that",
        )
    if clean == 0:
        return (
            "the model classifies none of the images correctly even without noise",
            "check the model's weights and preprocessing, or probe more images (--limit)",
        )
    if not thresholds.any():
        return (
            f"every band passes even at the strongest noise (SD {NOISE_SDS[-1]}): the noise never brings the "
            "accuracy down to the criterion",
            "a higher --criterion-level"
            if criterion == "relative"
            else "pass --criterion relative, or a higher --criterion-level",
        )
    return ("the thresholds per band have no single peak a Gaussian can describe", None)


def summarise(matrix: np.ndarray, criterion: str = "absolute", level: float = CRITERION_LEVEL) -> dict:
    from .critical_band import BAND_CENTRES, NOISE_SDS

    thresholds = find_thresholds(matrix, criterion, level)
    result = {
        "noise_sds": list(NOISE_SDS),
        "band_centres": list(BAND_CENTRES),
        "accuracy": np.asarray(matrix, dtype=float).round(6).tolist(),
        "criterion": {"kind": criterion, "level": level},
        **fit_channel(thresholds),
    }
    if result["degenerate"]:  # only then: a channel's probes.json stays as it was
        result["cause"], result["suggestion"] = degenerate_cause(matrix, thresholds, criterion, level)
    return result
