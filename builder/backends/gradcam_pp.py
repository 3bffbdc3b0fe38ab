"""The `gradcam++` CAM: Grad-CAM++ (Chattopadhyay et al. 2018, arXiv 1710.11063) through the
`grad-cam` package (`GradCAMPlusPlus`, `ClassifierOutputTarget`), as SCGS (arXiv 2412.19457) uses
it: the map of a chosen class (in SCGS the predicted, wrong one) at the model's last convolutional
stage, min-max normalised per image to [0, 1] and bilinearly upsampled to the input; the keep-mask
is the map's pixels at or above a threshold (0.7 by default: the red and orange of the usual jet
rendering that the paper describes).

The package puts the model in eval mode (so batch norm uses its running statistics and an image's
map does not depend on its batch-mates) and calls `model.zero_grad()`. Here the weights are frozen
for the pass (only the input needs a gradient, which is all Grad-CAM++ needs, and no weight
gradient is computed), and afterwards every module's training flag, every parameter's
`requires_grad` and every existing `.grad` are put back as they were.

Importing this module does not import torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from builder.backends.base import BackendInfo
from builder.backends.registry import BackendUnavailable, from_setting, register_backend
from builder.backends.torch_base import AdaptiveBatch

DEFAULT_THRESHOLD = 0.7
DEFAULT_BATCH_SIZE = 32
LAYER_FLAG = "--cam-layer"


class CamLayerError(BackendUnavailable):
    """The CAM layer cannot be chosen or used on this model."""


def _modules(model) -> dict:
    return dict(model.named_modules())


def _timm_stage_names(model) -> list[str]:
    """The module names of a timm model's feature stages, shallow to deep: `feature_info` is a
    list of dicts on a classifier and a `FeatureInfo` (indexable, with `module_name()`) on a
    features-only model."""
    info = getattr(model, "feature_info", None)
    if info is None:
        return []
    if callable(getattr(info, "module_name", None)):
        names = info.module_name()
        return [names] if isinstance(names, str) else list(names)
    try:
        return [entry["module"] for entry in info if isinstance(entry, dict) and "module" in entry]
    except TypeError:
        return []


def _holds_conv(module) -> bool:
    import torch

    return any(isinstance(sub, torch.nn.Conv2d) for sub in module.modules())


def _last_convolutional_child(module, prefix: str = "") -> str | None:
    """The dotted name of the last child that is or holds a Conv2d; a ModuleList or ModuleDict is
    never called itself (its hooks would not fire), so its last such element stands for it."""
    import torch

    for name, child in reversed(list(module.named_children())):
        if not _holds_conv(child):
            continue
        if isinstance(child, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            return _last_convolutional_child(child, f"{prefix}{name}.")
        return f"{prefix}{name}"
    return None


def _refuse_torchscript(model) -> None:
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        raise CamLayerError(
            "Grad-CAM++ needs the model's modules, and a TorchScript model runs its compiled graph, where "
            "module hooks never fire: give the model as a timm or torchvision checkpoint instead"
        )


def default_cam_layer(model) -> str:
    """The dotted name of the model's last convolutional stage: a timm model's last `feature_info`
    module; otherwise the last child of the model that is or holds a Conv2d (e.g. torchvision
    ResNet's `layer4`, EfficientNet-Lite's `_conv_head`)."""
    _refuse_torchscript(model)
    modules = _modules(model)
    stages = [name for name in _timm_stage_names(model) if name in modules]
    if stages:
        return stages[-1]
    convolutional = _last_convolutional_child(model)
    if convolutional is not None:
        return convolutional
    raise CamLayerError(
        f"the model ({type(model).__name__}) has no feature_info and no convolutional layer to take a "
        f"Grad-CAM++ map from; name the layer with {LAYER_FLAG} (a dotted module name of the model)"
    )


def resolve_cam_layer(model, layer: str | None):
    """(name, module) of the chosen layer (`default_cam_layer` when None); refuses unknown names."""
    _refuse_torchscript(model)
    name = default_cam_layer(model) if layer is None else layer
    modules = _modules(model)
    if name not in modules or name == "":
        candidates = [n for n, child in model.named_children() if _holds_conv(child)]
        raise CamLayerError(
            f"{LAYER_FLAG} {name!r} is not a module of the model ({type(model).__name__}); "
            f"its convolutional top-level modules are: {', '.join(candidates) or 'none'}"
        )
    return name, modules[name]


@contextmanager
def _model_state_kept(model):
    """Freeze the weights while inside; on leaving, restore each module's training flag, each
    parameter's requires_grad and .grad (grad-cam sets grads to None and forces eval mode)."""
    training = {name: module.training for name, module in model.named_modules()}
    parameters = list(model.parameters())
    requires = [p.requires_grad for p in parameters]
    grads = [p.grad for p in parameters]
    for p in parameters:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag, grad in zip(parameters, requires, grads):
            p.requires_grad_(flag)
            p.grad = grad
        for name, module in model.named_modules():
            module.training = training.get(name, module.training)


def gradcam_pp_maps(
    model, images, target_classes: Sequence[int], layer: str | None = None, batch_size: int = DEFAULT_BATCH_SIZE
) -> np.ndarray:
    """Grad-CAM++ maps of `target_classes` (one int per image) for `images` (float N x 3 x H x W,
    normalised for the model, on its device): float32 N x H x W in [0, 1], each map min-max
    normalised and bilinearly upsampled to H x W (a map with no positive evidence is all zeros).
    Runs in chunks of `batch_size`, halved on CUDA out-of-memory."""
    import torch
    from pytorch_grad_cam import GradCAMPlusPlus
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    if images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"images must be N x 3 x H x W, got shape {tuple(images.shape)}")
    targets = [int(c) for c in target_classes]
    if len(targets) != images.shape[0]:
        raise ValueError(f"{images.shape[0]} images but {len(targets)} target classes")
    if not targets:
        return np.zeros((0, images.shape[2], images.shape[3]), dtype=np.float32)
    name, module = resolve_cam_layer(model, layer)

    def run(chunk: Sequence[int]) -> list[np.ndarray]:
        # the input carries the gradient: the weights are frozen for the pass
        batch = images[list(chunk)].detach().clone().requires_grad_(True)
        cam = GradCAMPlusPlus(model=model, target_layers=[module])
        try:
            with torch.enable_grad():
                maps = cam(input_tensor=batch, targets=[ClassifierOutputTarget(targets[i]) for i in chunk])
        except (ValueError, TypeError) as exc:
            recorded = cam.activations_and_grads.activations and cam.activations_and_grads.gradients
            if isinstance(exc, ValueError) or not recorded:  # a non-4-D output, or a layer never called
                reason = str(exc) if recorded else "the layer recorded no output or gradient in the forward pass"
                raise CamLayerError(
                    f"the layer {name!r} cannot give a Grad-CAM++ map ({reason}); "
                    f"choose a convolutional layer the forward pass calls with {LAYER_FLAG}"
                ) from None
            raise
        finally:
            cam.activations_and_grads.release()
        return list(np.asarray(maps, dtype=np.float32))

    with _model_state_kept(model):
        maps = AdaptiveBatch(batch_size, "Grad-CAM++").run(list(range(len(targets))), run)
    return np.clip(np.stack(maps), 0.0, 1.0).astype(np.float32)


def keep_masks(cams: np.ndarray, threshold: float = DEFAULT_THRESHOLD) -> np.ndarray:
    """bool N x H x W: the pixels whose map value is at least `threshold` (the kept region)."""
    if not 0.0 <= threshold <= 1.0:
        raise BackendUnavailable(f"--threshold must be within [0, 1], got {threshold}")
    return np.asarray(cams) >= threshold


@dataclass(frozen=True)
class GradCamPPConfig:
    layer: str | None = from_setting("cam_layer")  # None: the model's last convolutional stage
    threshold: float = DEFAULT_THRESHOLD
    batch_size: int = DEFAULT_BATCH_SIZE


class GradCamPlusPlus:
    """The registry's face of the functions above, with its settings and provenance."""

    name = "gradcam++"

    def __init__(self, config: GradCamPPConfig) -> None:
        self.config = config

    def info(self) -> BackendInfo:
        from importlib.metadata import version

        return BackendInfo(
            self.name,
            {"layer": self.config.layer, "threshold": self.config.threshold, "grad_cam": version("grad-cam")},
        )

    def layer_name(self, model) -> str:
        return resolve_cam_layer(model, self.config.layer)[0]

    def maps(self, model, images, target_classes: Sequence[int]) -> np.ndarray:
        return gradcam_pp_maps(model, images, target_classes, self.config.layer, self.config.batch_size)

    def keep(self, cams: np.ndarray) -> np.ndarray:
        return keep_masks(cams, self.config.threshold)


@register_backend(
    "cam", "gradcam++", config_class=GradCamPPConfig, requires=("torch", "pytorch_grad_cam"), extra="augment"
)
def make_gradcam_pp(config: GradCamPPConfig) -> GradCamPlusPlus:
    if not 0.0 <= config.threshold <= 1.0:
        raise BackendUnavailable(f"--threshold must be within [0, 1], got {config.threshold}")
    if config.batch_size < 1:
        raise BackendUnavailable(f"the Grad-CAM++ batch size must be at least 1, got {config.batch_size}")
    return GradCamPlusPlus(config)
