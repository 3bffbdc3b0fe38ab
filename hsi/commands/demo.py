"""`hsi demo`: the whole pipeline on the embedded sample (four real CC0/public-domain photos with
hand-drawn boxes), with the model-free backends, in well under two minutes on two CPU cores."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "run extract, compose, validate and release on the embedded sample and load it back"

DEFAULT_OUT = Path("demo-output")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def run(args: argparse.Namespace) -> int:
    from hsi.demo import run_demo

    return run_demo(args.out, workers=args.workers, progress=not args.no_progress)
