"""GradMix as a training augmentation (`hsi train --augment gradmix|random-box`).

GradMix (arXiv 2505.12803) masks, during training, the region the model being trained relies on
most and adds the loss of that masked view, so the model must learn other features. Here it plugs
into the existing training step of `training.loop.fit`: the clean forward pass records the
activations of the chosen layers, the maps come from the clean loss, and the mixed view's loss is
added to the clean loss before the step's single backward pass.

Maps (LayerCAM): per chosen layer, activation x ReLU(d loss / d activation) summed over channels,
min-max normalised over the batch (one minimum and one maximum per layer and batch), bilinearly
upsampled to the input and summed over layers. The layers are the timm model's `feature_info`
module names (the output of a stage is the output of its last block); default the last stage.
The gradients are those of the current batch's training loss, taken with `torch.autograd.grad` on
the hooked activations, so the map pass leaves every parameter's `.grad` untouched.

The `grad-cam` package (pytorch-grad-cam) is not used: its CAM classes put the model in eval mode
(BatchNorm statistics and dropout differ from the training step) and back-propagate a class score
target rather than the training loss, and they run their own forward and backward passes; here the
map must come from the training loss of the training forward pass that the step already made.

Box: centred on the argmax of the summed map, clipped at the image borders (a box that crosses a
border is cut, not moved). The masked area fraction a = 1 - lambda, lambda ~ U(0.5, 0.9) drawn once
per batch, i.e. a ~ U(0.1, 0.5) (`--gradmix-area LOW,HIGH` gives a's range); side = sqrt(a) * H.
Two conventions, both options (`--gradmix-convention`):
- `paper` (default; the paper's text, arXiv 2505.12803): the box is filled with another sample of
  the batch (a seeded permutation), resized to the box, and the mixed view's loss is weighted by
  gamma^2, the masked area fraction (here per sample, the clipped box's true area over H x W).
- `code` (the code published under the authors' name): the box is filled with uniform noise over the
  pixel range, and the mixed loss is weighted by the kept fraction 1 - a, with a the area drawn
  before clipping (the same weight for the whole batch).
In both, the mixed loss is cross-entropy with the original label, added to the clean loss.

Control (`--augment random-box`): the same area distribution, fill and weight, with the box's centre
drawn uniformly over the image; no map pass. Every draw comes from a torch Generator seeded per step
from (run seed, epoch, step), so a run is deterministic per seed.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass

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


def stage_names(module) -> list[str]:
    return [info["module"] for info in module.feature_info]


def resolve_layers(module, layers) -> list[str]:
    """The chosen `feature_info` module names (default the last stage); refuses unknown names."""
    names = stage_names(module)
    if not layers:
        return [names[-1]]
    unknown = [n for n in layers if n not in names]
    if unknown:
        raise GradMixError(f"--gradmix-layers {unknown} are not among the model's feature_info modules {names}")
    return list(layers)


@contextmanager
def recorded_outputs(module, names):
    """Yields a dict name -> output, filled by forward hooks on the named submodules while inside."""
    store, handles = {}, []
    modules = dict(module.named_modules())
    for name in names:
        handles.append(modules[name].register_forward_hook(lambda _m, _i, out, n=name: store.__setitem__(n, out)))
    try:
        yield store
    finally:
        for handle in handles:
            handle.remove()


def layer_cam(activation, gradient):
    """B x h x w: activation x ReLU(gradient), summed over channels."""
    return (activation * gradient.clamp(min=0)).sum(1)


def minmax_batch(maps):
    """Min-max normalised over the whole batch (one min, one max); a constant map becomes zeros."""
    low, high = maps.min(), maps.max()
    return (maps - low) / (high - low).clamp(min=1e-12)


def summed_map(activations, gradients, size):
    """Sum over layers of each layer's normalised LayerCAM, bilinearly upsampled to `size` (H, W)."""
    import torch.nn.functional as F

    total = 0
    for act, grad in zip(activations, gradients, strict=True):
        cam = minmax_batch(layer_cam(act.float(), grad.float()))
        total = total + F.interpolate(cam[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]
    return total


# fp16 gradients of a batch-mean loss w.r.t. a stage's activations sit near 1e-8, below fp16's
# smallest subnormal (6e-8): taken of the loss times 2**24 they keep their digits. Each layer's
# LayerCAM is min-max normalised over the batch, so a power-of-two scale cancels (as GradScaler's does).
HALF_GRADIENT_SCALE = 2.0**24


def activation_gradients(loss, activations) -> list:
    """d loss / d activations (no parameter .grad), scaled where the activations are float16 so
    that none underflows: 2**24 first, 16 times smaller until every gradient is finite."""
    import torch

    scale = HALF_GRADIENT_SCALE if any(a.dtype == torch.float16 for a in activations) else 1.0
    while True:
        gradients = torch.autograd.grad(loss * scale if scale != 1.0 else loss, activations, retain_graph=True)
        if scale == 1.0 or all(bool(torch.isfinite(g).all()) for g in gradients):
            return [g.detach() for g in gradients]
        scale = max(1.0, scale / 16)


def loss_maps(loss, activations, size):
    """Summed LayerCAM of the training `loss` w.r.t. the recorded activations (no parameter .grad)."""
    gradients = activation_gradients(loss, activations)
    return summed_map([a.detach() for a in activations], gradients, size).detach()


def sample_area(generator, area: tuple[float, float]) -> float:
    """The batch's masked area fraction a ~ U(low, high)."""
    import torch

    low, high = area
    return low + (high - low) * float(torch.rand((), generator=generator))


def box_side(area: float, height: int) -> int:
    return max(1, int(round(math.sqrt(area) * height)))


def clipped_box(cy: int, cx: int, side: int, height: int, width: int) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1) of a side x side box centred at (cy, cx), cut at the borders."""
    y0, x0 = cy - side // 2, cx - side // 2
    return max(0, y0), min(height, y0 + side), max(0, x0), min(width, x0 + side)


def argmax_centres(maps) -> list[tuple[int, int]]:
    """Per sample, the (row, column) of the summed map's maximum (the first one in raster order)."""
    flat = maps.flatten(1).argmax(1)
    width = maps.shape[-1]
    return [(int(i) // width, int(i) % width) for i in flat]


def random_centres(count: int, height: int, width: int, generator) -> list[tuple[int, int]]:
    import torch

    rows = torch.randint(0, height, (count,), generator=generator)
    cols = torch.randint(0, width, (count,), generator=generator)
    return [(int(r), int(c)) for r, c in zip(rows, cols, strict=True)]


def batch_boxes(centres, area: float, height: int, width: int) -> list[tuple[int, int, int, int]]:
    side = box_side(area, height)
    return [clipped_box(cy, cx, side, height, width) for cy, cx in centres]


def masked_fractions(boxes, height: int, width: int) -> list[float]:
    """gamma^2 per sample: the clipped box's area over the image's."""
    return [(y1 - y0) * (x1 - x0) / (height * width) for y0, y1, x0, x1 in boxes]


def fill_with_partner(x, boxes, generator):
    """Each box filled with another sample of the batch (seeded permutation), resized to the box."""
    import torch
    import torch.nn.functional as F

    partner = torch.randperm(len(x), generator=generator).tolist()
    mixed = x.clone()
    for i, (y0, y1, x0, x1) in enumerate(boxes):
        patch = F.interpolate(
            x[partner[i] : partner[i] + 1].float(), size=(y1 - y0, x1 - x0), mode="bilinear", align_corners=False
        )
        mixed[i, :, y0:y1, x0:x1] = patch[0].to(x.dtype)
    return mixed


def fill_with_noise(x, boxes, generator, mean, std):
    """Each box filled with uniform noise over the pixel range [0, 255], normalised like the input."""
    import torch

    mixed = x.clone()
    for i, (y0, y1, x0, x1) in enumerate(boxes):
        noise = torch.rand((x.shape[1], y1 - y0, x1 - x0), generator=generator) * 255
        mixed[i, :, y0:y1, x0:x1] = ((noise.to(x.device) - mean[0]) / std[0]).to(x.dtype)
    return mixed


def loss_weights(options: GradMixOptions, boxes, area: float, height: int, width: int) -> list[float]:
    """Per-sample weights of the mixed loss: gamma^2 (paper) or the kept fraction 1 - a before clipping (code)."""
    if options.convention == "paper":
        return masked_fractions(boxes, height, width)
    return [1.0 - area] * len(boxes)


@dataclass
class MixedView:
    images: object  # the masked batch
    weights: object  # per-sample loss weights (tensor)
    boxes: list
    area: float


def mixed_view(options: GradMixOptions, x, centres, generator, mean, std) -> MixedView:
    """The masked batch for the given box centres (the area drawn first, then the fill)."""
    import torch

    height, width = x.shape[-2:]
    area = sample_area(generator, options.area)
    boxes = batch_boxes(centres, area, height, width)
    if options.convention == "paper":
        images = fill_with_partner(x, boxes, generator)
    else:
        images = fill_with_noise(x, boxes, generator, mean, std)
    weights = torch.tensor(loss_weights(options, boxes, area, height, width), device=x.device)
    return MixedView(images, weights, boxes, area)


class Mixer:
    """GradMix or the random box inside `fit`'s step: `with mixer.recording(): forward`; then
    `loss + mixer.extra_loss(...)` before the backward pass."""

    def __init__(self, options: GradMixOptions, module, mean, std):
        self.options, self.module, self.mean, self.std = options, module, mean, std
        self.layers = resolve_layers(module, options.layers) if options.augment == "gradmix" else []
        self._store: dict = {}

    @contextmanager
    def recording(self):
        with recorded_outputs(self.module, self.layers) as store:
            self._store = store
            yield

    def centres(self, x, loss, generator):
        if self.options.augment == "random-box":
            return random_centres(len(x), x.shape[-2], x.shape[-1], generator)
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
