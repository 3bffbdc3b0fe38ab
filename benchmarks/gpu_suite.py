"""The GPU suite: images/s of every GPU-heavy stage on one device, the real architectures with
random weights (speed does not depend on weight values), where the time goes, and the targets.

    python benchmarks/gpu_suite.py --device cuda                          # one GPU, under 8 minutes
    python benchmarks/gpu_suite.py --device cuda --lama-checkpoint big-lama.pt --trust-file SHA256 --json figures.json
    python benchmarks/gpu_suite.py --device cpu                           # tiny models: a check in seconds
    python benchmarks/gpu_suite.py --only sd,detect --batch-size sd=8,detect=16

Stages (`--only extract,sd,detect,eval,clip`), each through the toolkit's own code path:
  extract  SAM vit_h + big-lama as `hsi extract` runs them (benchmarks/extract_gpu.py's sweep at one
           batch size): decode, SAM encoder, SAM decoder, LaMa, encode. The figure is the model
           stages' rate (extract decodes and encodes in I/O threads beside the models); the serial
           rate is printed beside it. SAM's encoder runs in extract's default precision (bf16 on
           CUDA). LaMa is the real TorchScript file when given (--lama-checkpoint or LAMA_MODEL),
           else big-lama's published architecture at random weights (benchmarks/big_lama.py, 51 M
           parameters). Target: 28 images/s with SAM vit_h + big-lama on one H200 (issue 26).
  sd       Stable Diffusion 1.5 inpainting at 512 px, fp16 on CUDA (fp32 on the CPU), through the
           `sd-inpaint` generator `hsi scgs` uses, at `hsi scgs`'s own defaults (read from its parser:
           --steps 30 at --strength 0.9, which PNDM runs as 28 UNet evaluations, counted; guidance
           7.5 doubles the UNet batch; --sd-batch-size 4) on 224 px canvases with a kept centre.
           Printed: images/s, ms per UNet step, the text encoder, VAE and UNet shares. No target is
           set for it.
  detect   Grounding DINO (base) as `hsi validate --boxes` runs it (`validation.detection.redetect`
           over ImageNet-sized JPEG files, landscape and portrait, decoded and batched by aspect as
           it does, at its batch size, 8): decode, the model, the processor, post-processing and
           IoUs (random weights pass hundreds of boxes through the thresholds; post-processing
           stays a small share). No target is set for it.
  eval     resnet50 and ViT-B/16 (timm, random init) through `hsi eval`'s data path against their
           forward passes alone on the same batches held in memory (benchmarks/eval_speed.py's
           measurement), over 7,200 composites (about 113 batches of 64), each model twice: `hsi eval`'s
           defaults (fp32), then its documented `--amp --channels-last` (bf16 unless --eval-amp
           fp16; no autocast on the CPU), the forward passes alone run the same way. The figure is
           the eval path's steady part: images/s of every batch after the first, timed from the
           first batch's end; the loader's start-up (plan, shard checks, workers, first batch) and
           the whole run's rate are printed beside it. Target: steady eval >= 0.9 of forward-only.
  clip     CLIP ViT-B/32 zero-shot as `hsi eval --model openclip:ViT-B-32:FILE` runs it: the text
           pass that builds the text classifiers (1000 classes x the 80 templates of openai,
           simple and no-scale, into an empty cache, timed once), then the eval path against the
           forward passes alone (the image tower and the three sets' logits) on the eval stage's
           composites, measured as the eval stage measures them. Target: steady eval >= 0.9 of
           forward-only.

The published configurations, built with the libraries' own classes, randomly initialised:
  - SD-1.5 inpainting: the unet/, vae/ and text_encoder/ config.json of
    huggingface.co/runwayml/stable-diffusion-inpainting (mirrored as
    stable-diffusion-v1-5/stable-diffusion-inpainting, the toolkit's default --sd-model), as copied
    by pipelines that record it as their source (`_name_or_path`), e.g. the text encoder in
    huggingface.co/Sanster/anything-4.0-inpainting and the VAE in huggingface.co/snappr/danielj400;
    the UNet's sample size is 64, the 512 px latent side (early copies say 32, which diffusers'
    inpainting pipeline itself raises to 64). The scheduler is PNDM with SD-1.x's scheduler_config
    values; the tokenizer is CLIP's BPE vocabulary as open-clip-torch ships it (tests/tiny_sd.py).
  - Grounding DINO base: huggingface.co/IDEA-Research/grounding-dino-base, config.json (revision
    c8efbb2): a Swin-B backbone (embed 128, depths 2-2-18-2, heads 4-8-16-32, window 12, 384 px);
    the detector's values (d_model 256, 6 encoder and 6 decoder layers, FFN 2048, 8 heads, 4 sampling
    points, 900 queries, 256 text tokens) are the file's and also transformers' GroundingDinoConfig
    defaults; the text encoder is bert-base-uncased's configuration, and images are resized as its
    processor does (shortest edge 800, longest 1333). The tokenizer is word-level over the ImageNet
    class names, padded to BERT's 30,522 entries: prompts have about as many tokens as WordPiece gives.
  - SAM: segment-anything's registry (`sam_model_registry["vit_h"]()`); resnet50 and
    vit_base_patch16_224: timm, pretrained=False.
  - CLIP ViT-B/32: open_clip's own `ViT-B-32` model config (`open_clip.create_model("ViT-B-32")`,
    random init: a 12-layer ViT-B with 32 px patches at 224 px, a 12-layer text transformer of width
    512 over 77 tokens, 512-dimensional embeddings, as Radford et al. 2021 describe ViT-B/32), saved
    as a safetensors file and loaded by the spec's own loader. --tiny uses the tests' `hsi-tiny-clip`
    over the synthetic set's own classes.

--tiny (implied by --device cpu): the test suite's toy models (tests/tiny_*.py), small images, one
or two iterations, so the CPU run takes seconds; its figures show the suite runs, they are not to
be compared with the targets. A stage whose package or file is missing prints "skipped: <why>" and
the suite goes on; a stage that fails prints "failed: <why>" and the exit status is 1, as it is on
CUDA when any stage was skipped (a GPU window is too rare to leave one unmeasured). `--preflight`
prints every stage's missing imports and the package versions found, then stops (exit 1 when any
is missing). `--json PATH` is rewritten after every stage, with the package versions, each stage's
precision, the TF32 flags and peak GPU memory, so a run stopped at its time limit keeps its figures.

Every timed call is wrapped in CUDA synchronisation so a stage is charged for the GPU work it queued.
No GPU figure has been measured by this project yet.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

STAGES = ("extract", "sd", "detect", "eval", "clip")
EXTRACT_TARGET = 28.0  # images/s, SAM vit_h + big-lama on one H200 (issue 26)
EVAL_RATIO_TARGET = 0.9  # eval path / forward-only throughput
CUDA_LIMIT_S = 8 * 60  # the whole suite on one H200
SD_SIDE = 512  # SD-1.5's native size: UNet sample size 64 x the VAE's factor 8

# The packages each stage imports (module names), and what to install for them.
REQUIREMENTS = {
    "extract": ("torch", "segment_anything"),
    "sd": ("torch", "diffusers", "transformers", "open_clip"),
    "detect": ("torch", "transformers"),
    "eval": ("torch", "timm"),
    "clip": ("torch", "open_clip"),
}
INSTALL = {
    "segment_anything": "segment-anything",
    "open_clip": "open-clip-torch",
    "pytest": "pytest (the tiny models and the CLIP tokenizer live in tests/)",
}

# SD-1.5 inpainting (see the module docstring for the source of each value).
SD_UNET = dict(
    sample_size=64,
    in_channels=9,  # 4 noisy latents, 1 mask, 4 masked-image latents
    out_channels=4,
    layers_per_block=2,
    block_out_channels=(320, 640, 1280, 1280),
    down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
    up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
    cross_attention_dim=768,
    attention_head_dim=8,
    norm_num_groups=32,
)
SD_VAE = dict(
    in_channels=3,
    out_channels=3,
    latent_channels=4,
    layers_per_block=2,
    block_out_channels=(128, 256, 512, 512),
    down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4,
    norm_num_groups=32,
    sample_size=256,
    scaling_factor=0.18215,
)
SD_TEXT_ENCODER = dict(  # vocab_size comes from the tokenizer: 49,408
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    max_position_embeddings=77,
    hidden_act="quick_gelu",
    projection_dim=768,
)

# Grounding DINO base.
GDINO_SWIN = dict(
    embed_dim=128,
    depths=[2, 2, 18, 2],
    num_heads=[4, 8, 16, 32],
    window_size=12,
    image_size=384,
    out_features=["stage2", "stage3", "stage4"],
)
GDINO_BERT = dict(
    vocab_size=30522,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=512,
)
GDINO_DETECTOR = dict(
    d_model=256,
    encoder_layers=6,
    decoder_layers=6,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_n_points=4,
    decoder_n_points=4,
    num_queries=900,
    max_text_len=256,
)
GDINO_RESIZE = {"shortest_edge": 800, "longest_edge": 1333}

EVAL_MODELS = ("resnet50", "vit_base_patch16_224")
TINY_EVAL_MODELS = ("test_resnet", "test_vit")  # timm's own test models (160 px, under 1M parameters)
CLIP_ARCH = "ViT-B-32"  # open_clip's config of CLIP ViT-B/32


@dataclass(frozen=True)
class Sizes:
    """How much each stage runs: the real thing on a GPU, toys for --tiny."""

    extract_images: int
    detect_images: int
    sd_batches: int  # timed batches of the default SD batch size
    eval_source_images: int  # source images of the synthetic composed set (12 composites each)
    eval_repeat: int
    batch: dict[str, int]


def full_sizes() -> Sizes:
    # eval: 600 source images are 7,200 composites, about 113 batches of 64, so each run's steady part
    # is long beside its loader start-up; one round (the steady part is the figure, not a best of rounds)
    return Sizes(48, 32, 2, 600, 1, default_batch_sizes())


def tiny_sizes() -> Sizes:
    return Sizes(
        4, 4, 1, 4, 1, {"extract": 2, "sd": 2, "detect": 4, "eval": 8, "clip": 8}
    )  # eval: 48 images, 6 batches


def scgs_defaults() -> argparse.Namespace:
    """`hsi scgs`'s defaults, read from its own parser, so the suite times what the command runs."""
    from hsi.commands.scgs import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["source", "--out", "out"])


def default_batch_sizes() -> dict[str, int]:
    """The batch sizes the commands use by default."""
    from builder.backends.grounding_dino import GroundingDinoConfig
    from builder.backends.sam import SamConfig
    from evaluation.orchestration.pipeline import RunSettings

    def default(config, name):
        return config.__dataclass_fields__[name].default

    return {
        "extract": default(SamConfig, "batch_size"),
        "sd": scgs_defaults().sd_batch_size,
        "detect": default(GroundingDinoConfig, "batch_size"),
        "eval": default(RunSettings, "batch_size"),
        "clip": default(RunSettings, "batch_size"),
    }


def parse_batch_sizes(text: str) -> dict[str, int]:
    """`--batch-size`: N for every stage, or STAGE=N pairs (`extract=4,sd=8`)."""
    sizes: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        stage, _, value = part.rpartition("=")
        if stage and stage not in STAGES:
            raise argparse.ArgumentTypeError(f"unknown stage {stage!r} in --batch-size (stages: {', '.join(STAGES)})")
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--batch-size wants N or STAGE=N, got {part!r}") from None
        if number < 1:
            raise argparse.ArgumentTypeError(f"batch sizes must be at least 1, got {part!r}")
        sizes.update({stage: number} if stage else dict.fromkeys(STAGES, number))
    return sizes


def parse_stages(text: str) -> tuple[str, ...]:
    chosen = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [s for s in chosen if s not in STAGES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"--only takes stages from {', '.join(STAGES)}, got {text!r}")
    return tuple(s for s in STAGES if s in chosen)  # always in the suite's order


@dataclass
class Row:
    """One line of the summary: a measured figure, or why there is none."""

    stage: str
    images_per_s: float | None = None
    target: str = "-"
    ratio: float | None = None  # figure / target: >= 1 meets it
    what: str = ""
    seconds: dict[str, float] = field(default_factory=dict)  # where the time went
    wall_s: float | None = None  # the stage's wall time: models built, warm-up, timed runs
    skipped: str | None = None
    failed: str | None = None


class Stopwatch:
    """Seconds and calls per bucket; the device is synchronised around each timed call so that
    asynchronous GPU work is charged to the call that queued it."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self.sync = sync
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def time(self, bucket: str, fn, *args, **kwargs):
        self.sync()
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.sync()
            self.seconds[bucket] += time.perf_counter() - started
            self.calls[bucket] += 1

    def wrap(self, owner, attribute: str, bucket: str) -> None:
        """Time every call of `owner.attribute` (an instance attribute shadows the method)."""
        original = getattr(owner, attribute)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            return self.time(bucket, original, *args, **kwargs)

        setattr(owner, attribute, timed)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


@dataclass
class Context:
    device: object  # torch.device
    tiny: bool
    sizes: Sizes
    lama_checkpoint: str | None
    lama_trust: object  # builder.backends.code_trust.CodeTrust: big-lama is TorchScript, i.e. code
    folder: Path  # scratch space, removed at the end
    eval_workers: int
    notes: dict = field(default_factory=dict)  # per stage: what ran (precision, which LaMa), for the JSON
    compile_encoder: bool = False  # extract: torch.compile SAM's encoder (`hsi extract --compile-encoder`)
    eval_amp: str = "bf16"  # the eval stage's --amp row
    cache: dict = field(default_factory=dict)  # what stages share (the eval and clip stages' composed set)

    @property
    def on_cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.on_cuda:
            import torch

            torch.cuda.synchronize(self.device)


# What each stage imports on its way (the toolkit's modules bring its core dependencies): a missing
# package anywhere below these is a stage that cannot run, found before any model is built.
STAGE_MODULES = {
    "extract": (
        "extract_gpu",
        "big_lama",
        "builder.extract.shard_builder",
        "builder.backends.sam",
        "builder.backends.lama",
    ),
    "sd": ("builder.backends.sd_inpaint", "hsi.commands.scgs", "diffusers", "transformers", "open_clip", "tiny_sd"),
    "detect": ("builder.backends.grounding_dino", "validation.detection", "transformers", "tiny_detector"),
    "eval": ("eval_speed", "evaluation.orchestration.pipeline", "timm"),
    "clip": ("open_clip", "safetensors", "evaluation.model_formats.models", "evaluation.orchestration.external"),
}
# The distributions whose versions a run records (the lent image's own and the carried kit's).
VERSIONED = (
    "hard-spurious-imagenet",
    "torch",
    "torchvision",
    "transformers",
    "diffusers",
    "segment-anything",
    "open-clip-torch",
    "timm",
    "numpy",
    "pillow",
    "opencv-python-headless",
    "isal",
    "ftfy",
    "wcwidth",
    "safetensors",
    "huggingface-hub",
    "pyarrow",
    "pandas",
    "scipy",
    "webdataset",
    "pytest",
)


def package_versions() -> dict[str, str | None]:
    from importlib import metadata

    found: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def stage_import_problems(stage: str, tiny: bool) -> list[str]:
    """Why `stage` cannot run here: each missing package (and the module that wanted it)."""
    import importlib

    problems = [f"{INSTALL.get(m, m)} (not installed)" for m in missing_requirements(stage, tiny)]
    for module in STAGE_MODULES[stage]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            problems.append(f"{exc.name} (imported by {module})")
        except ImportError as exc:
            problems.append(f"{module}: {exc}")
    return list(dict.fromkeys(problems))


def preflight(stages: tuple[str, ...], tiny: bool) -> int:
    """Print every stage's missing imports and the versions found; 1 when any stage lacks one."""
    missing = {stage: stage_import_problems(stage, tiny) for stage in stages}
    for stage, problems in missing.items():
        print(f"{stage:<8} " + ("ready" if not problems else "MISSING " + "; ".join(problems)))
    print("versions: " + ", ".join(f"{k} {v or 'absent'}" for k, v in package_versions().items()))
    return 1 if any(missing.values()) else 0


def math_flags() -> dict:
    import torch

    return {
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def write_figures(path: Path, name: str, tiny: bool, started: float, rows: list, ctx, finished: bool) -> None:
    """The JSON so far, rewritten after every stage: a run stopped at its time limit keeps what it measured."""
    figures = {
        "device": name,
        "tiny": tiny,
        "finished": finished,
        "total_s": time.perf_counter() - started,
        "rows": [asdict(r) for r in rows],
        "packages": package_versions(),
        "math": math_flags(),
        "stages": ctx.notes if ctx is not None else {},
    }
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(figures, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(temporary, path)


def missing_requirements(stage: str, tiny: bool) -> list[str]:
    needed = list(REQUIREMENTS[stage])
    if tiny or stage == "sd":  # the toy models, and SD's offline CLIP tokenizer, come from tests/
        needed.append("pytest")
    return [name for name in needed if importlib.util.find_spec(name) is None]


# --- extract -----------------------------------------------------------------------------------


def bench_extract(ctx: Context) -> list[Row]:
    import extract_gpu

    from builder.extract.shard_builder import ExtractConfig

    device, batch = str(ctx.device), ctx.sizes.batch["extract"]
    if ctx.tiny:
        from tiny_models import build_tiny_sam

        masker, sam_name = (
            extract_gpu.sam_masker(build_tiny_sam(), "auto", "random-init tiny SAM", device, batch),
            "tiny SAM",
        )
    else:
        masker, sam_name = extract_gpu.make_sam("vit_h", None, device, batch), "SAM vit_h"
    if ctx.lama_checkpoint and Path(ctx.lama_checkpoint).is_file():
        inpainter = extract_gpu.make_lama(ctx.lama_checkpoint, device, batch, ctx.lama_trust)
        lama_note = f"LaMa {Path(ctx.lama_checkpoint).name}"
    else:  # the 205 MB file cannot be carried: its published architecture at random weights
        from big_lama import random_big_lama

        from builder.backends.lama import LamaInpainter

        lama = random_big_lama()
        inpainter = LamaInpainter(lama, Path("random-init big-lama"), "not-a-checkpoint", device, batch)
        lama_note = (
            f"LaMa: big-lama's architecture, random init ({sum(p.numel() for p in lama.parameters()):,} parameters)"
        )
    ctx.notes["extract"] = {"sam_precision": masker.precision, "lama_precision": inpainter.math, "lama": lama_note}
    data = extract_gpu.synth_jpegs(
        ctx.sizes.extract_images, extract_gpu.SMALL_SIZES if ctx.tiny else extract_gpu.REAL_SIZES
    )
    masker.compile_encoder = ctx.compile_encoder
    print(f"  {sam_name} (random init, encoder in {masker.precision}), {lama_note}; {len(data)} images, batch {batch}")
    dilation = ExtractConfig.__dataclass_fields__["dilation"].default  # `hsi extract`'s
    extract_gpu.run_sweep(batch, data[:batch], masker, inpainter, ctx.sync, dilation)  # warm-up: kernels, allocator
    totals = extract_gpu.run_sweep(batch, data, masker, inpainter, ctx.sync, dilation)
    serial, model = extract_gpu.extract_rates(totals, len(data))
    if ctx.compile_encoder:  # compiled in the warm-up, so the timed runs exclude it
        ctx.notes["extract"]["encoder_compile_s"] = round(masker.compile_seconds, 2)
        print(f"  SAM encoder compiled (torch.compile) in {masker.compile_seconds:.1f} s, apart from the timed runs")
    print(
        "  " + ", ".join(f"{part} {totals[part]:.2f} s" for part in extract_gpu.STAGES if part != "lama" or inpainter)
    )
    print(f"  model stages {model:.2f} images/s; serial (every stage one after another) {serial:.2f} images/s")
    with_lama = inpainter is not None
    return [
        Row(
            "extract",
            model,
            f"{EXTRACT_TARGET:g} images/s",
            model / EXTRACT_TARGET,
            f"{sam_name} + {'LaMa' if with_lama else 'no LaMa (upper bound)'}, encoder {masker.precision}, "
            f"batch {batch}, model stages; "
            f"serial {serial:.2f}",
            dict(totals),
        )
    ]


# --- Stable Diffusion inpainting ---------------------------------------------------------------


def build_sd_pipeline(tiny: bool, seed: int = 0):
    """A randomly initialised StableDiffusionInpaintPipeline: SD-1.5 inpainting's configuration, or
    tests/tiny_sd.py's toy one; no safety checker, as `hsi scgs` loads it."""
    import torch
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionInpaintPipeline, UNet2DConditionModel
    from tiny_sd import SCHEDULER, clip_tokenizer, special_token_ids
    from transformers import CLIPTextConfig, CLIPTextModel

    tokenizer = clip_tokenizer()
    if tiny:
        from tiny_sd import TEXT_ENCODER, UNET, UNET_BLOCKS, VAE, VAE_BLOCKS

        unet_config, vae_config, text_config = {**UNET_BLOCKS, **UNET}, {**VAE_BLOCKS, **VAE}, TEXT_ENCODER
    else:
        unet_config, vae_config, text_config = SD_UNET, SD_VAE, SD_TEXT_ENCODER
    torch.manual_seed(seed)
    return StableDiffusionInpaintPipeline(
        vae=AutoencoderKL(**vae_config),
        text_encoder=CLIPTextModel(
            CLIPTextConfig(vocab_size=len(tokenizer), **text_config, **special_token_ids(tokenizer))
        ),
        tokenizer=tokenizer,
        unet=UNet2DConditionModel(**unet_config),
        scheduler=PNDMScheduler(**SCHEDULER),  # SD-1.x's scheduler_config values (tests/tiny_sd.py)
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )


def scgs_inputs(count: int, side: int = 224, seed: int = 0):
    """`count` canvases (uint8, side x side), keep-masks (a centred square, the CAM region SCGS
    keeps), prompts' class names and seeds."""
    from builder.core.classes import imagenet_classes

    rng = np.random.default_rng(seed)
    keep = np.zeros((side, side), bool)
    keep[side // 4 : 3 * side // 4, side // 4 : 3 * side // 4] = True
    names = [c.name for c in imagenet_classes()]
    images = [rng.integers(0, 256, (side, side, 3), dtype=np.uint8) for _ in range(count)]
    return images, [keep] * count, [names[(n * 97) % len(names)] for n in range(count)], list(range(count))


def bench_sd(ctx: Context) -> list[Row]:
    import torch
    from diffusers.utils import logging as diffusers_logging

    from builder.backends.sd_inpaint import GenerationSettings, SdInpainter

    defaults = scgs_defaults()
    batch = ctx.sizes.batch["sd"]
    dtype = torch.float16 if ctx.on_cuda else torch.float32  # as `--sd-dtype auto` chooses
    dtype_name = str(dtype).removeprefix("torch.")
    steps = 3 if ctx.tiny else defaults.steps
    settings = GenerationSettings(steps=steps, guidance=defaults.guidance, strength=defaults.strength, batch_size=batch)
    pipeline = build_sd_pipeline(ctx.tiny)
    verbosity = diffusers_logging.get_verbosity()
    diffusers_logging.set_verbosity_error()  # `to(dtype)` warns of modules kept in float32: SD-1.5 has none
    try:
        pipeline = pipeline.to(device=ctx.device, dtype=dtype)
    finally:
        diffusers_logging.set_verbosity(verbosity)
    name = "tiny SD inpainting" if ctx.tiny else "SD-1.5 inpainting"
    inpainter = SdInpainter(pipeline, f"random-init {name}", "not-a-checkpoint", str(ctx.device), dtype_name)
    side = inpainter.native_size
    unet_batch = 2 * batch if settings.guidance > 1 else batch  # classifier-free guidance doubles it
    watch = Stopwatch(ctx.sync)
    watch.wrap(pipeline.text_encoder, "forward", "text encoder")
    watch.wrap(pipeline.unet, "forward", "unet")
    watch.wrap(pipeline.vae, "encode", "vae encode")
    watch.wrap(pipeline.vae, "decode", "vae decode")
    count = batch * ctx.sizes.sd_batches
    images, keep, names, seeds = scgs_inputs(count)
    prompts = [inpainter.prompt_for(n, settings) for n in names]
    print(
        f"  {name} (random init), {side} px, {dtype_name}, batch {batch} (UNet batch {unet_batch}, guidance "
        f"{settings.guidance}), --steps {settings.steps} at --strength {settings.strength}; {count} images"
    )
    with warnings.catch_warnings():
        # random weights overflow fp16 into NaN; the time is the same, numpy's cast warning is noise
        warnings.simplefilter("ignore", RuntimeWarning)
        warm = GenerationSettings(steps=2, guidance=settings.guidance, strength=settings.strength, batch_size=batch)
        inpainter.generate(images[:batch], keep[:batch], prompts[:batch], seeds[:batch], warm, progress=False)
        watch.reset()
        watch.time("total", inpainter.generate, images, keep, prompts, seeds, settings, progress=False)
    total = watch.seconds.pop("total")
    parts = dict(watch.seconds)
    parts["other (scheduler, resizing, paste-back)"] = max(0.0, total - sum(parts.values()))
    # counted, not computed: PNDM evaluates one timestep twice, so 30 steps at 0.9 are 28 evaluations
    unet_steps = watch.calls["unet"] // ctx.sizes.sd_batches
    per_step = watch.seconds["unet"] / max(1, watch.calls["unet"])
    print("  " + ", ".join(f"{k} {v:.2f} s ({v / total:.0%})" for k, v in parts.items()))
    print(
        f"  {count / total:.3f} images/s at {unet_steps} UNet steps per batch; "
        f"{per_step * 1000:.1f} ms per UNet step (batch {unet_batch})"
    )
    return [
        Row(
            "sd",
            count / total,
            "- (none set)",
            None,
            f"{name} {side} px {dtype_name}, batch {batch}, {unet_steps} UNet steps "
            f"(--steps {settings.steps}), {per_step * 1000:.1f} ms per UNet step",
            {**parts, "per UNet step": per_step},
        )
    ]


# --- Grounding DINO ----------------------------------------------------------------------------


def grounding_dino_processor(tiny: bool, wnids):
    from tiny_detector import SPECIAL_TOKENS, vocabulary
    from transformers import BertTokenizer, GroundingDinoImageProcessor, GroundingDinoProcessor

    words = vocabulary(wnids)
    if not tiny:  # BERT's vocabulary size; BERT marks its spare entries [unusedN]
        words += [f"[unused{n}]" for n in range(GDINO_BERT["vocab_size"] - len(words))]
    assert words[: len(SPECIAL_TOKENS)] == SPECIAL_TOKENS
    tokenizer = BertTokenizer(vocab={word: i for i, word in enumerate(words)}, do_lower_case=True)
    size = {"shortest_edge": 64, "longest_edge": 96} if tiny else GDINO_RESIZE
    return GroundingDinoProcessor(image_processor=GroundingDinoImageProcessor(size=size), tokenizer=tokenizer)


def build_grounding_dino(tiny: bool, vocab_size: int, seed: int = 0):
    import torch
    from transformers import BertConfig, GroundingDinoConfig, GroundingDinoForObjectDetection, SwinConfig

    if tiny:
        from tiny_detector import BERT_TEXT_ENCODER, DETECTOR, SWIN_BACKBONE

        backbone = SwinConfig(**SWIN_BACKBONE, out_features=["stage2", "stage3", "stage4"])
        text, detector = BertConfig(vocab_size=vocab_size, **BERT_TEXT_ENCODER), DETECTOR
    else:
        backbone, text, detector = SwinConfig(**GDINO_SWIN), BertConfig(**GDINO_BERT), GDINO_DETECTOR
    torch.manual_seed(seed)
    config = GroundingDinoConfig(backbone_config=backbone, text_config=text, **detector)
    return GroundingDinoForObjectDetection(config).eval()


@dataclass(frozen=True)
class TimedDecode:
    """A detection item's loader timed into the "decode" bucket; its header size still groups the
    image by aspect, as `hsi validate --boxes` batches it."""

    watch: Stopwatch
    file: Callable[[], np.ndarray]  # validation.detection.FileImage

    def __call__(self) -> np.ndarray:
        return self.watch.time("decode", self.file)

    def size(self) -> tuple[int, int] | None:
        return self.file.size()


def bench_detect(ctx: Context) -> list[Row]:
    from extract_gpu import REAL_SIZES, SMALL_SIZES, synth_jpegs

    from builder.backends.grounding_dino import GroundingDino
    from builder.core.classes import imagenet_classes
    from validation.detection import DetectionItem, file_loader, redetect

    batch = ctx.sizes.batch["detect"]
    wnids = [c.wnid for c in imagenet_classes()]
    processor = grounding_dino_processor(ctx.tiny, wnids)
    model = build_grounding_dino(ctx.tiny, len(processor.tokenizer))
    name = "tiny Grounding DINO" if ctx.tiny else "Grounding DINO base"
    detector = GroundingDino(model, processor, f"random-init {name}", {}, str(ctx.device), batch)
    watch = Stopwatch(ctx.sync)
    folder = ctx.folder / "detect"
    folder.mkdir()
    items = []
    for n, (jpeg, boxes) in enumerate(synth_jpegs(ctx.sizes.detect_images, SMALL_SIZES if ctx.tiny else REAL_SIZES)):
        path = folder / f"image{n:03d}.JPEG"
        path.write_bytes(jpeg)
        load = TimedDecode(watch, file_loader(str(path)))  # the production decode, and its header size
        items.append(DetectionItem(path.stem, wnids[(n * 97) % len(wnids)], tuple(boxes), load))
    print(f"  {name} (random init), {len(items)} images of {'small' if ctx.tiny else 'ImageNet'} sizes, batch {batch}")
    watch.wrap(model, "forward", "model")
    redetect(items[:batch], detector, batch_size=batch)  # warm-up
    watch.reset()
    report = watch.time("total", redetect, items, detector, batch_size=batch)
    assert len(report.images) == len(items), (len(report.images), len(items))
    total = watch.seconds["total"]
    parts = {
        "decode": watch.seconds["decode"],
        "model": watch.seconds["model"],
        "processor + post-processing + IoUs": max(0.0, total - watch.seconds["decode"] - watch.seconds["model"]),
    }
    print("  " + ", ".join(f"{k} {v:.2f} s ({v / total:.0%})" for k, v in parts.items()))
    print(f"  {len(items) / total:.2f} images/s; model alone {len(items) / parts['model']:.2f} images/s")
    return [
        Row(
            "detect",
            len(items) / total,
            "- (none set)",
            None,
            f"{name}, batch {batch}, `hsi validate --boxes` path; model alone {len(items) / parts['model']:.2f}",
            parts,
        )
    ]


# --- eval --------------------------------------------------------------------------------------


def eval_dataset(ctx: Context) -> Path:
    """The synthetic composed set the eval and clip stages share, composed once."""
    from eval_speed import synthetic_dataset

    if "eval_dataset" not in ctx.cache:
        started = time.perf_counter()
        workers = 1 if ctx.tiny else min(8, os.cpu_count() or 1)
        ctx.cache["eval_dataset"] = synthetic_dataset(ctx.folder / "eval", ctx.sizes.eval_source_images, workers)
        print(f"  synthetic composed set in {time.perf_counter() - started:.1f} s")
    return ctx.cache["eval_dataset"]


def eval_row(stage: str, measured, what: str, extra_seconds: dict | None = None) -> Row:
    """An eval-path row: the figure is the steady part's images/s (every batch after the first),
    its ratio to forward-only against the target; the whole run's rate and start-up beside it."""
    steady = measured.steady_rate or measured.rate("eval_path")
    ratio = measured.steady_ratio or measured.ratio
    return Row(
        stage,
        steady,
        f"{EVAL_RATIO_TARGET:g} x forward-only",
        ratio / EVAL_RATIO_TARGET,
        f"steady eval / forward-only {ratio:.3f}; whole run {measured.rate('eval_path'):.1f} images/s with "
        f"{min(measured.startup):.2f} s loader start-up; forward-only {measured.rate('forward'):.1f}, "
        f"data path alone {measured.rate('data'):.1f}; {what}",
        {
            **(extra_seconds or {}),
            "forward-only": min(measured.forward),
            "eval path": min(measured.eval_path),
            "eval start-up": min(measured.startup),
            "eval steady": min(measured.steady),
            "data": min(measured.data),
        },
    )


def print_measured(label: str, measured, batch: int, workers: int) -> None:
    print(
        f"  {label}: {measured.images} images, batch {batch}, {workers} loader workers: forward-only "
        f"{measured.rate('forward'):.1f}, eval path {measured.rate('eval_path'):.1f} (steady part "
        f"{measured.steady_rate or 0:.1f} after {min(measured.startup):.2f} s start-up), data path alone "
        f"{measured.rate('data'):.1f} images/s; steady eval / forward-only {measured.steady_ratio or 0:.3f}"
    )


def bench_eval(ctx: Context) -> list[Row]:
    from eval_speed import measure, random_init_model

    from evaluation.orchestration.pipeline import RunSettings

    batch = ctx.sizes.batch["eval"]
    dataset = eval_dataset(ctx)
    rows = []
    # `hsi eval`'s defaults, then its documented fast mode: --amp and --channels-last (autocast is CUDA's only)
    modes = (("", False, False), ("+amp", ctx.eval_amp, True))
    for arch in TINY_EVAL_MODELS if ctx.tiny else EVAL_MODELS:
        loaded = random_init_model(arch, ctx.folder / "eval", ctx.device)
        for suffix, amp, channels_last in modes:  # the plain run first: channels_last stays on the module
            settings = RunSettings(
                split="val",
                batch_size=batch,
                workers=ctx.eval_workers,
                device=str(ctx.device),
                amp=amp,
                channels_last=channels_last,
                progress=False,
            )
            measured = measure(loaded, dataset, settings, ctx.device, ctx.sizes.eval_repeat)
            flags = "hsi eval's defaults (fp32)"
            if amp:
                autocast = f"--amp {amp}" if ctx.on_cuda else f"--amp {amp} (no autocast on the CPU)"
                flags = f"{autocast} --channels-last"
            print_measured(f"{arch} {flags}", measured, batch, ctx.eval_workers)
            rows.append(eval_row(f"eval:{arch}{suffix}", measured, flags))
        del loaded
        free_memory(ctx)
    return rows


# --- clip --------------------------------------------------------------------------------------


def clip_weights(ctx: Context) -> tuple[str, str]:
    """(spec, architecture) of random CLIP weights saved as a safetensors file: open_clip's ViT-B-32,
    or for --tiny the tests' hsi-tiny-clip (its config file beside the weights)."""
    import open_clip
    import torch
    from safetensors.torch import save_file

    folder = ctx.folder / "clip"
    folder.mkdir(parents=True, exist_ok=True)
    if ctx.tiny:
        from tiny_clip import TINY_ARCH, save_tiny_openclip, tiny_openclip_spec

        return tiny_openclip_spec(save_tiny_openclip(folder / "tiny-clip.safetensors")), TINY_ARCH
    torch.manual_seed(0)
    model = open_clip.create_model(CLIP_ARCH)
    path = folder / f"{CLIP_ARCH}_random_init.safetensors"
    save_file({name: tensor.contiguous() for name, tensor in model.state_dict().items()}, str(path))
    return f"openclip:{CLIP_ARCH}:{path}", CLIP_ARCH


def bench_clip(ctx: Context) -> list[Row]:
    from eval_speed import measure

    from evaluation.model_formats.models import ModelOptions, load_model
    from evaluation.orchestration.external import open_dataset
    from evaluation.orchestration.pipeline import RunSettings
    from evaluation.zero_shot.text_cache import CACHE_VARIABLE

    batch = ctx.sizes.batch["clip"]
    dataset = eval_dataset(ctx)
    spec, arch = clip_weights(ctx)
    # the full run builds all 1000 classes' text classifiers, as on the paper's set; --tiny only the set's own
    present = tuple(sorted(open_dataset(dataset, split="val", announce=lambda _: None).metadata["wnid"].unique()))
    options = ModelOptions(classes=present if ctx.tiny else None, device=str(ctx.device))
    previous = os.environ.get(CACHE_VARIABLE)
    os.environ[CACHE_VARIABLE] = str(ctx.folder / "zero-shot-cache")  # empty: the text pass is timed; no user cache
    try:
        started = time.perf_counter()
        loaded = load_model(spec, options)
        ctx.sync()
        text_s = time.perf_counter() - started
    finally:
        if previous is None:
            del os.environ[CACHE_VARIABLE]
        else:
            os.environ[CACHE_VARIABLE] = previous
    classes = len(loaded.module.label_space)
    texts = classes * len({t for name in loaded.module.set_names for t in loaded.module.template_sets[name]})
    print(f"  {arch}: text classifiers of {', '.join(loaded.module.set_names)}: {texts} texts in {text_s:.1f} s")
    settings = RunSettings(
        split="val", batch_size=batch, workers=ctx.eval_workers, device=str(ctx.device), progress=False
    )
    measured = measure(loaded, dataset, settings, ctx.device, ctx.sizes.eval_repeat)
    print_measured(f"{arch} zero-shot", measured, batch, ctx.eval_workers)
    what = f"{len(loaded.module.set_names)} prompt sets from one image pass; text pass {texts} texts {text_s:.1f} s"
    return [eval_row(f"clip:{arch}", measured, what, {"text pass": text_s})]


BENCHES: dict[str, Callable[[Context], list[Row]]] = {
    "extract": bench_extract,
    "sd": bench_sd,
    "detect": bench_detect,
    "eval": bench_eval,
    "clip": bench_clip,
}


def free_memory(ctx: Context) -> None:
    """Drop the last stage's models so the next one has the whole GPU."""
    gc.collect()
    if ctx.on_cuda:
        import torch

        torch.cuda.empty_cache()


def run_stage(stage: str, ctx: Context) -> list[Row]:
    missing = missing_requirements(stage, ctx.tiny)
    if missing:
        why = ", ".join(INSTALL.get(m, m) for m in missing)
        return [Row(stage, skipped=f"{why} {'is' if len(missing) == 1 else 'are'} not installed")]
    started = time.perf_counter()
    if ctx.on_cuda:
        import torch

        torch.cuda.reset_peak_memory_stats(ctx.device)
    try:
        rows = BENCHES[stage](ctx)
    except ModuleNotFoundError as exc:  # a package the stage imports on its way, past the checks above
        return [Row(stage, skipped=f"{exc.name} is not installed")]
    except Exception as exc:  # noqa: BLE001 - one stage's failure is a row; the suite goes on
        traceback.print_exc()
        return [Row(stage, failed=f"{type(exc).__name__}: {str(exc)[:200]}")]
    finally:
        free_memory(ctx)
    wall = time.perf_counter() - started
    print(f"  stage wall time {wall:.1f} s (building models, warm-up and the timed runs)")
    if ctx.on_cuda:
        import torch

        peak = torch.cuda.max_memory_allocated(ctx.device) / 2**30
        ctx.notes.setdefault(stage, {})["peak_gpu_memory_gib"] = round(peak, 3)
        print(f"  peak GPU memory {peak:.2f} GiB")
    rows[0].wall_s = wall  # a stage's rows share its wall time: it is charged to the first
    return rows


def summary(rows: list[Row], total_s: float, on_cuda: bool, tiny: bool) -> str:
    width = max([22, *(len(row.stage) for row in rows)])
    lines = [
        "summary" + (" (tiny models: the figures show the suite runs; the targets are for one H200)" if tiny else ""),
        f"{'stage':<{width}} {'images/s':>10}  {'target':<20} {'ratio to target':>15} {'wall s':>7}  what",
    ]
    for row in rows:
        if row.skipped or row.failed:
            lines.append(
                f"{row.stage:<{width}} {'skipped: ' + row.skipped if row.skipped else 'failed: ' + row.failed}"
            )
            continue
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else "-"
        wall = f"{row.wall_s:.1f}" if row.wall_s is not None else ""
        lines.append(
            f"{row.stage:<{width}} {row.images_per_s:>10.3f}  {row.target:<20} {ratio:>15} {wall:>7}  {row.what}"
        )
    lines.append(f"total wall time {total_s:.1f} s")
    if on_cuda and total_s > CUDA_LIMIT_S:
        lines.append(f"WARNING: the suite took {total_s:.0f} s, over its {CUDA_LIMIT_S} s limit on one GPU")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (cpu implies --tiny)")
    parser.add_argument(
        "--only", type=parse_stages, default=STAGES, help=f"comma-separated stages (default {','.join(STAGES)})"
    )
    parser.add_argument(
        "--batch-size",
        type=parse_batch_sizes,
        default={},
        help="N for every stage or STAGE=N pairs, e.g. extract=4,sd=8 (default: each command's own default)",
    )
    parser.add_argument("--tiny", action="store_true", help="toy models and sizes: a check that runs in seconds")
    parser.add_argument(
        "--lama-checkpoint",
        default=os.environ.get("LAMA_MODEL"),
        help="the big-lama TorchScript file (default $LAMA_MODEL); without it LaMa is not measured",
    )
    from builder.backends.code_trust import TRUST_CODE_FLAG, TRUST_CODE_HELP, TRUST_FILE_FLAG, TRUST_FILE_HELP

    parser.add_argument(TRUST_FILE_FLAG, action="append", default=[], metavar="SHA256", help=TRUST_FILE_HELP)
    parser.add_argument(TRUST_CODE_FLAG, action="store_true", help=TRUST_CODE_HELP)
    parser.add_argument(
        "--eval-workers",
        type=int,
        help="eval DataLoader workers (default: hsi eval's 2 on the CPU, min(8, cores) on CUDA, "
        "where one GPU consumes more images than two workers decode)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="also write the figures to this JSON file, after every stage (package versions, precision, TF32 flags, "
        "peak GPU memory included)",
    )
    parser.add_argument(
        "--eval-amp",
        choices=("fp16", "bf16"),
        default="bf16",
        help="the autocast dtype of the eval stage's `--amp --channels-last` rows (default bf16, the safe choice on "
        "H100/H200)",
    )
    parser.add_argument(
        "--compile-encoder", action="store_true", help="extract: torch.compile SAM's encoder (compile time shown apart)"
    )
    parser.add_argument(
        "--strict", action="store_true", help="a skipped stage is a failure (exit 1), as it always is on CUDA"
    )
    parser.add_argument(
        "--preflight",
        action="store_true",
        help="print each stage's missing imports and the package versions found, then stop (exit 1 if any is missing)",
    )
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    if args.preflight:
        return preflight(args.only, args.tiny or args.device == "cpu")
    if importlib.util.find_spec("torch") is None:
        rows = [Row(stage, skipped="torch is not installed") for stage in args.only]
        print(summary(rows, time.perf_counter() - started, False, True))
        return 0
    import torch

    from builder.backends.torch_base import resolve_device

    device = resolve_device(args.device)
    tiny = args.tiny or device.type == "cpu"
    if tiny and device.type == "cpu":
        # toy ops are too small to split across threads; on a shared machine waiting threads cost seconds
        torch.set_num_threads(1)
    sizes = tiny_sizes() if tiny else full_sizes()
    sizes = Sizes(**{**asdict(sizes), "batch": {**sizes.batch, **args.batch_size}})
    workers = (
        args.eval_workers
        if args.eval_workers is not None
        else 2
        if device.type == "cpu"
        else min(8, os.cpu_count() or 2)
    )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"
    print(
        f"gpu_suite: {name}; torch {torch.__version__}; {'tiny models' if tiny else 'published architectures'}, "
        f"random weights; stages {','.join(args.only)}"
    )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="hsi-gpu-suite-") as folder:
        from builder.backends.code_trust import CodeTrust

        trust = CodeTrust.of(args.trust_file, args.trust_code)
        ctx = Context(device, tiny, sizes, args.lama_checkpoint, trust, Path(folder), workers)
        ctx.compile_encoder = args.compile_encoder
        ctx.eval_amp = args.eval_amp
        for stage in args.only:
            print(f"== {stage}", flush=True)
            stage_rows = run_stage(stage, ctx)
            for row in stage_rows:
                if row.skipped or row.failed:
                    print(f"  {'skipped: ' + row.skipped if row.skipped else 'failed: ' + row.failed}")
            rows += stage_rows
            if args.json:
                write_figures(args.json, name, tiny, started, rows, ctx, finished=False)
            sys.stdout.flush()
    total = time.perf_counter() - started
    print(summary(rows, total, device.type == "cuda", tiny))
    if args.json:
        write_figures(args.json, name, tiny, started, rows, ctx, finished=True)
    skipped = [r.stage for r in rows if r.skipped]
    if skipped and (device.type == "cuda" or args.strict):  # a GPU window is too rare to leave a stage unmeasured
        print(f"gpu_suite: stages skipped: {', '.join(skipped)} (run --preflight; carry the missing wheels)")
        return 1
    return 1 if any(r.failed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
