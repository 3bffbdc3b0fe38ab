"""Critical-band stimuli (Laplacian pyramid noise, RMS matching, clipping) and the channel fit."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.probes import critical_band as cb
from evaluation.probes.channel import channel_properties, find_thresholds, fit_channel, gaussian


def test_pyramid_levels_sum_back_to_the_noise():
    noise = np.random.default_rng(0).standard_normal((224, 224))
    levels = cb.pyramid_levels(noise)
    assert len(levels) == 7 and all(level.shape == (224, 224) for level in levels)
    np.testing.assert_allclose(sum(levels), noise, atol=1e-10)


def test_band_noise_is_rms_matched_to_the_finest_level_and_band_limited():
    noise = np.random.default_rng(1).standard_normal((224, 224)) * 0.08
    finest = cb.rms(cb.pyramid_levels(noise)[0])
    peaks = []
    for band in range(7):
        limited = cb.band_noise(noise, band)
        assert cb.rms(limited) == pytest.approx(finest, rel=1e-9)
        power = np.abs(np.fft.fftshift(np.fft.fft2(limited))) ** 2
        yy, xx = np.mgrid[-112:112, -112:112]
        radius = np.hypot(yy, xx)
        peaks.append(float((power * radius).sum() / power.sum()))  # mean frequency in cycles per image
    assert all(b > a for a, b in zip(peaks, peaks[1:]))  # band 0 coarsest ... band 6 finest
    assert peaks[0] < 7 and peaks[-1] > 56


def test_low_contrast_and_the_published_clipping_rule():
    gray = np.random.default_rng(2).integers(0, 256, (224, 224)).astype(np.uint8)
    image = cb.low_contrast(gray)
    assert image.mean() == pytest.approx(0.449)
    assert image.std() == pytest.approx(gray.std() / 255 * 0.2)
    rng = np.random.default_rng(3)
    for sd in cb.NOISE_SDS[1:]:
        for band in (0, 6):
            out = cb.stimulus(gray, sd, band, rng)
            assert out.dtype == np.float32 and out.min() >= 0 and out.max() <= 1
    # a pixel pushed below 0 moves to EPSILON - noise; one that would overshoot keeps its value, new noise
    img, noise = np.array([0.1, 0.9, 0.5]), np.array([-0.3, 0.2, 0.05])
    out = cb.keep_in_range(img, noise, 0.1, np.random.default_rng(0))
    np.testing.assert_allclose(out[:2], [cb.EPSILON, 1 - cb.EPSILON])
    assert out[2] == pytest.approx(0.55)
    strong = cb.keep_in_range(np.array([0.5]), np.array([-1.2]), 0.1, np.random.default_rng(0))
    assert 0 <= strong[0] <= 1 and strong[0] != pytest.approx(0.5 - 1.2 + 1.2 - cb.EPSILON)


def test_noise_free_stimulus_has_no_noise():
    gray = np.full((224, 224), 128, np.uint8)
    np.testing.assert_allclose(cb.stimulus(gray, 0.0, 3, np.random.default_rng(0)), 0.449, atol=1e-6)


def test_thresholds_scan_from_the_strongest_noise_down():
    # rows: noise SD 0, .02, .04, .08, .16; columns: 7 bands
    matrix = np.array(
        [
            [0.9] * 7,
            [0.8, 0.8, 0.8, 0.4, 0.8, 0.8, 0.8],
            [0.7, 0.7, 0.3, 0.2, 0.6, 0.7, 0.7],
            [0.6, 0.4, 0.2, 0.1, 0.3, 0.6, 0.6],
            [0.55, 0.2, 0.1, 0.1, 0.2, 0.4, 0.51],
        ]
    )
    assert find_thresholds(matrix).tolist() == [0, 2, 3, 4, 2, 1, 0]
    assert find_thresholds(np.full((5, 7), 0.1)).tolist() == [4] * 7  # none passes: 4, as published
    relative = np.array([[0.2] * 7, [0.15] * 7, [0.12] * 7, [0.05] * 7, [0.01] * 7])
    assert find_thresholds(relative, "absolute").tolist() == [4] * 7
    assert find_thresholds(relative, "relative").tolist() == [2] * 7  # 0.12 > 0.5 x 0.2
    with pytest.raises(ValueError):
        find_thresholds(relative, "median")


def test_gaussian_fit_regression_values():
    props = channel_properties(4.0, 4.5, 0.42)
    assert round(props["bandwidth_octaves"], 1) == 1.0 and props["bandwidth_octaves"] == pytest.approx(0.989, abs=1e-3)
    assert round(props["centre_frequency"], 1) == 39.6
    assert props["peak_noise_sensitivity"] == 1.0
    x = np.arange(7)
    exact = gaussian(x, 3.0, 3.2, 1.1)
    result = fit_channel(np.round(exact).astype(int))
    assert result["fit"]["mu"] == pytest.approx(3.2, abs=0.3) and 0 < result["fit"]["A"] <= 4
    assert result["degenerate"] == []


def test_degenerate_fits_are_reported():
    flat = fit_channel([2] * 7)
    assert flat["degenerate"] and any("same threshold" in r for r in flat["degenerate"])
    zero = fit_channel([0] * 7)
    assert any("lower bound" in r or "same threshold" in r for r in zero["degenerate"])
    single = fit_channel([1, 0, 0, 0, 0, 0, 0])
    assert single["fit"] is not None and any("only one band" in r for r in single["degenerate"])
    unfit = fit_channel([4, 0, 0, 0, 0, 0, 0])
    assert unfit["degenerate"]
    assert fit_channel([0, 0, 0, 0, 0, 1, 4])["degenerate"] == []  # a peak at the finest band is a channel
