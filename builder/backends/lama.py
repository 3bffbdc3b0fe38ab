"""The `lama` inpainter: big-lama (Suvorov et al. 2022) as the TorchScript file that
simple-lama-inpainting downloads, run through a thin wrapper of our own (that package pins
numpy<2 and pillow<10).

The model is called as `model(image, mask)`: image 1 x 3 x H x W float in [0, 1], mask
1 x 1 x H x W float, 1 where to fill; it returns 1 x 3 x H x W in [0, 1]. The wrapper works at the
image's full resolution: it pads the bottom and right edges to a multiple of 8 by mirroring
(numpy's "symmetric" mode, as LaMa's own `pad_img_to_modulo` does; the mask is padded the same
way), runs the model, crops back to H x W, rounds to uint8, and copies every unmasked pixel from the
input so only the hole changes. Images with the same padded size share one forward pass.

The file is TorchScript, which is code: it is loaded only when its sha256 is trusted (`--trust-file
SHA256`, or `trusted_sha256:` in the extract config) or with `--trust-code`
(`builder.backends.code_trust`); otherwise refused before `torch.jit.load` runs any of it.

The file is TorchScript, not an eager module, so JIT fusion is not moot: every call runs under
`torch.jit.optimized_execution(False)`, which turns the profiling executor's per-shape
specialisation and fusion off. There is no warm-up call: cuDNN autotuning is off
(`cudnn.benchmark` is never set), nothing specialises per shape, and ImageNet photos come in
many padded sizes, so warming one size would only move the first call's one-time CUDA set-up
to load time. (The GPU suite warms the whole path before it times it.)

Determinism: the same as the SAM masker's: on one device type a result does not depend on the
batch it ran in (tested on CPU); CPU and CUDA may differ in the last bit of some filled pixels.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from builder.backends.base import BackendInfo, Inpainter
from builder.backends.code_trust import CodeTrust, load_torchscript
from builder.backends.registry import register_backend
from builder.backends.torch_base import (
    CheckpointConfig,
    CheckpointSource,
    TorchBackend,
    count_parameters,
    math_mode,
)

PAD_MULTIPLE = 8
PAD_MODE = "symmetric"
SMOKE_SIDE = 64  # a load-time test call on a 64 x 64 image proves the file takes (image, mask)
CHECKPOINT = CheckpointSource(
    what="the big-lama TorchScript checkpoint",
    flag="--lama-checkpoint",
    variable="LAMA_MODEL",
    published="the simple-lama-inpainting release on GitHub "
    "(https://github.com/enesmsahin/simple-lama-inpainting/releases/download/v0.1.0/big-lama.pt)",
)


@dataclass(frozen=True)
class LamaConfig(CheckpointConfig):
    source: ClassVar[CheckpointSource] = CHECKPOINT
    checkpoint: str | None = CHECKPOINT.config_field()
    trusted_sha256: tuple[str, ...] = ()  # the big-lama files the user trusts (--trust-file, the config's list)
    trust_code: bool = False  # --trust-code: any TorchScript file

    @property
    def trust(self) -> CodeTrust:
        return CodeTrust.of(self.trusted_sha256, self.trust_code)


# No sha256 of big-lama is published by its authors or its host (see builder.backends.code_trust).
LAMA_HINT = (
    "no sha256 of big-lama is published, so trust only a file you downloaded yourself; or use --inpainter "
    "patchmatch or telea, which load no model file"
)


def padded_size(height: int, width: int, multiple: int = PAD_MULTIPLE) -> tuple[int, int]:
    return -(-height // multiple) * multiple, -(-width // multiple) * multiple


def pad_to_multiple(array: np.ndarray, multiple: int = PAD_MULTIPLE) -> np.ndarray:
    """Mirror-pad the bottom and right of an H x W (x C) array up to multiples of `multiple`."""
    height, width = array.shape[:2]
    target_h, target_w = padded_size(height, width, multiple)
    widths = [(0, target_h - height), (0, target_w - width)] + [(0, 0)] * (array.ndim - 2)
    return np.pad(array, widths, mode=PAD_MODE)


def load_lama(path: Path, trust: CodeTrust) -> tuple[object, str]:
    """(model, sha256) of the big-lama TorchScript file at `path`, when `trust` allows its sha256
    (refused before torch.jit.load otherwise), proved to take (image, mask) on a small input."""
    import torch

    model, sha256 = load_torchscript(path, trust, LAMA_HINT, lambda reason: CHECKPOINT.unusable(path, reason))
    model.eval()
    image = torch.full((1, 3, SMOKE_SIDE, SMOKE_SIDE), 0.5)
    mask = torch.zeros((1, 1, SMOKE_SIDE, SMOKE_SIDE))
    mask[..., SMOKE_SIDE // 4 : SMOKE_SIDE // 2, SMOKE_SIDE // 4 : SMOKE_SIDE // 2] = 1
    try:
        with torch.inference_mode():
            out = model(image, mask)
    except Exception as exc:  # noqa: BLE001
        raise CHECKPOINT.unusable(
            path, f"calling it as model(image, mask) failed: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, 3, SMOKE_SIDE, SMOKE_SIDE):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise CHECKPOINT.unusable(path, f"model(image, mask) returned {shape}, expected a 1 x 3 x H x W tensor")
    return model, sha256


def accepts_batches(model) -> bool:
    """Whether the TorchScript file takes more than one image per call (a traced file may have its
    batch size baked in). Checked once at load time on a tiny input."""
    import torch

    image = torch.full((2, 3, SMOKE_SIDE, SMOKE_SIDE), 0.5)
    mask = torch.zeros((2, 1, SMOKE_SIDE, SMOKE_SIDE))
    mask[..., : SMOKE_SIDE // 2, : SMOKE_SIDE // 2] = 1
    try:
        with torch.inference_mode():
            out = model(image, mask)
    except Exception:  # noqa: BLE001 - any failure means: call it one image at a time
        return False
    return isinstance(out, torch.Tensor) and tuple(out.shape) == (2, 3, SMOKE_SIDE, SMOKE_SIDE)


class LamaInpainter(TorchBackend, Inpainter):
    name = "lama"

    def __init__(
        self, model, checkpoint: Path, sha256: str, device: str, batch_size: int, precision: str | None = None
    ) -> None:
        super().__init__(model, checkpoint.name, sha256, device, batch_size, "LaMa", precision)
        self.model = model

    @property
    def math(self) -> str:
        """LaMa's own math: float32, with TF32 matmuls and convolutions on CUDA unless --precision
        fp32. Never bf16: its Fourier units' FFTs lose too much there."""
        return "tf32" if self.device_type == "cuda" and self.precision != "fp32" else "fp32"

    def info(self) -> BackendInfo:
        return self.provenance(
            {
                "pad_multiple": PAD_MULTIPLE,
                "pad_mode": PAD_MODE,
                "rounding": "nearest",
                "parameters": count_parameters(self.model),
                "precision": self.math,
            }
        )

    def _run(self, padded: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
        """Padded (image, mask) pairs of one size -> padded uint8 results."""
        import torch

        device = self.ready()
        images = torch.from_numpy(np.stack([image for image, _ in padded])).to(device)
        masks = torch.from_numpy(np.stack([mask for _, mask in padded])).to(device)
        images = images.permute(0, 3, 1, 2).float().div(255.0)
        masks = masks.unsqueeze(1).float()
        # no TorchScript profiling and fusion: it would re-specialise on every new photo size on CUDA
        with torch.inference_mode(), torch.jit.optimized_execution(False):
            with math_mode(device, self.math, autocast_bf16=False):
                out = self.model(images, masks)
        out = out.mul(255.0).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        return list(out)

    def inpaint_batch(
        self, images: Sequence[np.ndarray], masks: Sequence[np.ndarray], ids: Sequence[str] | None = None
    ) -> list[np.ndarray]:
        results: list[np.ndarray | None] = [None] * len(images)
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i, (image, mask) in enumerate(zip(images, masks)):
            if mask.any():
                groups[padded_size(*image.shape[:2])].append(i)
            else:
                results[i] = image.copy()
        for size in sorted(groups):
            members = groups[size]
            padded = [(pad_to_multiple(images[i]), pad_to_multiple(masks[i].astype(np.uint8))) for i in members]
            for i, out in zip(members, self.batch.run(padded, self._run)):
                height, width = images[i].shape[:2]
                filled = out[:height, :width]
                results[i] = np.where(masks[i][..., None], filled, images[i])
        return results  # type: ignore[return-value]


@register_backend("inpainter", "lama", config_class=LamaConfig, requires=("torch",))
def make_lama_inpainter(config: LamaConfig) -> LamaInpainter:
    """Factory for `--inpainter lama`: every check that can fail happens here, before any work."""
    path = config.locate()
    model, sha256 = load_lama(path, config.trust)
    batch_size = config.batch_size
    if batch_size > 1 and not accepts_batches(model):
        # Results do not depend on how many images share a call, so this changes speed only.
        print(
            f"hsi: {path.name} takes one image per call; LaMa runs unbatched (--batch-size still applies to SAM)",
            file=sys.stderr,
            flush=True,
        )
        batch_size = 1
    return LamaInpainter(model, path, sha256, config.device, batch_size, config.precision)
