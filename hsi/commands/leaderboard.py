"""`hsi leaderboard verify ENTRY --data SOURCE`: re-score a leaderboard entry (entry.json) from its
predictions.parquet against the data revision it names, and refuse one whose figures do not follow.
It says what that proves (the figures follow from the predictions and the data) and what it does
not (that a model made the predictions, the model's identity, a preprocessing not applied by the
toolkit); `--rerun` runs the entry's model spec again with its weights, where they are at hand, and
compares its predictions with the submitted ones sample by sample; `--record` writes what was
proved beside the entry (verification.json), for `hsi report` to show.

Exit status: 0 with "re-scored:" (or "re-run:") and the figures when everything follows; 1 when
something does not (one line per mismatch: the field, the entry's value, the value found) or a
re-run disagrees; 2 for an entry or predictions file that cannot be read, data that cannot be
opened, a shard that fails its sha256, or a --rerun refused (the line says why).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hsi.commands.common import add_trust_flags, require_extra

HELP = "leaderboard entries: verify one by re-scoring its predictions against the data it names"
RERUN_FLAGS = (("weights", "--weights"), ("trust_file", "--trust-file"), ("trust_code", "--trust-code"))
RERUN_FLAGS += (("device", "--device"), ("tolerance", "--tolerance"))
FIGURE_LINES = 12  # a re-run's differing figures shown one a line; the rest are counted


def _tolerance(text: str | None) -> float:
    """--tolerance as a number, or one line saying what it takes."""
    from builder.core.errors import UsageError
    from evaluation.ranking.verification_record import MAX_TOLERANCE

    if text is None:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_TOLERANCE:  # nan fails too
        raise UsageError(f"--tolerance is a share of the samples from 0 to {MAX_TOLERANCE}, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    verify = actions.add_parser(
        "verify",
        help="re-score an entry from its predictions.parquet and refuse it unless every figure follows; --rerun "
        "runs its model again",
        description="re-score an entry from its predictions.parquet and refuse it unless every figure follows; say "
        "what that proves and what it does not; --rerun runs the entry's model again and compares its predictions",
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
    verify.add_argument(
        "--record",
        action="store_true",
        help="when everything checked holds, write verification.json beside the entry (what was proved: re-scored or "
        "re-run), which hsi report shows",
    )
    rerun = verify.add_argument_group("re-running the model (--rerun)")
    rerun.add_argument(
        "--rerun",
        action="store_true",
        help="run the entry's model spec again with its weights (their sha256 the entry's) and recorded preprocessing "
        "on the same data, and compare its predictions with the submitted ones sample by sample",
    )
    rerun.add_argument(
        "--weights", type=Path, metavar="FILE", help="the entry's weights file (default: the one it names, beside it)"
    )
    add_trust_flags(rerun)  # a ts: entry's file is code: run only when trusted
    rerun.add_argument("--device", default=None, help="auto (default), cpu, cuda or cuda:N")
    rerun.add_argument(
        "--tolerance",
        default=None,
        metavar="FRACTION",
        help="the share of samples allowed to differ, and how far each figure may, e.g. 0.001 for a re-run on another "
        "device (default 0: every prediction and figure the same, as on the same device and toolkit version)",
    )
    verify.add_argument("--no-progress", action="store_true", help="hide the re-run's progress bar")
    verify.set_defaults(_action=run_verify)


def run(args: argparse.Namespace) -> int:
    return args._action(args)


def _announce(text: str) -> None:
    import sys

    print(text, file=sys.stderr)


def run_verify(args: argparse.Namespace) -> int:
    require_extra("leaderboard verify", "eval", "pyarrow", "pandas", "scipy")
    from builder.core.errors import RunFailed, UsageError, printable
    from evaluation.orchestration.verify_entry import verify_entry
    from evaluation.ranking.eval_reader import read_submission

    given = [flag for name, flag in RERUN_FLAGS if getattr(args, name) not in (None, False)]
    if given and not args.rerun:
        raise UsageError(
            f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --rerun: pass --rerun, or drop it"
        )
    tolerance = _tolerance(args.tolerance)
    submitted = read_submission(args.entry, args.predictions)
    plan = _plan(args, submitted) if args.rerun else None  # refused before any shard is read
    result = verify_entry(args.entry, args.data, args.predictions, _announce, submitted=submitted)
    where = printable(str(result.entry_file))
    if not result.ok:
        for mismatch in result.mismatches:
            print(f"mismatch: {mismatch.line()}")
        stopped = "" if result.figures is not None else " (stopped before re-scoring)"
        raise RunFailed(
            f"{where}: {len(result.mismatches)} mismatches{stopped}: the entry does not follow from its predictions "
            "and data, and is refused"
        )
    rerun = None
    if plan is not None:
        from evaluation.orchestration.rerun_entry import rerun_entry

        rerun = rerun_entry(plan, result, tolerance, _announce)
    _print_verification(result, rerun)
    if rerun is not None and not rerun.ok:
        differing = len(rerun.agreement.differing)
        raise RunFailed(
            f"{where}: the re-run of {printable(rerun.plan.loaded.spec)} disagrees with the submitted predictions "
            f"({differing} of {rerun.agreement.samples} samples differ, {len(rerun.mismatches)} figures; tolerance "
            f"{rerun.tolerance:g}): this model, with these weights and this preprocessing, did not make them"
        )
    if args.record:
        _record(result, rerun)
    return 0


def _plan(args: argparse.Namespace, submitted):
    from builder.backends.code_trust import CodeTrust
    from evaluation.orchestration.rerun_entry import plan_rerun
    from evaluation.predicting.predictions import read_predictions

    _, metadata = read_predictions(submitted.predictions_file)
    trust = CodeTrust.of(args.trust_file or (), args.trust_code)
    return plan_rerun(submitted, metadata, args.weights, trust, args.device or "auto", not args.no_progress)


def _print_verification(result, rerun) -> None:
    from builder.core.errors import printable
    from evaluation.analysis.report import fmt
    from evaluation.ranking.verification_record import CHECKS, RERUN, RESCORE_CHECKS, UNCHECKED, unchecked

    entry, figures = result.entry, result.figures
    data = entry["data"]
    verdict = RERUN if rerun is not None and rerun.ok else "re-scored"
    print(
        f"{verdict}: {printable(entry['name'])} ({printable(entry['model']['spec'])}) on "
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
    if rerun is not None:
        _print_rerun(rerun)
    checked = [*RESCORE_CHECKS, *(["rerun"] if rerun is not None and rerun.ok else [])]
    print("  checked:")
    for name in checked:
        print(f"    - {name}: {CHECKS[name]}")
    left = unchecked(entry, rerun is not None and rerun.ok, rerun is not None and rerun.plan.published)
    print("  not checked:" if left else "  not checked: nothing else the entry claims")
    for name in left:
        print(f"    - {name}: {UNCHECKED[name]}")


def _print_rerun(rerun) -> None:
    from builder.core.errors import printable

    agreement, plan = rerun.agreement, rerun.plan
    settings = plan.settings
    print(
        f"  re-run: {printable(plan.loaded.spec)} with {plan.weights} on {rerun.device}, batch {settings.batch_size}: "
        f"top-1 agreement {agreement.top1:.2%} ({agreement.top1_same} of {agreement.samples} samples), top-5 "
        f"agreement {agreement.top5:.2%} ({agreement.top5_same})"
    )
    if rerun.submitted_device and rerun.submitted_device != rerun.device:
        print(
            f"  note: the submitted predictions were made on {printable(rerun.submitted_device)}, the re-run on "
            f"{rerun.device}: near ties may differ (--tolerance)"
        )
    if agreement.differing:
        shown = ", ".join(printable(key) for key in agreement.differing[:5])
        more = f" and {len(agreement.differing) - 5} more" if len(agreement.differing) > 5 else ""
        print(f"  disagreement: {len(agreement.differing)} of {agreement.samples} samples differ: {shown}{more}")
    bound = "to the 6-decimal rounding" if rerun.tolerance == 0 else f"within {rerun.tolerance:g}"
    if rerun.mismatches:
        headline_first = sorted(rerun.mismatches, key=lambda m: not m.field.endswith((".value", ".group")))
        for mismatch in headline_first[:FIGURE_LINES]:
            print(f"mismatch: {mismatch.line()}")
        if len(rerun.mismatches) > FIGURE_LINES:
            print(f"mismatch: and {len(rerun.mismatches) - FIGURE_LINES} more figures differ from the entry's")
    else:
        print(f"  re-run figures: every headline figure equals the entry's {bound} (tolerance {rerun.tolerance:g})")


def _record(result, rerun) -> None:
    from builder import __version__
    from evaluation.orchestration.verify_record import write_record
    from evaluation.ranking.verification_record import build_record, unchecked

    ran = rerun is not None
    not_checked = unchecked(result.entry, ran, ran and rerun.plan.published)
    summary = rerun.summary() if ran else None
    record = build_record(result.entry_file, result.entry, result.predictions_file, __version__, summary, not_checked)
    print(f"recorded: {write_record(result.entry_file, record)}")
