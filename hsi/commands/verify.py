"""`hsi verify ORG/NAME --version vX.Y.Z` (a published version) or `hsi verify FOLDER` (a release folder
on disk): read it back and check it against everything its release records."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "read a published version (or a release folder) back and check it against everything its release records"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo", metavar="ORG/NAME|FOLDER", help="Hub dataset repo, or a release folder on disk")
    parser.add_argument(
        "--version",
        dest="release_version",
        help="the tag to verify, vMAJOR.MINOR.PATCH (needed for a Hub repo; for a folder, the version it must hold)",
    )


def run(args: argparse.Namespace) -> int:
    from builder.core.errors import RunFailed, UsageError

    if Path(args.repo).is_dir():
        from hf_scripts.verify_folder import verify_folder

        lines, problems = verify_folder(Path(args.repo), args.release_version)
        label = args.repo
    else:
        from huggingface_hub import HfApi

        from hf_scripts.verify import verify_release

        if args.release_version is None:
            raise UsageError(f"give the tag of {args.repo} to verify with --version vMAJOR.MINOR.PATCH")
        lines, problems = verify_release(HfApi(), args.repo, args.release_version)
        label = f"{args.repo}@{args.release_version}"
    print("\n".join(lines))
    if problems:
        print("\n".join(f"FAILED: {p}" for p in problems))
        raise RunFailed(f"{len(problems)} problems in {label}")
    print(f"OK: {label} is intact")
    return 0
