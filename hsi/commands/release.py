"""`hsi release`: gather composed, validated datasets into a loadable release folder with a card."""

from __future__ import annotations

import argparse
from pathlib import Path

from hsi.commands.common import out_location, readable_folder

HELP = "gather validated composed datasets into a release folder (shards, README card, previews, _info.json)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "datasets",
        nargs="+",
        type=out_location,
        metavar="DATASET_DIR",
        help="composed dataset folders (OUT/<config>, or s3://... URLs), each with _info.json and a passing "
        "validation.json",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="release folder; its name is the dataset name users load, e.g. hard-spurious-imagenet",
    )
    parser.add_argument(
        "--version",
        dest="release_version",
        default=None,
        help="release version vMAJOR.MINOR.PATCH (a change of any sample needs a new minor or major)",
    )
    parser.add_argument("--change", action="append", default=[], help="a changelog line for this version (repeatable)")
    parser.add_argument(
        "--default-config",
        default=None,
        help="config loaded when none is named (default: hard-spurious-imagenet if given, else the first)",
    )
    parser.add_argument(
        "--previous",
        type=Path,
        default=None,
        help="the previous release folder, for the changelog and the version check",
    )
    parser.add_argument(
        "--parts",
        type=out_location,
        default=None,
        metavar="PARTS",
        help="the parts folder `hsi extract` wrote (OUT/parts or OUT): shipped as the release's `parts` config, "
        "so that `hsi compose --parts RELEASE` (or hf://...) regenerates new positions and sizes without "
        "ImageNet or a GPU; without it the release cannot be composed from",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing release folder")
    parser.add_argument(
        "--title", default=None, help="the card's title (default: the paper's benchmark name, or 'a custom build')"
    )
    parser.add_argument(
        "--description", default=None, help="the card's introduction (default: rendered from the configs' specs)"
    )
    parser.add_argument(
        "--sign",
        default=None,
        metavar="KEY|sigstore",
        help="sign the release folder with OpenSSF Model Signing (release.sig, over every file's sha256): KEY is an "
        "elliptic-curve private key in PEM (P-256/384/521; an encrypted one's password in HSI_SIGNING_KEY_PASSWORD), "
        "`sigstore` signs keyless through Sigstore (online); needs the `sign` extra",
    )
    parser.add_argument(
        "--results",
        nargs="+",
        type=Path,
        default=[],
        metavar="DIR",
        help="hsi eval output folders (or model folders): their eval.json reports become the card's Results section",
    )


def run(args: argparse.Namespace) -> int:
    import sys

    from cards.release import build_release
    from cards.signature import signer_from_option, signer_words

    signer = signer_from_option(args.sign) if args.sign is not None else None  # refused before anything is read
    release = build_release(
        args.out,
        [readable_folder(dataset) for dataset in args.datasets],
        overwrite=args.overwrite,
        version=args.release_version,
        changes=args.change,
        default_config=args.default_config,
        previous_release=args.previous,
        results_dirs=args.results,
        title=args.title,
        description=args.description,
        parts_dir=readable_folder(args.parts),
        sign=signer,
        announce=lambda note: print(f"hsi release: note: {note}", file=sys.stderr),
    )
    signed = f", signed {signer_words(signer.record())}" if signer is not None else ""
    print(f"release written to {release}{signed} (load it with load_dataset({release.name!r}) from {release.parent})")
    return 0
