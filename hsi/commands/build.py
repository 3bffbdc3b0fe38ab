"""`hsi build`: your ImageNet to a versioned release in one command (extract, compose, validate
with the parts, release with the parts config); the same command again resumes where it stopped.
It takes every `hsi extract` flag (maskers, inpainters, GPUs, runners) and calls the stages."""

from __future__ import annotations

import argparse

from hsi.commands import extract

HELP = "extract, compose, validate and release in one command: ImageNet to a versioned release (re-run to resume)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from hsi.build import DEFAULT_VARIANT

    extract.add_arguments(parser)
    parser.add_argument(
        "--version",
        dest="release_version",
        required=True,
        help="the release's version vMAJOR.MINOR.PATCH (what `hsi publish` tags), e.g. v1.0.0",
    )
    parser.add_argument(
        "--variant",
        action="append",
        help=f"a named variant or a YAML spec to compose, repeatable (default {DEFAULT_VARIANT}); each is one "
        "config of the release",
    )
    parser.add_argument(
        "--name",
        default=DEFAULT_VARIANT,
        help="the release folder inside OUT: the dataset name users load",
    )


def run(args: argparse.Namespace) -> int:
    from hsi.build import DEFAULT_VARIANT, BuildRequest, next_steps, run_build
    from hsi.commands.common import run_options

    request = BuildRequest(
        source=args.source,
        out=args.out,
        version=args.release_version,
        extract=extract.build_config(args),
        variants=tuple(args.variant or (DEFAULT_VARIANT,)),
        boxes=args.boxes,
        release_name=args.name,
        options=run_options(args, extract.parse_gpus(args.gpus)),
    )
    result = run_build(request)
    print(next_steps(result.release_dir, request.version, request.extract.split))
    return 0
