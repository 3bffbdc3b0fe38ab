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
    parser.add_argument(
        "--signer",
        type=Path,
        default=None,
        metavar="PUBKEY",
        help="the public key (PEM) the release must be signed with (`hsi release --sign KEY`): its release.sig must "
        "sign every file; without it verify only says who signed, or that the release is unsigned",
    )
    parser.add_argument(
        "--signer-identity",
        default=None,
        metavar="IDENTITY",
        help="the Sigstore identity (e.g. an e-mail) a keyless signature must name (online; with --signer-issuer)",
    )
    parser.add_argument("--signer-issuer", default=None, metavar="URL", help="the OIDC issuer of --signer-identity")
    parser.add_argument(
        "--previous",
        type=Path,
        default=None,
        metavar="FOLDER",
        help="for a release folder: the previous release's folder, which its `previous` record must match "
        "(on the Hub the previous version's tag is read)",
    )


def run(args: argparse.Namespace) -> int:
    from builder.core.errors import RunFailed, UsageError
    from cards.signature import SignerCheck

    signer = SignerCheck(args.signer, args.signer_identity, args.signer_issuer).check_options()
    if Path(args.repo).is_dir():
        from hf_scripts.verify_folder import verify_folder

        lines, problems = verify_folder(Path(args.repo), args.release_version, signer, args.previous)
        label = args.repo
    else:
        from huggingface_hub import HfApi

        from hf_scripts.verify import verify_release

        if args.release_version is None:
            raise UsageError(f"give the tag of {args.repo} to verify with --version vMAJOR.MINOR.PATCH")
        if args.previous is not None:
            raise UsageError("--previous is for a release folder; on the Hub the previous version's tag is read")
        lines, problems = verify_release(HfApi(), args.repo, args.release_version, signer=signer)
        label = f"{args.repo}@{args.release_version}"
    print("\n".join(lines))
    if problems:
        print("\n".join(f"FAILED: {p}" for p in problems))
        raise RunFailed(f"{len(problems)} problems in {label}")
    print(f"OK: {label} is intact")
    return 0
