"""GradMix (arXiv 2505.12803) as a training augmentation (`hsi train --augment gradmix|random-box`).

Inside `training.loop.fit`'s step, the clean forward pass records the chosen layers (timm
`feature_info` names, default the last stage); their LayerCAM maps (activation x ReLU(d loss / d
activation), summed over channels, min-max normalised per layer and batch, upsampled and summed) come
from the clean training loss by `torch.autograd.grad`, leaving every `.grad` untouched (pytorch-grad-cam
would switch to eval mode and back-propagate a class score instead). A box centred on the map's
argmax, cut at the borders, with masked area a ~ U(0.1, 0.5) per batch (`--gradmix-area`), side
sqrt(a) * H, is filled and the masked view's cross-entropy (original labels) added to the clean loss:
`paper` (the paper's text) fills with another sample of the batch and weighs by the clipped box's
area fraction; `code` (the authors' code) fills with uniform noise and weighs by 1 - a. `random-box`
draws the centre uniformly (no map). Every draw comes from (seed, epoch, step), so runs are deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from builder.core.errors import UsageError

AUGMENTS = ("none", "gradmix", "random-box")
CONVENTIONS = ("paper", "code")


class GradMixError(UsageError, ValueError):
    """Bad GradMix options; the message says what to pass."""


@dataclass(frozen=True)
class GradMixOptions:
    augment: str = "none"
    layers: tuple[str, ...] | None = None  # feature_info module names; None: the last stage
    area: tuple[float, float] = (0.1, 0.5)
    convention: str = "paper"

    def __post_init__(self):
        if self.augment not in AUGMENTS:
            raise GradMixError(f"--augment must be one of {', '.join(AUGMENTS)}, got {self.augment!r}")
        if self.convention not in CONVENTIONS:
            raise GradMixError(f"--gradmix-convention must be paper or code, got {self.convention!r}")
        low, high = self.area
        if not 0 < low <= high < 1:
            raise GradMixError(f"--gradmix-area LOW,HIGH needs 0 < LOW <= HIGH < 1, got {self.area}")

    @property
    def active(self) -> bool:
        return self.augment != "none"

    def to_json(self) -> dict:
        data = asdict(self)
        data["layers"] = list(self.layers) if self.layers else None
        data["area"] = list(self.area)
        return data


def resolve_layers(module, layers) -> list[str]:
    """The chosen `feature_info` module names (default the last stage); refuses unknown names."""
    names = [info["module"] for info in module.feature_info]
    unknown = [n for n in layers or () if n not in names]
    if unknown:
        raise GradMixError(f"--gradmix-layers {unknown} are not among the model's feature_info modules {names}")
    return list(layers) if layers else [names[-1]]


@contextmanager
def recorded_outputs(module, names) -> Iterator[dict]:
    """Yields a dict name -> output, filled by forward hooks on the named submodules while inside."""
    store: dict = {}
    modules = dict(module.named_modules())
    handles = [modules[n].register_forward_hook(lambda _m, _i, out, n=n: store.__setitem__(n, out)) for n in names]
    try:
        yield store
    finally:
        for handle in handles:
            handle.remove()


def summed_map(activations, gradients, size):
    """Sum over layers of each layer's LayerCAM, min-max normalised over the batch (a constant map
    becomes zeros), bilinearly upsampled to `size` (H, W)."""
    import torch.nn.functional as F

    total = 0
    for act, grad in zip(activations, gradients, strict=True):
        cam = (act.float() * grad.float().clamp(min=0)).sum(1)
        cam = (cam - cam.min()) / (cam.max() - cam.min()).clamp(min=1e-12)
        total = total + F.interpolate(cam[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]
    return total


# fp16 gradients of a batch-mean loss w.r.t. a stage's activations sit near 1e-8, below fp16's smallest
# subnormal: taken of the loss times 2**24 they keep their digits; the min-max normalisation cancels it.
HALF_GRADIENT_SCALE = 2.0**24


def loss_maps(loss, activations, size):
    """Summed LayerCAM of the training `loss` w.r.t. the recorded activations (no parameter .grad); on
    float16 activations the loss is scaled by 2**24, 16 times less until every gradient is finite."""
    import torch

    scale = HALF_GRADIENT_SCALE if any(a.dtype == torch.float16 for a in activations) else 1.0
    while True:
        gradients = torch.autograd.grad(loss * scale if scale != 1.0 else loss, activations, retain_graph=True)
        if scale == 1.0 or all(bool(torch.isfinite(g).all()) for g in gradients):
            break
        scale = max(1.0, scale / 16)
    return summed_map([a.detach() for a in activations], [g.detach() for g in gradients], size).detach()


def sample_area(generator, area: tuple[float, float]) -> float:
    """The batch's masked area fraction a ~ U(low, high)."""
    import torch

    low, high = area
    return low + (high - low) * float(torch.rand((), generator=generator))


def box_side(area: float, height: int) -> int:
    return max(1, int(round(math.sqrt(area) * height)))


def argmax_centres(maps) -> list[tuple[int, int]]:
    """Per sample, the (row, column) of the summed map's maximum (the first one in raster order)."""
    width = maps.shape[-1]
    return [(int(i) // width, int(i) % width) for i in maps.flatten(1).argmax(1)]


def batch_boxes(centres, area: float, height: int, width: int) -> list[tuple[int, int, int, int]]:
    """(y0, y1, x0, x1) of each side x side box centred at (cy, cx), cut at the borders."""
    side = box_side(area, height)
    corners = [(cy - side // 2, cx - side // 2) for cy, cx in centres]
    return [(max(0, y0), min(height, y0 + side), max(0, x0), min(width, x0 + side)) for y0, x0 in corners]


def loss_weights(options: GradMixOptions, boxes, area: float, height: int, width: int) -> list[float]:
    """Per-sample weights of the mixed loss: the clipped box's area fraction (paper) or 1 - a (code)."""
    if options.convention == "paper":
        return [(y1 - y0) * (x1 - x0) / (height * width) for y0, y1, x0, x1 in boxes]
    return [1.0 - area] * len(boxes)


@dataclass
class MixedView:
    images: Any  # the masked batch
    weights: Any  # per-sample loss weights (tensor)
    boxes: list
    area: float


def mixed_view(options: GradMixOptions, x, centres, generator, mean, std) -> MixedView:
    """The masked batch for the given box centres: the area drawn first, then the fill (`paper`: another
    sample of the batch by a seeded permutation, resized to the box; `code`: uniform noise over 0-255)."""
    import torch
    import torch.nn.functional as F

    height, width = x.shape[-2:]
    area = sample_area(generator, options.area)
    boxes = batch_boxes(centres, area, height, width)
    mixed = x.clone()
    partner = torch.randperm(len(x), generator=generator).tolist() if options.convention == "paper" else []
    for i, (y0, y1, x0, x1) in enumerate(boxes):
        if partner:
            source = x[partner[i] : partner[i] + 1].float()
            patch = F.interpolate(source, size=(y1 - y0, x1 - x0), mode="bilinear", align_corners=False)[0]
        else:
            noise = torch.rand((x.shape[1], y1 - y0, x1 - x0), generator=generator) * 255
            patch = (noise.to(x.device) - mean[0]) / std[0]
        mixed[i, :, y0:y1, x0:x1] = patch.to(x.dtype)
    weights = torch.tensor(loss_weights(options, boxes, area, height, width), device=x.device)
    return MixedView(mixed, weights, boxes, area)


class Mixer:
    """GradMix or the random box inside `fit`'s step: `with mixer.recording(): forward`; then
    `loss + mixer.extra_loss(...)` before the backward pass."""

    def __init__(self, options: GradMixOptions, module, mean, std):
        self.options, self.module, self.mean, self.std = options, module, mean, std
        self.layers = resolve_layers(module, options.layers) if options.augment == "gradmix" else []
        self._store: dict = {}

    @contextmanager
    def recording(self) -> Iterator[None]:
        with recorded_outputs(self.module, self.layers) as store:
            self._store = store
            yield

    def centres(self, x, loss, generator) -> list[tuple[int, int]]:
        if self.options.augment == "random-box":
            import torch

            rows = torch.randint(0, x.shape[-2], (len(x),), generator=generator)
            cols = torch.randint(0, x.shape[-1], (len(x),), generator=generator)
            return [(int(r), int(c)) for r, c in zip(rows, cols, strict=True)]
        activations = [self._store[name] for name in self.layers]
        self._store = {}
        return argmax_centres(loss_maps(loss, activations, tuple(x.shape[-2:])))

    def extra_loss(self, net, x, y, loss, generator, autocast, label_smoothing: float = 0.0):
        """The weighted cross-entropy of the masked view with the original labels (per-sample weights)."""
        import torch.nn.functional as F

        centres = self.centres(x, loss, generator)
        view = mixed_view(self.options, x.detach(), centres, generator, self.mean, self.std)
        with autocast():
            per_sample = F.cross_entropy(net(view.images), y, reduction="none", label_smoothing=label_smoothing)
        return (view.weights * per_sample.float()).mean()


def step_generator(seed: int, epoch: int, step: int, rank: tuple = ()):
    """The step's draws; `rank` is ("rank", r) on a DDP rank (each its own boxes), () alone."""
    import torch

    from training.data import derived_seed

    return torch.Generator().manual_seed(derived_seed(seed, "gradmix", epoch, step, *rank))
