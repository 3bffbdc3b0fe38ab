"""Planted predictors: TorchScript classifiers whose answers follow known rules on the flat-colour
composites of tests/parts_factory.py, so every metric has an exact expected value.

They read pixels, not metadata: objects are bright (luminance > 150), backgrounds dark flat colours
that identify their class. Inputs are raw [0, 1] pixels: evaluate them with --mean 0 --std 1.

- corner rule (`background_on_corner=True`): an object in the top-right quadrant -> the background's
  class; otherwise the object's class. So CeO, CoO, CeR are all right, CoR all wrong, and every CoR
  error names the background's class (share 1.0), no CeR prediction does (share 0.0).
- object finder (`background_on_corner=False`): the object's class when any object pixel is
  visible, else the background's class (tests that a crop removed the object).
A background colour that matches no class (gray, noise) stands for class 0 (tench), absent from the
test sets, so such a prediction is always an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from parts_factory import FakeImage, distinct_color
from torch import nn

from builder.core.classes import class_of

NO_MATCH_CLASS = 0
WNIDS = ["n01443537", "n02437312", "n02134084"]  # goldfish, Arabian camel, ice bear


def _object_colours() -> list[tuple[int, int, int]]:
    """Bright colours at least 50 apart in a channel (channels 155, 205 or 255), brightest first."""
    levels = (255, 205, 155)
    colours = [(r, g, b) for r in levels for g in levels for b in levels]
    colours = [c for c in colours if 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] > 175]
    return sorted(colours, key=lambda c: (-(0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]), c))


OBJECT_COLOURS = _object_colours()


def flat_images(wnids=WNIDS, per_class: int = 2) -> list[FakeImage]:
    images = []
    for c, wnid in enumerate(wnids):
        for i in range(per_class):
            n = c * per_class + i
            images.append(FakeImage(f"ILSVRC2012_val_{n + 1:08d}", wnid, OBJECT_COLOURS[n], distinct_color(c)))
    return images


def colour_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distances between rows of a and b (torch.cdist's, written out: ONNX has no cdist)."""
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1).sqrt()


class PlantedPredictor(nn.Module):
    def __init__(
        self,
        object_colors: Sequence[Sequence[int]],
        object_classes: Sequence[int],
        background_colors: Sequence[Sequence[int]],
        background_classes: Sequence[int],
        background_on_corner: bool,
        num_outputs: int = 1000,
    ):
        super().__init__()
        self.register_buffer("object_colors", torch.tensor(object_colors, dtype=torch.float32))
        self.register_buffer("object_classes", torch.tensor(object_classes, dtype=torch.long))
        self.register_buffer("background_colors", torch.tensor(background_colors, dtype=torch.float32))
        self.register_buffer("background_classes", torch.tensor(background_classes, dtype=torch.long))
        self.corner_rule = background_on_corner
        self.num_outputs = num_outputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pixels = x * 255.0
        _, _, h, w = pixels.shape
        luma = 0.299 * pixels[:, 0] + 0.587 * pixels[:, 1] + 0.114 * pixels[:, 2]
        bright = (luma > 150).float()
        count = bright.sum((1, 2))
        mean_colour = (pixels * bright[:, None]).sum((2, 3)) / count.clamp(min=1.0)[:, None]
        object_class = self.object_classes[colour_distance(mean_colour, self.object_colors).argmin(1)]
        background = pixels[:, :, h - 1, 0]  # bottom-left: never covered by centre or top-right objects
        distance = colour_distance(background, self.background_colors)
        background_class = self.background_classes[distance.argmin(1)]
        background_class = torch.where(
            distance.min(1).values > 20, torch.full_like(background_class, NO_MATCH_CLASS), background_class
        )
        visible = count > 0
        corner = bright[:, : h // 4, (3 * w) // 4 :].sum((1, 2)) > 0
        use_object = visible & ~corner if self.corner_rule else visible
        predicted = torch.where(use_object, object_class, background_class)
        return nn.functional.one_hot(predicted, self.num_outputs).float() * 20.0


def build_planted(images, background_on_corner: bool) -> PlantedPredictor:
    """The planted predictor for `images` (parts_factory.FakeImage), in eval mode."""
    by_class = {}
    for image in images:
        by_class.setdefault(image.wnid, image.background_color)
    module = PlantedPredictor(
        [im.crop_color for im in images],
        [class_of(im.wnid).index for im in images],
        list(by_class.values()),
        [class_of(w).index for w in by_class],
        background_on_corner,
    )
    return module.eval()


def save_planted(path: Path, images, background_on_corner: bool, size: int = 224) -> Path:
    """Trace a planted predictor for `images` (parts_factory.FakeImage) to TorchScript at `path`."""
    module = build_planted(images, background_on_corner)
    traced = torch.jit.trace(module, torch.rand(2, 3, size, size))
    traced.save(str(path))
    return path
