"""`hsi compose`: parts shards + a variant spec -> composite WebDataset shards and `_info.json`."""

from __future__ import annotations

import argparse

from hsi.commands.common import add_run_flags, out_location, resolve_parts, run_options, staged_out

HELP = "paste the extracted objects at chosen sizes and positions on chosen backgrounds (writes composite shards)"


# The choices --paper-exact sets at once (builder.compose.spec.PAPER_EXACT), in --help order.
PAPER_CHOICES = (
    (
        "--donors",
        ["balanced", "per-image", "per-class"],
        "random backgrounds: balanced (every background used about equally; new variants), "
        "per-image (drawn with replacement; the named variants), per-class (the paper's)",
    ),
    (
        "--crop",
        ["inclusive", "exclusive"],
        "object crop: the inclusive VOC box (default) or the paper's exclusive [x0:x1]",
    ),
    (
        "--box-rounding",
        ["none", "float32-normalised"],
        "move boxes as the paper's float32 normalised round trip did (default none)",
    ),
    (
        "--corner-draw",
        ["per-size", "per-composite"],
        "random-corner: one corner per image and size (default) or per composite (the paper)",
    ),
    (
        "--size-rounding",
        ["half-up", "truncate"],
        "ar mode: round the side computed from the ratio half up (default) or truncate it (the paper's int())",
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--parts",
        required=True,
        help="the parts folder written by `hsi extract` (OUT/parts, or OUT itself), a release folder made with "
        "`hsi release --parts`, or a published one: hf://datasets/ORG/NAME@REVISION (its parts config is "
        "downloaded once into $HF_HOME/hsi/parts; no ImageNet, no GPU)",
    )
    parser.add_argument(
        "--variant",
        default="hard-spurious-imagenet",
        help="a named variant (hard-spurious-imagenet, hard-spurious-imagenet-ar, hard-spurious-imagenet-10) "
        "or a path to a YAML spec",
    )
    parser.add_argument(
        "--out",
        type=out_location,
        required=True,
        help="output root, a folder or an object store URL (s3://BUCKET/PATH); the dataset goes to OUT/<config>/",
    )
    parser.add_argument(
        "--name", help="config (folder) name; an overridden spec is otherwise named <variant>-custom-<fingerprint>"
    )
    # not given, each of these keeps the --variant spec's value: no parser default may replace it
    spec = parser.add_argument_group(
        "variant overrides", "each replaces the --variant spec's value (default: the spec's)"
    )
    spec.add_argument("--sizes", help="object sizes in px, e.g. 56,84,112")
    spec.add_argument("--positions", help="placements, e.g. center,top-right,bottom-left,random-corner,xy:0.25,0.75")
    spec.add_argument("--backgrounds", help="background kinds: original, random, gray, noise (paired: -10 only)")
    spec.add_argument(
        "--mode", choices=["square", "ar"], help="square (stretch to s x s) or ar (keep aspect ratio, short side s)"
    )
    spec.add_argument(
        "--paste", choices=["box", "mask"], help="paste the whole box crop (paper) or only the masked object pixels"
    )
    spec.add_argument(
        "--margin", type=int, help="pixels between the object and the canvas edge for corner and edge placements"
    )
    spec.add_argument("--canvas", type=int, help="canvas side in px (default 224)")
    spec.add_argument("--resize-filter", help="bicubic (default), bilinear, lanczos, box or nearest")
    spec.add_argument("--jpeg-quality", type=int, help="JPEG quality of the composites (default 95)")
    spec.add_argument("--seed", type=int, help="seed of random backgrounds, corners, noise and the -10 splits")
    spec.add_argument("--splits", help="parts splits to compose, e.g. val or train,val")
    spec.add_argument(
        "--min-fill",
        type=float,
        metavar="SCORE",
        help="keep only inpainted backgrounds whose fill score (0-1, see docs/build.md) is at least SCORE, as own "
        "backgrounds and as donors; parts with nothing filled are kept; needs parts with fill scores",
    )
    for flag, choices, help_text in PAPER_CHOICES:
        spec.add_argument(flag, choices=choices, help=help_text)
    parser.add_argument(
        "--paper-exact",
        action="store_true",
        help="the paper's object pixels, sizes and donors: --crop exclusive --box-rounding float32-normalised "
        "--size-rounding truncate --donors per-class --corner-draw per-composite (extract the parts with "
        "--crop-margin 1, or images whose moved box starts outside the stored crop are skipped)",
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="build a variant even when the parts lack classes or groups it promises (-10); "
        "the manifest lists what is missing",
    )
    parser.add_argument(
        "--holdout",
        metavar="FROM:FRACTION:NAME",
        help="carve a split from an output split by source image, e.g. train:0.1:val (for -10: a "
        "group-balanced val beside train and test)",
    )
    add_run_flags(parser, shard_size="the variant spec's")


SPEC_FLAGS = (
    "name",
    "sizes",
    "positions",
    "backgrounds",
    "mode",
    "paste",
    "margin",
    "canvas",
    "resize_filter",
    "jpeg_quality",
    "seed",
    "splits",
    "shard_size",
    "holdout",
    "donors",
    "crop",
    "box_rounding",
    "corner_draw",
    "size_rounding",
    "min_fill",
)


def run(args: argparse.Namespace) -> int:
    from builder.compose.spec import PAPER_EXACT
    from builder.compose.stage import compose_dataset

    explicit = {name: getattr(args, name) for name in SPEC_FLAGS if getattr(args, name) is not None}
    overrides = {**(PAPER_EXACT if args.paper_exact else {}), **explicit}
    out = staged_out(args)
    summary = compose_dataset(
        resolve_parts(args.parts),
        args.variant,
        out,
        options=run_options(args),
        overrides=overrides,
        allow_missing=args.allow_missing,
    )
    where = args.store_mirror.store_of(summary.dataset_dir).url if args.store_mirror else summary.dataset_dir
    print(f"dataset: {where}" + (f" ({summary.reused_shards} finished shards reused)" if summary.reused_shards else ""))
    print(summary.table)
    return 0
