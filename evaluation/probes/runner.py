"""What every probe shares: ImageNet val images after the probes' resize and centre crop, and a
model that turns float [0, 1] batches into probabilities over the 1000 ImageNet classes.

The model, its normalisation and its label space come from evaluation's own loader and
`Classifier`; the probes only hand it images that are already transformed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from builder.core.classes import class_of, imagenet_classes
from builder.core.errors import InputError
from builder.core.records import Issue
from builder.extract.images import decode_image
from builder.extract.sources import load_sources
from evaluation.model_formats.labels import resolve_label_space
from evaluation.model_formats.models import LoadedModel, Preprocessing, count_outputs
from evaluation.predicting.predict import Classifier, resolve_device

# Both published scripts resize the shorter side to 256 and centre-crop 224 before any filtering, for
# every model whatever its native input size: the critical band's cycles per image assume 224 pixels.
PROBE_SIZE = (224, 224)
PROBE_CROP_PCT = 224 / 256


class ProbeInputError(InputError, ValueError):
    """Probe inputs that cannot be used (no val images, a malformed stimulus folder)."""


def probe_bar(total: int, desc: str, progress: bool):
    """A probe's bar on stderr (a probe runs tens of conditions over every image: minutes)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="img", disable=not progress, file=sys.stderr)


@dataclass
class ValImages:
    ids: list[str]
    labels: np.ndarray  # ImageNet class index per image
    images: np.ndarray  # N x H x W x 3 uint8, after the probe's resize and centre crop
    errors: list[dict] = field(default_factory=list)


def probe_preprocessing(pre: Preprocessing, crop: bool = True) -> Preprocessing:
    """The model's own filter and normalisation at the published geometry: resize 256, centre crop
    224 (`crop`), or a 224 x 224 image as it is (the cue-conflict stimuli)."""
    geometry = f"resize 256, centre crop 224 ({PROBE_CROP_PCT:.4f})" if crop else "224 x 224, no crop"
    return replace(
        pre,
        input_size=PROBE_SIZE,
        crop_pct=PROBE_CROP_PCT if crop else None,
        source=f"{pre.source}; probe geometry: {geometry}",
    )


def load_val_images(
    root: Path,
    split: str,
    limit: int | None,
    pre: Preprocessing,
    boxes: Path | None = None,
    announce: Callable[[str], None] = print,
    progress: bool = False,
) -> ValImages:
    """The first `limit` usable images (sorted by id) of an ImageNet split, labels from the project's
    sources reader; an undecodable file is an error row, not a crash."""
    from PIL import Image

    from evaluation.predicting.data import prepare_image

    listing = load_sources(Path(root), split, boxes, announce=announce)
    records = listing.records[:limit] if limit else listing.records
    if not records:
        raise ProbeInputError(
            f"{root}: no usable {split} image (found {listing.images_found} files, {len(listing.issues)} issues)"
        )
    ids, labels, images, errors = [], [], [], []
    with probe_bar(len(records), f"{split} images", progress) as bar:
        for record in records:
            bar.update(1)
            try:
                rgb = decode_image(Path(record.path)).rgb
            except Exception as exc:  # ImageDecodeError and friends: a counted row
                row = Issue(record.image_id, "undecodable-image", str(exc), "probe", key=record.image_id)
                errors.append(row.sample_row())
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

    def __init__(
        self,
        loaded: LoadedModel,
        device: str = "auto",
        batch_size: int = 64,
        announce: Callable[[str], None] = print,
        progress: bool = False,
    ):
        wnids = tuple(c.wnid for c in imagenet_classes())
        outputs = count_outputs(loaded.module, loaded.preprocessing, loaded.spec)
        space = resolve_label_space(outputs, loaded.classes, wnids, "imagenet")
        self.classifier = Classifier(loaded, space, resolve_device(device), announce=announce)
        self.batch_size = batch_size
        self.spec, self.progress = loaded.spec, progress

    def bar(self, total: int, probe: str):
        """The bar of one probe of this model (hidden unless the model was made with progress)."""
        return probe_bar(total, f"{self.spec}: {probe}", self.progress)

    def probabilities(self, images) -> np.ndarray:
        """Softmax of float [0, 1] images (a torch tensor or array, N x 3 x H x W) over ImageNet."""
        import torch

        x = torch.as_tensor(images, dtype=torch.float32) * 255.0  # Classifier normalises 0-255 inputs
        scored = self.classifier.reference_probabilities(x)  # a zero-shot model: its reference prompt set
        full = np.zeros((len(scored), 1000), np.float32)
        full[:, self.classifier.class_index] = scored
        return full

    def accuracies(self, val: ValImages, conditions: dict, batch_size: int, probe: str = "probe") -> dict:
        """Top-1 accuracy of every condition (key -> transform of a float N x H x W x 3 [0, 1] chunk
        and its first image's index, to N x 3 x H x W). Images of several conditions share a forward
        pass, so a handful of images under 50 conditions costs a few passes, not 50. The bar of
        `probe` counts stimuli (an image under one condition), one update per forward pass."""
        correct = {key: 0 for key in conditions}
        pending: list[tuple[object, np.ndarray, np.ndarray]] = []  # (key, images, labels)

        with self.bar(len(conditions) * len(val.labels), probe) as bar:

            def flush():
                images = np.concatenate([item[1] for item in pending])
                hits = self.probabilities(images).argmax(1) == np.concatenate([item[2] for item in pending])
                offset = 0
                for key, chunk, _ in pending:
                    correct[key] += int(hits[offset : offset + len(chunk)].sum())
                    offset += len(chunk)
                pending.clear()
                bar.update(len(images))

            for key, transform in conditions.items():
                for start in range(0, len(val.labels), batch_size):
                    chunk = val.images[start : start + batch_size].astype(np.float32) / 255.0
                    pending.append((key, transform(chunk, start), val.labels[start : start + batch_size]))
                    if sum(len(item[2]) for item in pending) >= batch_size:
                        flush()
            if pending:
                flush()
        return {key: hits / len(val.labels) for key, hits in correct.items()}
