"""What every probe shares: ImageNet val images after the probes' resize and centre crop, and a
model that turns float [0, 1] batches into probabilities over the 1000 ImageNet classes.

The model, its normalisation and its label space come from evaluation's own loader and
`Classifier`; the probes only hand it images that are already transformed."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from builder.core.classes import class_of, imagenet_classes
from builder.core.errors import InputError
from builder.extract.images import decode_image
from builder.extract.sources import load_sources

from ..labels import resolve_label_space
from ..models import LoadedModel, Preprocessing, count_outputs
from ..predict import Classifier, resolve_device

# Both published scripts resize the shorter side to 256 and centre-crop 224 before any filtering.
PROBE_CROP_PCT = 224 / 256


class ProbeInputError(InputError, ValueError):
    """Probe inputs that cannot be used (no val images, a malformed stimulus folder)."""


@dataclass
class ValImages:
    ids: list[str]
    labels: np.ndarray  # ImageNet class index per image
    images: np.ndarray  # N x H x W x 3 uint8, after the probe's resize and centre crop
    errors: list[dict] = field(default_factory=list)


def probe_preprocessing(pre: Preprocessing) -> Preprocessing:
    """The model's own filter, input size and normalisation, with the 256 -> 224 resize-and-crop."""
    return replace(pre, crop_pct=PROBE_CROP_PCT, source=f"{pre.source}; resize-and-centre-crop {PROBE_CROP_PCT:.4f}")


def load_val_images(root: Path, split: str, limit: int | None, pre: Preprocessing, boxes: Path | None = None,
                    announce: Callable[[str], None] = print) -> ValImages:
    """The first `limit` usable images (sorted by id) of an ImageNet split, labels from the project's
    sources reader; an undecodable file is an error row, not a crash."""
    from PIL import Image

    from ..data import prepare_image

    listing = load_sources(Path(root), split, boxes, announce=announce)
    records = listing.records[:limit] if limit else listing.records
    if not records:
        raise ProbeInputError(f"{root}: no usable {split} image (found {listing.images_found} files, "
                              f"{len(listing.issues)} issues)")
    ids, labels, images, errors = [], [], [], []
    for record in records:
        try:
            rgb = decode_image(Path(record.path)).rgb
        except Exception as exc:  # ImageDecodeError and friends: a counted row
            errors.append({"key": record.image_id, "reason": "undecodable-image", "detail": str(exc)})
            continue
        ids.append(record.image_id)
        labels.append(class_of(record.wnid).index)
        images.append(prepare_image(Image.fromarray(rgb), pre))
    if not images:
        raise ProbeInputError(f"{root}: none of the {len(records)} {split} images could be decoded")
    return ValImages(ids, np.asarray(labels, np.int64), np.stack(images), errors)


class ProbeModel:
    """A loaded model on its device: float N x 3 x H x W images in [0, 1] -> N x 1000 probabilities
    indexed by ImageNet class (zero for classes the model does not score)."""

    def __init__(self, loaded: LoadedModel, device: str = "auto", batch_size: int = 64,
                 announce: Callable[[str], None] = print):
        wnids = tuple(c.wnid for c in imagenet_classes())
        space = resolve_label_space(count_outputs(loaded.module, loaded.preprocessing), loaded.classes, wnids, "imagenet")
        self.classifier = Classifier(loaded, space, resolve_device(device), announce=announce)
        self.batch_size = batch_size
        self.input_size = loaded.preprocessing.input_size

    def probabilities(self, images) -> np.ndarray:
        """Softmax of float [0, 1] images (a torch tensor or array, N x 3 x H x W) over ImageNet."""
        import torch

        x = torch.as_tensor(images, dtype=torch.float32) * 255.0  # Classifier normalises 0-255 inputs
        scored = self.classifier.probabilities(x)
        full = np.zeros((len(scored), 1000), np.float32)
        full[:, self.classifier.class_index] = scored
        return full

    def accuracy(self, batches: Iterator[tuple[np.ndarray, np.ndarray]]) -> float:
        """Top-1 accuracy over (images, labels) batches."""
        correct = total = 0
        for images, labels in batches:
            correct += int((self.probabilities(images).argmax(1) == labels).sum())
            total += len(labels)
        return correct / total if total else float("nan")


def batches_of(val: ValImages, batch_size: int, transform: Callable[[np.ndarray, int], np.ndarray]):
    """(transformed float images N x 3 x H x W, labels) per batch; transform gets a float
    N x H x W x 3 [0, 1] batch and the index of its first image."""
    for start in range(0, len(val.labels), batch_size):
        chunk = val.images[start:start + batch_size].astype(np.float32) / 255.0
        yield transform(chunk, start), val.labels[start:start + batch_size]
