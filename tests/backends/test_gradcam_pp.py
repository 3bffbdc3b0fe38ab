"""Grad-CAM++ keep-masks (`builder.backends.gradcam_pp`) on planted models whose logits look at one
quadrant each, the layer choice on timm and plain models, and the model state left as it was."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_grad_cam")

from builder.backends import available, make_backend  # noqa: E402
from builder.backends.gradcam_pp import (  # noqa: E402
    CamLayerError,
    GradCamPPConfig,
    default_cam_layer,
    gradcam_pp_maps,
    keep_masks,
)
from builder.core.errors import HsiError  # noqa: E402

SIDE = 64
HALF = SIDE // 2
PATCH = slice(8, 24)  # a 16 px square inside a quadrant (in quadrant coordinates)


class QuadrantModel(torch.nn.Module):
    """A conv stage with a red detector (channel 0) and a green detector (channel 1) at a quarter of
    the input's resolution, then a head whose class 0 logit pools channel 0 over the TOP-RIGHT
    quadrant only and whose class 1 logit pools channel 1 over the BOTTOM-LEFT quadrant only: each
    logit depends on one quadrant."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 2, 3, padding=1), torch.nn.ReLU(), torch.nn.AvgPool2d(4))
        self.norm = torch.nn.BatchNorm2d(2)  # a train/eval difference to restore
        with torch.no_grad():
            weight = torch.zeros(2, 3, 3, 3)
            weight[0, 0, 1, 1], weight[0, 1, 1, 1], weight[0, 2, 1, 1] = 1.0, -0.5, -0.5  # red
            weight[1, 1, 1, 1], weight[1, 0, 1, 1], weight[1, 2, 1, 1] = 1.0, -0.5, -0.5  # green
            self.features[0].weight.copy_(weight)
            self.features[0].bias.fill_(-0.1)

    def forward(self, x):
        f = self.features(x)
        h = f.shape[-1] // 2
        top_right = f[:, 0, :h, h:].mean(dim=(1, 2))
        bottom_left = f[:, 1, h:, :h].mean(dim=(1, 2))
        return torch.stack([top_right, bottom_left], dim=1)


def planted_images(count: int = 2, seed: int = 0):
    """Grey noise with a red square in the top-right quadrant and a green one in the bottom-left."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(0.3, 0.5, size=(count, 3, SIDE, SIDE)).astype(np.float32)
    top_right = (slice(None), slice(PATCH.start, PATCH.stop), slice(HALF + PATCH.start, HALF + PATCH.stop))
    bottom_left = (slice(None), slice(HALF + PATCH.start, HALF + PATCH.stop), slice(PATCH.start, PATCH.stop))
    for image in images:
        image[top_right] = np.array([0.9, 0.1, 0.1], dtype=np.float32)[:, None, None]
        image[bottom_left] = np.array([0.1, 0.9, 0.1], dtype=np.float32)[:, None, None]
    return torch.from_numpy(images)


def quadrant_share(keep: np.ndarray, rows: slice, cols: slice) -> float:
    return float(keep[rows, cols].sum() / keep.sum())


def test_the_keep_mask_of_each_class_lies_in_the_quadrant_its_logit_reads():
    model = QuadrantModel()
    images = planted_images(2)
    cams = gradcam_pp_maps(model, images, [0, 1])
    assert cams.shape == (2, SIDE, SIDE) and cams.dtype == np.float32
    assert cams.min() >= 0.0 and cams.max() <= 1.0 and cams.reshape(2, -1).max(axis=1).min() > 0.99
    keep = keep_masks(cams, 0.7)
    assert keep.dtype == bool and keep.shape == (2, SIDE, SIDE)
    top_right, bottom_left = (slice(0, HALF), slice(HALF, SIDE)), (slice(HALF, SIDE), slice(0, HALF))
    # class 0 (the top-right logit) keeps the red square; class 1 the green one
    assert quadrant_share(keep[0], *top_right) == 1.0
    assert quadrant_share(keep[1], *bottom_left) == 1.0
    red = np.zeros((SIDE, SIDE), bool)
    red[PATCH, HALF + PATCH.start : HALF + PATCH.stop] = True
    overlap = (keep[0] & red).sum() / (keep[0] | red).sum()
    assert overlap > 0.7, overlap  # measured 0.77 (196 of the 256 px): upsampled from 16 x 16, edges bilinear


def test_maps_do_not_depend_on_the_batch_size():
    model = QuadrantModel()
    images = planted_images(3, seed=1)
    whole = gradcam_pp_maps(model, images, [0, 1, 0])
    one_by_one = gradcam_pp_maps(model, images, [0, 1, 0], batch_size=1)
    np.testing.assert_allclose(whole, one_by_one, atol=1e-6)


def test_train_mode_requires_grad_and_grads_are_restored_and_frozen_weights_work():
    model = QuadrantModel().train()
    model.norm.eval()  # a mixed state: restored module by module
    conv = model.features[0]
    conv.bias.requires_grad_(False)  # a partly frozen model
    conv.weight.grad = torch.full_like(conv.weight, 3.0)
    cams = gradcam_pp_maps(model, planted_images(1), [0])
    assert model.training and model.features.training and not model.norm.training
    assert conv.weight.requires_grad and not conv.bias.requires_grad
    assert torch.equal(conv.weight.grad, torch.full_like(conv.weight, 3.0)) and conv.bias.grad is None

    for parameter in model.parameters():  # fully frozen: only the input can carry the gradient
        parameter.requires_grad_(False)
    frozen = gradcam_pp_maps(model, planted_images(1), [0])
    np.testing.assert_allclose(frozen, cams, atol=1e-6)
    assert not any(p.requires_grad for p in model.parameters())


def test_maps_work_inside_inference_mode():
    model = QuadrantModel()
    with torch.inference_mode():
        images = planted_images(1) * 1.0
    reference = gradcam_pp_maps(model, planted_images(1), [0])
    with torch.no_grad():
        np.testing.assert_allclose(gradcam_pp_maps(model, images.clone(), [0]), reference, atol=1e-6)


def test_default_layer_is_the_last_stage_of_timm_and_plain_models():
    timm = pytest.importorskip("timm")
    classifier = timm.create_model("test_resnet", pretrained=False, num_classes=3)
    assert default_cam_layer(classifier) == "layer4"
    features = timm.create_model("test_resnet", pretrained=False, features_only=True)
    assert default_cam_layer(features) == "layer4"
    assert default_cam_layer(QuadrantModel()) == "features"
    # a CAM through timm's own layer choice runs end to end
    cams = gradcam_pp_maps(classifier, torch.rand(2, 3, 64, 64), [0, 2])
    assert cams.shape == (2, 64, 64) and cams.reshape(2, -1).max(axis=1).min() > 0.99


def test_a_model_without_convolutions_or_an_unknown_layer_names_the_flag():
    mlp = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))
    with pytest.raises(CamLayerError, match="--cam-layer") as err:
        default_cam_layer(mlp)
    assert isinstance(err.value, HsiError) and "no feature_info and no convolutional layer" in str(err.value)
    with pytest.raises(CamLayerError) as err:
        gradcam_pp_maps(QuadrantModel(), planted_images(1), [0], layer="head.fc")
    assert str(err.value) == (
        "--cam-layer 'head.fc' is not a module of the model (QuadrantModel); "
        "its convolutional top-level modules are: features"
    )
    with pytest.raises(CamLayerError, match="cannot give a Grad-CAM\\+\\+ map .*--cam-layer"):
        gradcam_pp_maps(mlp, torch.rand(1, 3, 8, 8), [0], layer="1")


def test_the_registry_lists_and_builds_the_cam():
    assert "gradcam++" in available("cam")
    cam = make_backend("cam", "gradcam++", GradCamPPConfig(threshold=0.5))
    model = QuadrantModel()
    assert cam.layer_name(model) == "features"
    keep = cam.keep(cam.maps(model, planted_images(1), [0]))
    assert keep.shape == (1, SIDE, SIDE) and keep[0, :HALF, HALF:].sum() == keep.sum() > 0
    assert cam.info().to_json()["params"] == {"grad_cam": "1.5.7", "layer": None, "threshold": 0.5}
    with pytest.raises(HsiError, match=r"--threshold must be within \[0, 1\], got 1.5"):
        make_backend("cam", "gradcam++", GradCamPPConfig(threshold=1.5))


class ListedStages(torch.nn.Module):
    """Stages in a ModuleList (called one by one, never as a whole), then an unused conv."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(4, 4, 3, padding=1)])
        self.unused = torch.nn.Conv2d(4, 4, 1)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x.mean(dim=(2, 3)))


def test_a_module_list_stands_for_its_last_element_and_a_layer_never_called_is_refused():
    model = ListedStages()
    model.unused = torch.nn.Identity()
    assert default_cam_layer(model) == "blocks.1"
    cams = gradcam_pp_maps(model, torch.rand(1, 3, 16, 16), [1])
    assert cams.shape == (1, 16, 16)
    with pytest.raises(CamLayerError) as err:
        gradcam_pp_maps(ListedStages(), torch.rand(1, 3, 16, 16), [1], layer="unused")
    assert str(err.value) == (
        "the layer 'unused' cannot give a Grad-CAM++ map (the layer recorded no output or gradient in the forward "
        "pass); choose a convolutional layer the forward pass calls with --cam-layer"
    )


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:FutureWarning")
def test_a_torchscript_model_is_refused_with_the_reason():
    traced = torch.jit.trace(QuadrantModel().eval(), planted_images(1))
    with pytest.raises(CamLayerError, match="a TorchScript model runs its compiled graph, where module hooks never"):
        gradcam_pp_maps(traced, planted_images(1), [0])
