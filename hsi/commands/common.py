"""Small helpers shared by the command modules: error reporting and common flags."""

from __future__ import annotations

import argparse
import sys

EXIT_USAGE = 2


def fail(command: str, message: str, status: int = EXIT_USAGE) -> int:
    """Print a clear error for `hsi COMMAND` and return the exit status to use."""
    print(f"hsi {command}: error: {message}", file=sys.stderr)
    return status


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_run_flags(parser: argparse.ArgumentParser, default_shard_size: int) -> None:
    parser.add_argument("--workers", type=positive_int, default=1, help="shards built in parallel processes (output is identical for any value)")
    parser.add_argument("--shard-size", type=positive_int, default=default_shard_size, help=f"samples per shard (default {default_shard_size})")
    parser.add_argument("--overwrite", action="store_true", help="delete and rebuild an existing output")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
