"""`hsi publish`: a release folder to the Hub as a tagged version (dry run unless --yes), or into a
local git mirror with --to-git."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = (
    "publish a release folder as a tagged version to the Hugging Face Hub (dry run unless --yes) or a local git mirror"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("release", type=Path, metavar="RELEASE_DIR", help="folder written by `hsi release`")
    parser.add_argument(
        "--version",
        dest="release_version",
        required=True,
        help="the tag to create, vMAJOR.MINOR.PATCH; must match the release",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--repo", help="Hub dataset repo ORG/NAME")
    target.add_argument(
        "--to-git",
        type=Path,
        metavar="DIR",
        help="a local git repository laid out like the Hub repo (created if missing)",
    )
    parser.add_argument("--private", action="store_true", help="create the Hub repo as private")
    parser.add_argument(
        "--yes", action="store_true", help="perform the operations (default: print them and change nothing)"
    )


def run(args: argparse.Namespace) -> int:
    from hf_scripts.publish import perform_publish, plan_publish

    if args.to_git is not None:
        from hf_scripts.git_mirror import mirror_plan, publish_to_git

        print("\n".join(mirror_plan(args.release, args.to_git, args.release_version)))
        if not args.yes:
            print("dry run: nothing changed; add --yes to perform")
            return 0
        commit = publish_to_git(args.release, args.to_git, args.release_version)
        print(f"committed {commit} and tagged {args.release_version} in {args.to_git}")
        return 0
    from huggingface_hub import HfApi  # the token comes from HF_TOKEN or `hf auth login`

    api = HfApi()
    plan = plan_publish(api, args.release, args.repo, args.release_version)
    print("\n".join(plan.describe(private=args.private)))
    if not args.yes:
        print("dry run: nothing changed; add --yes to perform")
        return 0
    commit = perform_publish(api, plan, private=args.private)
    print(f"published {args.repo}@{args.release_version} (commit {commit})")
    return 0
