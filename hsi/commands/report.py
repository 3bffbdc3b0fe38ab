"""`hsi report EVAL_DIR... --out SITE`: a static HTML site of `hsi eval` folders (cards.site).

SITE/index.html holds the leaderboards (one per data revision, sorted by worst group) with every
model's accuracy-vs-size curves; SITE/models/<n>-<folder>/index.html one model's tables, plots and,
with --data, its failure galleries. Exit status: 0 on success, 2 for an input that cannot be used
(a link, an eval.json that is not a report, --data of another fingerprint, a shard that fails its
sha256, a user's file in SITE), printed as `hsi report: error: ...`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hsi.commands.common import options_from, require_extra, seed_int

HELP = "a static HTML site of hsi eval folders: leaderboard, each model's tables and plots, failure galleries"


def count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "eval_dirs", nargs="+", type=Path, metavar="EVAL_DIR", help="hsi eval --out folders (or single model folders)"
    )
    parser.add_argument("--out", type=Path, required=True, help="the site's folder (empty, or one hsi report wrote)")
    parser.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="SOURCE",
        help="the data the evaluations read, for the galleries' thumbnails: a release folder, a composed dataset "
        "folder or hf://datasets/ORG/NAME@REVISION (repeat for several configs); its fingerprint must be the one each "
        "evaluation names. Without it the pages say how to add the galleries",
    )
    parser.add_argument("--seed", type=seed_int, default=0, help="seed of the galleries' samples")
    parser.add_argument("--errors", type=count, default=8, help="errors shown per group and size")
    parser.add_argument("--successes", type=count, default=4, help="successes shown per group and size")
    parser.add_argument(
        "--reference",
        choices=["paper"],
        help="also show figures published elsewhere, in a section of their own marked 'published, not re-run' "
        "(paper: the top-1 by group and size in the authors' released evaluation logs; docs/evaluate.md)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args: argparse.Namespace) -> int:
    require_extra("report", "eval", "pyarrow", "pandas", "matplotlib")
    from cards.site.build import SiteSettings, build_site

    settings = options_from(args, SiteSettings, data=tuple(args.data), progress=not args.no_progress)
    summary = build_site(args.eval_dirs, args.out, settings)
    galleries = f"{summary.thumbnails} thumbnails" if summary.galleries else "no galleries (pass --data SOURCE)"
    print(f"site of {summary.models} models, {galleries}: open {summary.index}")
    return 0
