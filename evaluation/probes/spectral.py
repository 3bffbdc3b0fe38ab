"""Spectral bias: accuracy on low-pass and high-pass filtered ImageNet val images.

Follows `code/eval_spectral.py` of Gavrikov & Keuper, "Can Biases in ImageNet Models Explain
Generalization?" (CVPR 2024; github.com/paulgavrikov/biases_vs_generalization), re-implemented here:
per channel of a [0, 1] image after resize 256 and centre crop 224, a centred 2-D FFT, an ideal square
mask whose half-sizes are int(c * (H // 2)) and int(c * (W // 2)) around the centre (H // 2, W // 2),
inverse FFT, real part clipped to [0, 1], then the model's normalisation. Low-pass keeps the inside
of the square; high-pass uses c := 1 - c and keeps the outside.

Where the published code is more precise than the issue's text, the code is followed:
- the half-sizes are int(c * (H // 2)) (the code's `int(cutoff * cy)` with cy = H // 2), which equals
  int(c * H / 2) for even sizes;
- the square spans rows cy - ry to cy + ry - 1 (a Python slice), so it is 2 * ry wide;
- because high-pass at c uses 1 - c, the high-pass at c and the low-pass at 1 - c are complements; the
  two filters at the *same* c partition the spectrum only at c = 0.5.
The summary (accuracy / clean accuracy, LPP and HPP as means over c in [0.1, 0.5], spectral bias =
HPP / (LPP + HPP)) is the paper's definition; the published script only logs accuracies.
"""

from __future__ import annotations

import numpy as np

CUTOFFS = (0.01, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99)
SUMMARY_RANGE = (0.1, 0.5)


def frequency_mask(height: int, width: int, cutoff: float, lowpass: bool) -> np.ndarray:
    """The 0/1 mask over the *centred* spectrum (after fftshift)."""
    if not 0 <= cutoff <= 1:
        raise ValueError(f"cutoff must be in [0, 1], got {cutoff}")
    c = cutoff if lowpass else 1 - cutoff
    cy, cx = height // 2, width // 2
    ry, rx = int(c * cy), int(c * cx)
    inside = np.zeros((height, width), bool)
    inside[cy - ry : cy + ry, cx - rx : cx + rx] = True
    return inside if lowpass else ~inside


def bandpass(images, cutoff: float, lowpass: bool, clip: bool = True):
    """Filter float images (torch tensor or array, ... x H x W, per channel) in [0, 1]."""
    import torch

    x = torch.as_tensor(images, dtype=torch.float32)
    mask = torch.from_numpy(frequency_mask(x.shape[-2], x.shape[-1], cutoff, lowpass))
    spectrum = torch.fft.fftshift(torch.fft.fft2(x), dim=(-2, -1))
    out = torch.fft.ifft2(torch.fft.ifftshift(spectrum * mask, dim=(-2, -1))).real
    return out.clamp(0, 1) if clip else out


def summarise(clean: float, lowpass: dict[float, float], highpass: dict[float, float]) -> dict:
    """Relative accuracies per cutoff, LPP, HPP and the spectral bias."""

    def relative(accuracies):
        return {c: (a / clean if clean > 0 else None) for c, a in accuracies.items()}

    low, high = relative(lowpass), relative(highpass)
    lo, hi = SUMMARY_RANGE
    in_range = [c for c in sorted(lowpass) if lo - 1e-9 <= c <= hi + 1e-9 and c in highpass]
    result = {
        "clean_accuracy": clean,
        "lowpass": [{"cutoff": c, "accuracy": lowpass[c], "relative": low[c]} for c in sorted(lowpass)],
        "highpass": [{"cutoff": c, "accuracy": highpass[c], "relative": high[c]} for c in sorted(highpass)],
        "summary_cutoffs": in_range,
        "lpp": None,
        "hpp": None,
        "spectral_bias": None,
        "notes": [],
    }
    if clean <= 0:
        result["notes"].append("clean accuracy is 0: relative accuracies and the spectral bias are undefined")
        return result
    lpp = float(np.mean([low[c] for c in in_range]))
    hpp = float(np.mean([high[c] for c in in_range]))
    result.update(lpp=lpp, hpp=hpp)
    if lpp + hpp > 0:
        result["spectral_bias"] = hpp / (lpp + hpp)
    else:
        result["notes"].append("LPP + HPP is 0: every filtered image was misclassified; the spectral bias is undefined")
    return result


def run_spectral(model, val, batch_size: int = 64, cutoffs=CUTOFFS) -> dict:
    """Accuracy of `model` (a ProbeModel) on `val` (ValImages) clean, low- and high-passed."""

    def to_chw(chunk, _start):
        return np.ascontiguousarray(chunk.transpose(0, 3, 1, 2))

    def filtered(c, lowpass):
        return lambda chunk, _start: bandpass(to_chw(chunk, 0), c, lowpass).numpy()

    conditions = {"clean": to_chw}
    conditions.update({(lowpass, c): filtered(c, lowpass) for lowpass in (True, False) for c in cutoffs})
    accuracy = model.accuracies(val, conditions, batch_size, "spectral bias")
    result = summarise(
        accuracy["clean"], {c: accuracy[(True, c)] for c in cutoffs}, {c: accuracy[(False, c)] for c in cutoffs}
    )
    result["images"] = len(val.labels)
    return result
