"""Critical-band masking: accuracy on low-contrast grayscale images with octave-band Gaussian noise.

Re-implements the stimulus of Subramanian et al., "Spatial-frequency channels, shape bias, and
adversarial robustness" (NeurIPS 2023), as published in `solomon_filter` of their code
(github.com/ajaysub110/critical-band-masking) and reused by Gavrikov & Keuper's
`code/eval_criticalband.py` (github.com/paulgavrikov/biases_vs_generalization):

- the image after resize 256 and centre crop 224, converted to grayscale (PIL "L"), scaled to [0, 1],
  its histogram narrowed to contrast 0.2 around its own mean and shifted to mean 0.449;
- Gaussian noise of SD in NOISE_SDS, band-limited by reconstructing one level of a 7-level Laplacian
  pyramid of the noise (pyrtools), rescaled to the RMS of the finest level; band k (0-6) is pyramid
  level 6 - k, centred at 1.75 * 2**k cycles per image;
- out-of-range pixels handled as the published code does: a pixel whose noisy value is below 0 is set
  to EPSILON - noise (above 1: 1 - EPSILON - noise); when that overshoots the other bound, the pixel
  keeps its value and its noise is redrawn from N(0, SD) until the sum is in [0, 1];
- the gray image repeated on 3 channels, then the model's normalisation.
The published loop visits pixels one by one; pixels do not interact, so the vectorised form below is
the same rule (only the order of the redrawn random numbers differs).
"""

from __future__ import annotations

import zlib

import numpy as np

NOISE_SDS = (0.0, 0.02, 0.04, 0.08, 0.16)
N_BANDS = 7
BAND_CENTRES = tuple(1.75 * 2**k for k in range(N_BANDS))  # cycles per image: 1.75 ... 112
CONTRAST = 0.2
GRAY_MEAN = 0.449
EPSILON = 0.1


def rms(image: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(image))))


def laplacian_pyramid(noise: np.ndarray):
    try:
        import pyrtools as pt
    except ImportError:
        from .runner import ProbeInputError

        raise ProbeInputError(
            "the critical-band probe needs pyrtools: pip install 'pyrtools==1.1.1' (part of the toolkit's eval extra)"
        ) from None

    pyramid = pt.pyramids.LaplacianPyramid(noise, height=N_BANDS)
    if pyramid.num_scales != N_BANDS:
        raise ValueError(f"a {noise.shape} image has {pyramid.num_scales} pyramid levels, not {N_BANDS}")
    return pyramid


def pyramid_levels(noise: np.ndarray) -> list[np.ndarray]:
    """Each level of a Laplacian pyramid of `noise` reconstructed alone at full size (level 0 the
    finest); linear, so the levels sum back to `noise`."""
    pyramid = laplacian_pyramid(noise)
    return [pyramid.recon_pyr(levels=level) for level in range(N_BANDS)]


def band_noise(noise: np.ndarray, band: int) -> np.ndarray:
    """The noise limited to band `band` (0 = 1.75 c/img), at the RMS of the finest level."""
    pyramid = laplacian_pyramid(noise)
    limited = pyramid.recon_pyr(levels=N_BANDS - 1 - band)
    return limited * rms(pyramid.recon_pyr(levels=0)) / rms(limited)


def low_contrast(gray_uint8: np.ndarray) -> np.ndarray:
    image = gray_uint8.astype(np.float64) / 255.0
    return (image - image.mean()) * CONTRAST + GRAY_MEAN


def keep_in_range(image: np.ndarray, noise: np.ndarray, sd: float, rng: np.random.Generator) -> np.ndarray:
    """The published out-of-range rule (see the module docstring); returns image + noise in [0, 1]."""
    image, noise = image.copy(), noise.copy()
    noisy = image + noise
    below, above = noisy < 0, noisy > 1
    shifted = np.where(below, EPSILON - noise, 1 - EPSILON - noise)
    overshoot = (below & (shifted > 1)) | (above & (shifted < 0))
    fixable = (below | above) & ~overshoot
    image[fixable] = shifted[fixable]
    redraw = overshoot.copy()
    while redraw.any():
        noise[redraw] = rng.standard_normal(int(redraw.sum())) * sd
        total = image + noise
        redraw &= (total < 0) | (total > 1)
    out = image + noise
    return np.clip(out, 0.0, 1.0)  # rounding only: every pixel is in range by construction


def stimulus(gray_uint8: np.ndarray, sd: float, band: int, rng: np.random.Generator) -> np.ndarray:
    """One critical-band stimulus, H x W float32 in [0, 1]."""
    image = low_contrast(gray_uint8)
    if sd == 0:
        return image.astype(np.float32)
    noise = band_noise(rng.standard_normal(image.shape) * sd, band)
    return keep_in_range(image, noise, sd, rng).astype(np.float32)


def _rng(seed: int, image_index: int, sd: float, band: int) -> np.random.Generator:
    return np.random.default_rng([seed, image_index, zlib.crc32(f"{sd}:{band}".encode())])


def accuracy_matrix(model, val, batch_size: int = 64, seed: int = 0) -> np.ndarray:
    """Top-1 accuracy, NOISE_SDS x bands; the noise-free row is measured once and repeated, as the
    published script evaluates SD 0 only once."""
    from PIL import Image

    gray = np.stack([np.asarray(Image.fromarray(im).convert("L")) for im in val.images])

    def condition(sd, band):
        def transform(chunk, start):
            planes = [stimulus(gray[start + i], sd, band, _rng(seed, start + i, sd, band)) for i in range(len(chunk))]
            return np.repeat(np.stack(planes)[:, None], 3, axis=1)

        return transform

    conditions = {(0, 0): condition(0.0, 0)}
    conditions.update(
        {(row, band): condition(sd, band) for row, sd in enumerate(NOISE_SDS) if row for band in range(N_BANDS)}
    )
    accuracy = model.accuracies(val, conditions, batch_size, "critical band")
    matrix = np.zeros((len(NOISE_SDS), N_BANDS))
    matrix[0, :] = accuracy[(0, 0)]
    for (row, band), value in accuracy.items():
        if row:
            matrix[row, band] = value
    return matrix
