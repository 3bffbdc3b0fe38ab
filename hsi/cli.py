"""The `hsi` command line: the only entry point. It holds no logic: each subcommand lives in a
command module (arguments + a call into its stage), listed here by dotted name and imported only
when used, so `hsi extract` never imports validation, torch or the Hub client."""

from __future__ import annotations

import argparse
import importlib
import sys

from builder import __version__
from builder.core.errors import HsiError
from builder.core.interrupts import EXIT_INTERRUPTED
from hsi.commands.common import DefaultsShown

# subcommand -> module providing `add_arguments(parser)`, `run(args) -> int` and a `HELP` line.
SUBCOMMANDS: dict[str, str] = {
    "build": "hsi.commands.build",
    "extract": "hsi.commands.extract",
    "compose": "hsi.commands.compose",
    "export": "hsi.commands.export",
    "demo": "hsi.commands.demo",
    "validate": "hsi.commands.validate",
    "eval": "hsi.commands.eval",
    "release": "hsi.commands.release",
    "publish": "hsi.commands.publish",
    "verify": "hsi.commands.verify",
    "probe": "hsi.commands.probe",
    "train": "hsi.commands.train",
    "scgs": "hsi.commands.scgs",
    "report": "hsi.commands.report",
    "leaderboard": "hsi.commands.leaderboard",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hsi", description="Build, validate and publish Hard-Spurious-ImageNet.", formatter_class=DefaultsShown
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        # add_parser does not pass the parent's formatter on: every subcommand gets it here
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP, formatter_class=DefaultsShown)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand. An `HsiError` is the one kind of failure caught: it is printed as
    `hsi COMMAND: error: ...` with its exit status (a Ctrl-C too, with 130); anything else is a bug and
    shows its traceback."""
    args = build_parser().parse_args(argv)
    try:
        return args._run(args)
    except HsiError as exc:
        if exc.exit_status == 0:  # not a failure (--detach's "submitted"): one line, no "error:"
            print(f"hsi {args.command}: {exc}")
            return 0
        print(f"hsi {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:  # a Ctrl-C before a command's own handling (imports, claiming its folder)
        print(f"hsi {args.command}: error: interrupted; run the same command again", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
