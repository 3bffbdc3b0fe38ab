"""What SCGS needs of a classifier, whatever loaded it: the CLI builds one from `hsi train`
checkpoints or model specs (training.scgs_classifier) and hands it to the stage.

Labels are the source config's labels (0..K-1, the order of its class names); `output_index` maps
a label to the module output Grad-CAM++ targets (a 1000-way model's ImageNet index, say).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from builder.core.errors import InputError


class BrokenClassifier(InputError):
    """The classifier gives NaN or infinite outputs (a diverged or corrupted checkpoint)."""


def check_finite(values: np.ndarray, what: str) -> np.ndarray:
    if not np.isfinite(values).all():
        raise BrokenClassifier(
            f"the ERM model gives non-finite {what} (NaN or inf) on {int((~np.isfinite(values)).any(axis=1).sum())} "
            "images: its weights are broken (a diverged run?); pass a checkpoint that trained normally"
        )
    return values


class ScgsClassifier(Protocol):
    module: Any  # the torch.nn.Module Grad-CAM++ hooks into
    cam_layer: str  # the module name (named_modules) whose activations the CAM uses
    device: Any

    def preprocess(self, images: np.ndarray) -> Any:
        """uint8 N x H x W x 3 canvases -> the normalised N x 3 x h x w input on the device."""

    def logits(self, batch: Any) -> Any:
        """N x K logits over the config's labels."""

    def features(self, batch: Any) -> Any:
        """N x D pooled penultimate features."""

    def output_index(self, label: int) -> int:
        """The module output that stands for config label `label`."""

    def provenance(self) -> dict:
        """What identifies the model: spec, checkpoint name and sha256, preprocessing."""


def batched(items: Sequence, size: int) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def predict_labels(classifier: ScgsClassifier, images: np.ndarray, batch_size: int) -> np.ndarray:
    """Top-1 config label per image."""
    import torch

    out = []
    with torch.inference_mode():
        for chunk in batched(images, batch_size):
            logits = classifier.logits(classifier.preprocess(np.asarray(chunk))).float().cpu().numpy()
            out.append(check_finite(logits, "logits").argmax(1))
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def pooled_features(classifier: ScgsClassifier, images: np.ndarray, batch_size: int) -> np.ndarray:
    import torch

    out = []
    with torch.inference_mode():
        for chunk in batched(images, batch_size):
            features = classifier.features(classifier.preprocess(np.asarray(chunk))).float().cpu().numpy()
            out.append(check_finite(features.reshape(len(features), -1), "features"))
    return np.concatenate(out) if out else np.zeros((0, 1), np.float32)
