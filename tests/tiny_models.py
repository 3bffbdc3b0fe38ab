"""Tiny, randomly initialised stand-ins for the real checkpoints, saved the way the real files are,
so tests load them through the production loaders (`builder.backends.sam`, `builder.backends.lama`).

- `write_tiny_sam`: a SAM built with segment-anything's own classes (64 px input, 2 encoder blocks,
  32-wide), saved as a plain state_dict like Meta's .pth files. Load it with `--sam-model auto`.
- `write_tiny_lama`: a TorchScript module with big-lama's call signature `model(image, mask)`. It
  fills each hole with the mean of the known pixels in a 7 x 7 neighbourhood (repeated until the
  hole is covered) and insists, like big-lama, on sides that are multiples of 8.
- `export_program` and `export_onnx`: a module saved as `hsi eval` reads `ep:FILE` (torch.export.save)
  and `onnx:FILE` (torch.onnx.export, dynamo), with a dynamic batch dimension or a fixed one.
- `tiny_checkpoint_fixture` and `cpu_backend`: for the backend tests, a tiny file written once per
  test module, and a backend made through the production registry on the CPU.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from segment_anything.modeling import Sam

from builder.backends import make_backend
from builder.backends.sam import SamArchitecture, build_sam

TINY_SAM_INPUT = 64


# segment-anything's classes at toy sizes, by part; `build_sam` makes the modules, as the loader does.
SAM_IMAGE_ENCODER = dict(image_size=TINY_SAM_INPUT, patch_size=16, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0)
SAM_ENCODER_ATTENTION = dict(window_size=2, global_attn_indexes=(1,), qkv_bias=True, use_rel_pos=True)
SAM_PROMPT_ENCODER = dict(prompt_dim=32, mask_in_chans=8)
SAM_MASK_DECODER = dict(num_multimask_outputs=3, decoder_depth=2, decoder_mlp_dim=64, decoder_heads=8)
SAM_IOU_HEAD = dict(iou_head_depth=3, iou_head_hidden_dim=32)
TINY_SAM = SamArchitecture(
    **SAM_IMAGE_ENCODER, **SAM_ENCODER_ATTENTION, **SAM_PROMPT_ENCODER, **SAM_MASK_DECODER, **SAM_IOU_HEAD
)


def build_tiny_sam(seed: int = 0) -> Sam:
    torch.manual_seed(seed)
    return build_sam(TINY_SAM).eval()


def write_tiny_sam(folder: Path, seed: int = 0, name: str = "sam_tiny.pth") -> Path:
    path = Path(folder) / name
    torch.save(build_tiny_sam(seed).state_dict(), path)
    return path


class TinyLama(torch.nn.Module):
    """Neighbourhood-mean hole filling with big-lama's interface; one learnable output gain."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(1))

    def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if image.shape[2] % 8 != 0 or image.shape[3] % 8 != 0:
            raise ValueError("big-lama needs sides that are multiples of 8")
        known = 1.0 - mask
        filled = image * known
        weight = known
        for _ in range(64):
            if bool((weight > 0).all()):
                break
            total = F.avg_pool2d(filled, 7, stride=1, padding=3, count_include_pad=False)
            count = F.avg_pool2d(weight, 7, stride=1, padding=3, count_include_pad=False)
            grown = (count > 0).float()
            estimate = total / count.clamp_min(1e-12)
            filled = filled * (weight > 0).float() + estimate * grown * (weight == 0).float()
            weight = torch.maximum((weight > 0).float(), grown)
        return (filled * self.gain).clamp(0.0, 1.0)


class SingleImageTinyLama(torch.nn.Module):
    """TinyLama as a file traced with its batch size baked in: it refuses more than one image."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = TinyLama()

    def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if image.shape[0] != 1:
            raise RuntimeError("this file was traced for a batch of 1")
        return self.inner(image, mask)


def write_tiny_lama(folder: Path, name: str = "big-lama-tiny.pt", single_image: bool = False) -> Path:
    path = Path(folder) / name
    module = SingleImageTinyLama() if single_image else TinyLama()
    with warnings.catch_warnings():  # torch marks TorchScript deprecated; big-lama is only published so
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.script(module.eval()), str(path))
    return path


def tiny_lama_reference(image, mask):
    """What `TinyLama` gives for float tensors, computed eagerly (for expected values in tests)."""
    with torch.no_grad():
        return TinyLama()(image, mask)


def tiny_checkpoint_fixture(write):
    """A module-scoped fixture: the path of the file `write(folder)` saves (a `write_tiny_*`), written
    once per test module. Assign it to the fixture's name."""

    @pytest.fixture(scope="module")
    def checkpoint(tmp_path_factory) -> Path:
        return write(tmp_path_factory.mktemp(write.__name__))

    return checkpoint


def cpu_backend(kind: str, name: str, config_class, **settings):
    """The backend `name` of `kind` through the production registry: on the CPU, 4 images a batch and
    the checkpoint from its environment variable, unless `settings` say otherwise."""
    return make_backend(kind, name, config_class(**{"checkpoint": None, "device": "cpu", "batch_size": 4, **settings}))


def _batch_shapes(dynamic_batch: bool):
    return ({0: torch.export.Dim("batch")},) if dynamic_batch else None  # whatever forward's argument is called


def export_program(module: torch.nn.Module, path: Path, example: torch.Tensor, dynamic_batch: bool = True) -> Path:
    """`torch.export.save` of `module` (one image argument) for inputs shaped like `example`."""
    program = torch.export.export(module.eval(), (example,), dynamic_shapes=_batch_shapes(dynamic_batch))
    torch.export.save(program, str(path))
    return Path(path)


def export_onnx(module, path: Path, example: torch.Tensor | None = None, dynamic_batch: bool = True) -> Path:
    """`torch.onnx.export(..., dynamo=True)` of `module` (one image argument) into one .onnx file;
    `module` may be a program torch.export already made (then its own shapes hold, and no example)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if isinstance(module, torch.export.ExportedProgram):
            exported = torch.onnx.export(module, dynamo=True, verbose=False)
        else:
            exported = torch.onnx.export(
                module.eval(), (example,), dynamo=True, dynamic_shapes=_batch_shapes(dynamic_batch), verbose=False
            )
    exported.save(str(path))
    return Path(path)


class MeanColour(torch.nn.Module):
    """1000 logits from the image's mean colour: a deterministic classifier that needs no weights file."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 1000, generator=torch.Generator().manual_seed(seed)))

    def forward(self, x):
        return x.mean((2, 3)) @ self.weight
