"""`hsi leaderboard verify ENTRY --data SOURCE`: re-score a leaderboard entry (entry.json) from its
predictions.parquet against the data revision it names, and refuse one whose figures do not follow.

Exit status: 0 and "verified" with the figures when everything follows; 1 when something does not,
after one line per mismatch (the field, the entry's value, the value found); 2 for an entry or
predictions file that cannot be read, data that cannot be opened, or a shard that fails its sha256.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hsi.commands.common import require_extra

HELP = "leaderboard entries: verify one by re-scoring its predictions against the data it names"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    verify = actions.add_parser(
        "verify",
        help="re-score an entry from its predictions.parquet and refuse it unless every figure follows",
        description="re-score an entry from its predictions.parquet and refuse it unless every figure follows",
    )
    verify.add_argument("entry", type=Path, metavar="ENTRY", help="an entry.json, or the folder holding one")
    verify.add_argument(
        "--data",
        help="the data the entry names: a release folder, a composed dataset folder or hf://datasets/ORG/NAME@REVISION "
        "(default: the entry's own source, when it is an hf:// address)",
    )
    verify.add_argument(
        "--predictions", type=Path, help="the entry's predictions file (default: the one the entry names, beside it)"
    )
    verify.set_defaults(_action=run_verify)


def run(args: argparse.Namespace) -> int:
    return args._action(args)


def _announce(text: str) -> None:
    import sys

    print(text, file=sys.stderr)


def run_verify(args: argparse.Namespace) -> int:
    require_extra("leaderboard verify", "eval", "pyarrow", "pandas", "scipy")
    from builder.core.errors import RunFailed, printable
    from evaluation.analysis.report import fmt
    from evaluation.orchestration.verify_entry import verify_entry

    result = verify_entry(args.entry, args.data, args.predictions, _announce)
    where = printable(str(result.entry_file))
    if not result.ok:
        for mismatch in result.mismatches:
            print(f"mismatch: {mismatch.line()}")
        stopped = "" if result.figures is not None else " (stopped before re-scoring)"
        raise RunFailed(
            f"{where}: {len(result.mismatches)} mismatches{stopped}: the entry does not follow from its predictions "
            "and data, and is refused"
        )
    entry, figures = result.entry, result.figures
    assert figures is not None  # ok implies re-scored
    data = entry["data"]
    print(
        f"verified: {printable(entry['name'])} ({printable(entry['model']['spec'])}) on "
        f"{data['config']}/{data['split']}, fingerprint {data['fingerprint']}, {figures['samples']} samples "
        f"({figures['error_rows']} error rows)"
        + (f", partial: the first {data['limit']} only" if data["partial"] else "")
    )
    print(f"  top-1 {fmt(figures['top1'])}, top-5 {fmt(figures['top5'])}")
    if figures["by_group"]:
        print("  " + ", ".join(f"{row['group']} {fmt(row['top1'])}" for row in figures["by_group"]))
        worst = figures["worst_group"]
        print(f"  mean over groups {fmt(figures['mean_over_groups'])}, worst group {worst['group']} {fmt(worst)}")
    gap = figures["background_gap"]
    if gap:
        largest = gap["largest"]
        print(
            f"  background gap: mean {gap['mean']:.3f} over {gap['cells']} cells, largest {fmt(largest)} "
            f"({largest['position']}, {largest['size']} px, {largest['foreign']})"
        )
    background = figures["background_class"]
    if background:
        print(
            f"  share of errors naming the background's class {fmt(background['share_of_errors'])} "
            f"(chance {background['chance_share_of_errors']:.4f})"
        )
    if figures.get("clean_top1"):
        print(f"  clean top-1 {fmt(figures['clean_top1'])}")
    for note in result.notes:
        print(f"  note: {note}")
    return 0
