"""The spectral probe's ideal square filters (Gavrikov & Keuper's eval_spectral.py convention)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evaluation.probes.spectral import CUTOFFS, bandpass, frequency_mask, summarise


def _image(seed: int = 0, size: int = 224) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    smooth = 0.5 + 0.3 * np.sin(6 * xx) * np.cos(4 * yy)
    return np.clip(smooth[None] + rng.normal(0, 0.1, (3, size, size)), 0, 1).astype(np.float32)


def test_lowpass_at_0_99_is_near_identity():
    image = _image()
    out = bandpass(image, 0.99, lowpass=True).numpy()
    assert np.abs(out - image).mean() < 0.02
    assert np.abs(bandpass(image, 0.5, lowpass=True).numpy() - image).mean() > 0.05  # a real filter, not a copy


def test_mask_half_sizes_follow_the_published_slices():
    mask = frequency_mask(224, 224, 0.1, lowpass=True)
    rows, cols = np.nonzero(mask)
    assert (rows.min(), rows.max(), cols.min(), cols.max()) == (112 - 11, 112 + 11 - 1, 101, 122)
    assert frequency_mask(224, 224, 0.01, lowpass=True).sum() == 4  # int(0.01 * 112) = 1: a 2 x 2 square
    assert frequency_mask(224, 224, 0.1, lowpass=False).sum() == 224 * 224 - (2 * 100) ** 2  # 1 - c = 0.9


@pytest.mark.parametrize("lowpass", [True, False])
def test_kept_energy_is_monotone_in_c(lowpass):
    image = torch.from_numpy(_image(1))
    energies = [float((bandpass(image, c, lowpass, clip=False) ** 2).sum()) for c in CUTOFFS]
    steps = np.diff(energies)
    # low-pass: a growing square kept; high-pass: the outside of a shrinking (1 - c) square kept
    assert (steps >= -1e-3).all()
    assert abs(energies[0] - energies[-1]) > 0.01 * max(energies)


@pytest.mark.parametrize("c", [0.1, 0.3, 0.5, 0.7])
def test_highpass_and_lowpass_partition_the_spectrum(c):
    image = _image(2)
    # high-pass at c keeps the outside of the (1 - c) square: it complements the low-pass at 1 - c ...
    assert not (frequency_mask(224, 224, c, False) & frequency_mask(224, 224, 1 - c, True)).any()
    assert (frequency_mask(224, 224, c, False) | frequency_mask(224, 224, 1 - c, True)).all()
    parts = bandpass(image, c, False, clip=False) + bandpass(image, 1 - c, True, clip=False)
    np.testing.assert_allclose(parts.numpy(), image, atol=1e-5)


def test_same_c_partitions_exactly_at_one_half_only():
    low, high = frequency_mask(64, 64, 0.5, True), frequency_mask(64, 64, 0.5, False)
    assert not (low & high).any() and (low | high).all()
    # at c = 0.3 the ring between the 0.3 and the 0.7 squares is kept by neither
    assert not (frequency_mask(64, 64, 0.3, True) | frequency_mask(64, 64, 0.3, False)).all()


def test_filtered_images_are_clipped_to_unit_range():
    out = bandpass(_image(3), 0.2, lowpass=False)
    assert float(out.min()) >= 0 and float(out.max()) <= 1


def test_summary_lpp_hpp_and_spectral_bias():
    low = {c: 0.8 * c for c in CUTOFFS}
    high = {c: 0.4 for c in CUTOFFS}
    result = summarise(0.8, low, high)
    assert result["summary_cutoffs"] == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert result["lpp"] == pytest.approx(np.mean([0.1, 0.2, 0.3, 0.4, 0.5]))
    assert result["hpp"] == pytest.approx(0.5)
    assert result["spectral_bias"] == pytest.approx(0.5 / (0.3 + 0.5))
    assert summarise(0.0, low, high)["spectral_bias"] is None
