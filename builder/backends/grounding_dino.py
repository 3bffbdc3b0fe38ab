"""The `grounding-dino` detector: Grounding DINO (Liu et al. 2023) through `transformers`
(`GroundingDinoForObjectDetection` + `AutoProcessor`), which loads the published weights in hub
format, batches, and runs on a GPU when present. The original `groundingdino-py` package no longer
runs on transformers 5 and is unmaintained, so it is not used.

`--detector` takes a local folder or a hub id (default: the published grounding-dino-base, which
offline must be in the local Hugging Face cache). Provenance records the folder's name or the hub
id, and the sha256 of each weight file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from builder.backends.base import BackendInfo, Detector
from builder.backends.loader_gate import hf_from_pretrained
from builder.backends.registry import BackendUnavailable, from_setting, register_backend
from builder.backends.torch_base import (
    HubModelSource,
    TorchBackend,
    check_device_name,
    math_mode,
    resolve_device,
    weight_files_sha256,
)

HUB_ID = "IDEA-Research/grounding-dino-base"
MODEL = HubModelSource(
    what="the detector",
    flag="--detector",
    hub_id=HUB_ID,
    holds="the transformers-format weights",
    patterns=("*.json", "*.txt", "*.safetensors", "*.bin", "*.model"),
)


@dataclass(frozen=True)
class GroundingDinoConfig:
    model_id: str = from_setting("detector", HUB_ID)  # a hub id or a local folder in transformers format
    device: str = "auto"
    batch_size: int = 8  # images per forward pass, halved on out-of-memory


class GroundingDino(TorchBackend, Detector):
    name = "grounding-dino"

    def __init__(
        self, model, processor, model_id: str, weights_sha256: dict[str, str], device: str, batch_size: int
    ) -> None:
        # the weights are several files: their sha256 go into the parameters, by file name
        super().__init__(model, MODEL.public_name(model_id), None, device, batch_size, "Grounding DINO")
        self.model = model
        self.processor = processor
        self.source = "local folder" if MODEL.is_local(model_id) else "hub"
        self.weights_sha256 = weights_sha256
        self.device_name = device

    def info(self) -> BackendInfo:
        return self.provenance(
            # strict float32 (cuDNN's default TF32 convolutions off): the boxes' IoUs are scores
            {
                "source": self.source,
                "weights_sha256": self.weights_sha256,
                "device": self.device_name,
                "precision": "fp32",
            }
        )

    def detect(
        self, images: Sequence[np.ndarray], prompts: Sequence[str], box_threshold: float, text_threshold: float
    ) -> list[np.ndarray]:
        pairs = list(zip(images, prompts))
        return self.batch.run(pairs, lambda chunk: self._detect(chunk, box_threshold, text_threshold))

    def _detect(
        self, chunk: Sequence[tuple[np.ndarray, str]], box_threshold: float, text_threshold: float
    ) -> list[np.ndarray]:
        import torch
        from PIL import Image

        device = self.ready()
        inputs = self.processor(
            images=[Image.fromarray(image) for image, _ in chunk],
            text=[prompt for _, prompt in chunk],
            return_tensors="pt",
            padding=True,
        )
        inputs = {name: value.to(device) for name, value in inputs.items()}
        with torch.inference_mode(), math_mode(device, "fp32", autocast_bf16=False):
            outputs = self.model(**inputs)
        results = self.processor.post_process_grounded_object_detection(
            outputs,
            inputs["input_ids"],
            threshold=box_threshold,
            text_threshold=text_threshold,
            target_sizes=[image.shape[:2] for image, _ in chunk],
        )
        return [result["boxes"].detach().float().cpu().numpy().reshape(-1, 4) for result in results]


@register_backend("detector", "grounding-dino", config_class=GroundingDinoConfig, requires=("torch", "transformers"))
def make_grounding_dino(config: GroundingDinoConfig) -> GroundingDino:
    """Factory for `hsi validate --boxes`: every check that can fail happens here, before any work."""
    check_device_name(config.device)
    folder = MODEL.locate(config.model_id)
    device = str(resolve_device(config.device))
    from transformers import AutoProcessor, GroundingDinoForObjectDetection

    try:
        processor = hf_from_pretrained(AutoProcessor, folder)
        model = hf_from_pretrained(GroundingDinoForObjectDetection, folder).eval()
    except (OSError, ValueError) as exc:
        raise BackendUnavailable(
            f"{config.model_id!r} does not hold a transformers Grounding DINO model: {exc}"
        ) from None
    return GroundingDino(model, processor, config.model_id, weight_files_sha256(folder), device, config.batch_size)
