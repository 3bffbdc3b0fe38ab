"""`hsi verify ORG/NAME --version vX.Y.Z`: stream a published version back and check its shard hashes."""

from __future__ import annotations

import argparse

from hsi.commands.common import fail

HELP = "stream a published, tagged version back and check its shards against the manifest"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo", metavar="ORG/NAME", help="Hub dataset repo")
    parser.add_argument("--version", dest="release_version", required=True, help="the tag to verify, vMAJOR.MINOR.PATCH")


def run(args: argparse.Namespace) -> int:
    from huggingface_hub import HfApi

    from hf_scripts.publish import PublishError
    from hf_scripts.verify import verify_release

    try:
        lines, problems = verify_release(HfApi(), args.repo, args.release_version)
    except PublishError as exc:
        return fail("verify", str(exc))
    print("\n".join(lines))
    if problems:
        print("\n".join(f"FAILED: {p}" for p in problems))
        return fail("verify", f"{len(problems)} problems in {args.repo}@{args.release_version}", status=1)
    print(f"OK: {args.repo}@{args.release_version} is intact")
    return 0
