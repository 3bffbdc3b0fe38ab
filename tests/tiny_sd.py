"""A tiny randomly initialised Stable Diffusion inpainting pipeline, built from diffusers' and
transformers' own classes (a 9-channel UNet2DConditionModel, an AutoencoderKL, a two-layer
CLIPTextModel, a PNDM scheduler, no safety checker) and an offline CLIP tokenizer made from the BPE
vocabulary open-clip-torch ships, saved with `save_pretrained` so tests load it through the
production loader (`SdInpainter.load`, the registry's "sd-inpaint" generator), offline.

Native size: UNet sample size 16 x VAE scale factor 2 = 32 px, so two images at 2-3 steps take a
fraction of a second on a CPU.
"""

from __future__ import annotations

import gzip
import importlib.util
from contextlib import contextmanager
from pathlib import Path

BPE_FILE = "bpe_simple_vocab_16e6.txt.gz"
MERGES = 49152 - 256 - 2  # CLIP's vocabulary size (49,408) less 512 byte symbols and 2 special tokens
SAMPLE_SIZE = 16  # latent side
TINY_NATIVE_SIZE = SAMPLE_SIZE * 2  # the VAE's two blocks halve the side once
MAX_LENGTH = 77  # CLIP's context length; SD's text encoder has as many positions

# Toy sizes, by part, for diffusers' and transformers' own classes; the UNet and the VAE share a block layout.
BLOCKS = dict(block_out_channels=(16, 32), norm_num_groups=8, layers_per_block=1)
UNET_BLOCKS = BLOCKS | dict(
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D")
)
VAE_BLOCKS = BLOCKS | dict(down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2)
# The inpainting UNet takes 9 channels: 4 noisy latents, 1 mask, 4 masked-image latents.
UNET = dict(sample_size=SAMPLE_SIZE, in_channels=9, out_channels=4, cross_attention_dim=32, attention_head_dim=8)
VAE = dict(sample_size=TINY_NATIVE_SIZE, in_channels=3, out_channels=3, latent_channels=4)
TEXT_ENCODER = dict(
    hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=MAX_LENGTH
)
SCHEDULER = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", skip_prk_steps=True, steps_offset=1)


def byte_symbols() -> list[str]:
    """The 256 byte symbols of CLIP's (GPT-2's) byte-level BPE, in vocabulary order: the printable
    bytes ("!".."~", "¡".."¬", "®".."ÿ") stand for themselves, the other bytes, in byte order, for
    the code points from 256 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(256) if byte not in set(printable)]
    return [chr(byte) for byte in printable] + [chr(256 + rank) for rank in range(len(others))]


def clip_vocabulary() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """CLIP's vocabulary and merges from the BPE file open-clip-torch ships (found without importing
    open_clip, which would pull in its models): CLIP uses the file's first 48,894 merges; the
    vocabulary is the byte symbols, their end-of-word forms, one token per merge, then the two
    special tokens (49,408 in all)."""
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("open-clip-torch is not installed: pip install 'hard-spurious-imagenet[dev]'")
    path = Path(next(iter(spec.submodule_search_locations))) / BPE_FILE
    lines = gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1 : 1 + MERGES]]
    symbols = byte_symbols()
    tokens = symbols + [symbol + "</w>" for symbol in symbols] + ["".join(merge) for merge in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    return {token: index for index, token in enumerate(tokens)}, merges  # type: ignore[misc]


def clip_tokenizer():
    """Hugging Face's CLIPTokenizer over CLIP's vocabulary, offline, with CLIP's context length."""
    from transformers import CLIPTokenizer

    vocab, merges = clip_vocabulary()
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=MAX_LENGTH)


def special_token_ids(tokenizer) -> dict[str, int]:
    """`bos_token_id`, `eos_token_id` and `pad_token_id` of the tokenizer, for the text encoder's config."""
    return {f"{name}_token_id": getattr(tokenizer, f"{name}_token_id") for name in ("bos", "eos", "pad")}


def build_tiny_inpaint_pipeline(folder: Path, seed: int = 0) -> Path:
    import torch
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionInpaintPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    tokenizer = clip_tokenizer()
    torch.manual_seed(seed)
    components = dict(
        unet=UNet2DConditionModel(**UNET_BLOCKS, **UNET),
        vae=AutoencoderKL(**VAE_BLOCKS, **VAE),
        text_encoder=CLIPTextModel(
            CLIPTextConfig(vocab_size=len(tokenizer), **TEXT_ENCODER, **special_token_ids(tokenizer))
        ),
        scheduler=PNDMScheduler(**SCHEDULER),
        tokenizer=tokenizer,
    )
    pipeline = StableDiffusionInpaintPipeline(
        **components, safety_checker=None, feature_extractor=None, requires_safety_checker=False
    )
    folder = Path(folder)
    pipeline.save_pretrained(folder)
    return folder


@contextmanager
def one_intra_op_thread():
    """Run the tiny pipeline with one torch intra-op thread: its ops are too small to split, and
    on a busy machine OpenMP threads waiting for each other turn a 0.1 s generation into seconds."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def cached_tiny_inpaint_pipeline(tmp_path_factory, seed: int = 0) -> Path:
    """The tiny pipeline folder, built once per test session (and xdist worker) under pytest's
    session temporary folder: callers must not modify it (copy it first)."""
    folder = tmp_path_factory.getbasetemp() / f"tiny-sd-inpaint-{seed}"
    if not (folder / "model_index.json").is_file():
        build_tiny_inpaint_pipeline(folder, seed)
    return folder
