"""`hsi export DATASET --imagefolder DIR`: a composed dataset as image folders (the paper's layout)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "write a composed dataset as image folders (the paper's <size>/Group_<n>/<wnid>/ layout, or ours by group)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", type=Path, help="a composed dataset folder (OUT/<config> of hsi compose)")
    parser.add_argument(
        "--imagefolder",
        type=Path,
        required=True,
        help="folder to write: DIR/<split>/<size>/Group_<n>/<wnid>/<id>_<n>_<size>.JPEG; must be new, "
        "empty, or an earlier export (with --overwrite)",
    )
    parser.add_argument(
        "--layout",
        choices=["paper", "groups"],
        default="paper",
        help="paper: Group_1-4 = CeO, CoO, CeR, CoR; groups: our group names, any config",
    )
    parser.add_argument("--split", action="append", dest="splits", help="split to export (repeatable; default all)")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier export in DIR")


def run(args: argparse.Namespace) -> int:
    from builder.compose.export import export_imagefolder

    summary = export_imagefolder(
        args.dataset, args.imagefolder, layout=args.layout, splits=args.splits, overwrite=args.overwrite
    )
    counts = ", ".join(f"{split}: {n}" for split, n in sorted(summary.by_split.items()))
    print(f"exported {summary.files} images to {summary.folder} ({counts}); list in {summary.folder}/_export.json")
    if summary.skipped:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(summary.skipped.items()))
        print(
            f"warning: skipped {sum(summary.skipped.values())} samples whose metadata cannot be exported safely "
            f"({reasons}); each is a row under `skipped` in {summary.folder}/_export.json",
            file=sys.stderr,
        )
    if summary.placeholders:
        print(
            f"warning: the images hold {summary.classes_present} of the dataset's {summary.classes} classes; every "
            f"ImageFolder root has all {summary.classes} class folders ({summary.placeholders} empty placeholders), "
            "so that folder order is label order: pass allow_empty=True to torchvision's ImageFolder, and "
            f"--class-map {summary.folder}/classes.txt to timm's validate.py (it numbers only folders holding "
            "images, and would score against wrong labels without it)",
            file=sys.stderr,
        )
    return 0
