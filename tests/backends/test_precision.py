"""--precision's math: its defaults per device type, TF32 switched per block and given back,
bf16 autocast only where a backend asks for it, and SAM's encoder under bf16 with its decoder in
float32."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
from tiny_models import cpu_backend, tiny_checkpoint_fixture, write_tiny_sam

from builder.backends import BackendUnavailable
from builder.backends import sam as sam_module
from builder.backends.sam import SamConfig
from builder.backends.torch_base import math_mode, resolve_precision
from builder.core.records import Box

tiny_sam_path = tiny_checkpoint_fixture(write_tiny_sam)


def test_defaults_and_refusals():
    assert resolve_precision(None, "cuda") == "bf16" and resolve_precision(None, "cpu") == "fp32"
    assert resolve_precision("tf32", "cuda") == "tf32"
    with pytest.raises(BackendUnavailable, match="tf32 is a CUDA math mode"):
        resolve_precision("tf32", "cpu")
    with pytest.raises(BackendUnavailable, match="--precision must be one of bf16, tf32, fp32"):
        resolve_precision("fp16", "cuda")


@pytest.mark.parametrize("precision,allowed", [("fp32", False), ("tf32", True), ("bf16", True)])
def test_tf32_is_set_for_the_block_on_cuda_and_given_back(precision, allowed):
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    with math_mode(torch.device("cuda"), precision, autocast_bf16=False):
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (allowed, allowed)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


def test_bf16_autocasts_only_when_the_backend_asks():
    a = torch.ones(4, 4)
    with math_mode(torch.device("cpu"), "bf16", autocast_bf16=True):
        assert (a @ a).dtype == torch.bfloat16
    with math_mode(torch.device("cpu"), "bf16", autocast_bf16=False):
        assert (a @ a).dtype == torch.float32


def test_sam_runs_its_encoder_in_bf16_and_its_decoder_in_float32(tiny_sam_path, monkeypatch):
    make = partial(cpu_backend, "masker", "sam", SamConfig, model="auto", checkpoint=str(tiny_sam_path))
    fp32, bf16 = make(precision="fp32"), make(precision="bf16")
    assert fp32.info().params["precision"] == "fp32" and bf16.info().params["precision"] == "bf16"
    seen = {}
    real = sam_module.decode_boxes

    def spy(sam, embeddings, sparse, dense):
        seen["embeddings"], seen["matmul"] = embeddings.dtype, (sparse[0] @ sparse[0].mT).dtype
        return real(sam, embeddings, sparse, dense)

    monkeypatch.setattr(sam_module, "decode_boxes", spy)
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (90, 120, 3), dtype=np.uint8)
    boxes = [[Box(10, 10, 60, 80, "n01440764")]]
    encoded = {}
    for name, masker in (("fp32", fp32), ("bf16", bf16)):
        hook = masker.sam.image_encoder.blocks[0].attn.qkv.register_forward_hook(
            lambda m, i, o, n=name: encoded.__setitem__(n, o.dtype)
        )
        (masks,) = masker.masks_batch([image], boxes)
        hook.remove()
        assert seen == {"embeddings": torch.float32, "matmul": torch.float32}  # the decoder: float32 always
        encoded[name + "_mask"] = masks[0]
    assert encoded["fp32"] == torch.float32 and encoded["bf16"] == torch.bfloat16
    assert encoded["fp32_mask"].shape == encoded["bf16_mask"].shape == (90, 120)


@pytest.mark.slow
def test_a_compiled_encoder_gives_the_same_masks_and_its_compile_time_apart(tiny_sam_path):
    make = partial(cpu_backend, "masker", "sam", SamConfig, model="auto", checkpoint=str(tiny_sam_path))
    plain, compiled = make(), make(compile_encoder=True)
    image = np.random.default_rng(1).integers(0, 256, (90, 120, 3), dtype=np.uint8)
    boxes = [[Box(10, 10, 60, 80, "n01440764")]]
    assert np.array_equal(plain.masks_batch([image], boxes)[0][0], compiled.masks_batch([image], boxes)[0][0])
    assert compiled.compile_seconds > 0 and plain.compile_seconds == 0
