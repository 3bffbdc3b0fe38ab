"""`hsi verify ORG/NAME --version vX.Y.Z`: stream a published version back and check its shard hashes."""

from __future__ import annotations

import argparse

HELP = "stream a published, tagged version back and check its shards against the manifest"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo", metavar="ORG/NAME", help="Hub dataset repo")
    parser.add_argument(
        "--version", dest="release_version", required=True, help="the tag to verify, vMAJOR.MINOR.PATCH"
    )


def run(args: argparse.Namespace) -> int:
    from huggingface_hub import HfApi

    from builder.core.errors import RunFailed
    from hf_scripts.verify import verify_release

    lines, problems = verify_release(HfApi(), args.repo, args.release_version)
    print("\n".join(lines))
    if problems:
        print("\n".join(f"FAILED: {p}" for p in problems))
        raise RunFailed(f"{len(problems)} problems in {args.repo}@{args.release_version}")
    print(f"OK: {args.repo}@{args.release_version} is intact")
    return 0
