"""`hsi extract`: ImageNet images + boxes -> parts shards (object crop, mask, inpainted background)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hsi.commands.common import (
    add_imagenet_flags,
    add_run_flags,
    add_trust_flags,
    out_location,
    positive_int,
    run_options,
    staged_out,
)

HELP = "cut out each image's object by its box, erase every box and inpaint the background (writes parts shards)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_imagenet_flags(
        parser,
        source_help="ImageNet root: the folder holding train/ and val/, or Kaggle's ILSVRC/ (or its parent); or "
        "such a folder on an object store (s3://BUCKET/PATH, gs://, file://), copied to the staging folder first",
        split_default=None,
        split_help="train or val (default val)",
        boxes_help="a folder of Pascal-VOC XMLs or a LOC_<split>_solution.csv (default: searched under --source)",
        required=True,
        source_type=out_location,
    )
    parser.add_argument(
        "--out",
        type=out_location,
        required=True,
        help="output folder or object store URL (s3://BUCKET/PATH); parts go to OUT/parts/",
    )
    parser.add_argument("--config", type=Path, help="YAML file with extract settings; flags override it")
    parser.add_argument("--masker", help="box (default, model-free) or sam")
    parser.add_argument(
        "--inpainter", help="patchmatch (default, model-free texture fill), telea (model-free, faster, smears) or lama"
    )
    parser.add_argument(
        "--inpaint-scale",
        type=inpaint_scale,
        help="patchmatch only: canvas (default: fill the photo as compose sees it, 224 x 224, and paste the "
        "upscaled fill inside the mask only), full (native resolution) or a short side in px",
    )
    parser.add_argument(
        "--dilation",
        type=int,
        help="side of the square kernel that grows the erase mask (default 15, the paper's; 0 disables)",
    )
    parser.add_argument(
        "--object-box",
        choices=["largest", "first", "last"],
        help="which box is the object to paste later (default largest; the paper pasted the last)",
    )
    parser.add_argument(
        "--crop-margin",
        type=int,
        help="pixels of context stored around the object box in each crop (default 0); 1 gives compose "
        "--paper-exact every pixel of the paper's crops",
    )
    parser.add_argument("--batch-size", type=positive_int, help="images per masker/inpainter call (default 8)")
    parser.add_argument(
        "--io-threads",
        type=positive_int,
        help="threads per process that decode JPEGs ahead of the models and encode parts behind them (default 4)",
    )
    parser.add_argument(
        "--max-pixels",
        type=positive_int,
        help="refuse images with more pixels than this "
        "(decompression bombs; also Pillow's own limit, default 120,000,000)",
    )
    parser.add_argument(
        "--batch-pixels",
        type=positive_int,
        help="most pixels of the images in one masker/inpainter "
        "batch (default 50,000,000; a larger image runs alone); bounds memory, not the output",
    )
    parser.add_argument(
        "--max-skip-fraction",
        type=float,
        help="stop (exit 1, no manifest) when more than this share "
        "of the listed images is skipped (default 0.5; 1 accepts any)",
    )
    parser.add_argument(
        "--telea-radius", type=positive_int, help="neighbourhood radius of the telea inpainter (default 3)"
    )
    parser.add_argument(
        "--sam-model",
        choices=["vit_h", "vit_l", "vit_b", "auto"],
        help="SAM architecture (default vit_h; auto: read it from the checkpoint's tensor shapes)",
    )
    parser.add_argument("--sam-checkpoint", help="SAM checkpoint file (or set HSI_SAM_CHECKPOINT)")
    parser.add_argument(
        "--lama-checkpoint",
        help="big-lama TorchScript file (or set LAMA_MODEL); TorchScript is code, so it loads only with --trust-file "
        "of its sha256 (or trusted_sha256 in --config) or --trust-code",
    )
    add_trust_flags(parser)
    parser.add_argument("--device", help="auto (default), cpu, cuda or cuda:N")
    parser.add_argument(
        "--precision",
        choices=["bf16", "tf32", "fp32"],
        help="the models' math (default bf16 on CUDA, fp32 on the CPU): bf16 runs SAM's image encoder under bf16 "
        "autocast (its mask decoder and LaMa stay float32, with TF32 on CUDA); tf32 allows TF32 matmuls (CUDA "
        "only); fp32 is strict float32. Recorded in the settings: a folder begun under another is refused",
    )
    parser.add_argument(
        "--compile-encoder",
        action="store_true",
        default=None,
        help="torch.compile SAM's image encoder (speed only; compile time is spent once per process)",
    )
    parser.add_argument("--gpus", help="all or a list like 0,1: one process per GPU")
    add_run_flags(parser, shard_size="--config's, else 256")


def inpaint_scale(text: str) -> str | int:
    from builder.backends.patchmatch import parse_scale
    from builder.core.config import ConfigError

    try:
        return parse_scale(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_config(args: argparse.Namespace):
    from builder.core.config import load_yaml_mapping
    from builder.extract.shard_builder import ExtractConfig, config_from_mapping, with_overrides

    base = config_from_mapping(load_yaml_mapping(args.config)) if args.config else ExtractConfig()
    overrides = {
        name: getattr(args, name)
        for name in (
            "split",
            "masker",
            "inpainter",
            "dilation",
            "object_box",
            "crop_margin",
            "batch_size",
            "batch_pixels",
            "max_skip_fraction",
            "io_threads",
            "max_pixels",
            "telea_radius",
            "inpaint_scale",
            "sam_model",
            "sam_checkpoint",
            "lama_checkpoint",
            "device",
            "precision",
            "compile_encoder",
            "shard_size",
        )
    }
    config = with_overrides(base, overrides)
    # the trusted files of the config and the flags together; --trust-code only from the command line
    trusted = (*config.trusted_sha256, *(args.trust_file or ()))
    return with_overrides(config, {"trusted_sha256": trusted, "trust_code": args.trust_code or None})


def parse_gpus(text: str | None) -> tuple[int, ...]:
    from builder.core.config import ConfigError

    if not text:
        return ()
    if text == "all":
        import torch

        count = torch.cuda.device_count()
        if count == 0:
            raise ConfigError("--gpus all: no CUDA device is visible; leave --gpus out to run on the CPU")
        return tuple(range(count))
    try:
        return tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise ConfigError(f"--gpus takes 'all' or GPU indexes like 0,1, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    from builder.extract.stage import run_extract

    out = staged_out(args)
    options = run_options(args, parse_gpus(args.gpus))
    summary = run_extract(args.source, out, build_config(args), args.boxes, options=options)
    print(summary.format())
    return 0
