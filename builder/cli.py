"""The `hsi` command line: the only entry point. It holds no logic: each subcommand lives in a
command module (arguments + a call into its stage), listed here by dotted name and imported only
when used, so `hsi extract` never imports validation, torch or the Hub client."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__

# subcommand -> module providing `add_arguments(parser)`, `run(args) -> int` and a `HELP` line.
SUBCOMMANDS: dict[str, str] = {
    "extract": "builder.commands.extract",
    "compose": "builder.commands.compose",
    "demo": "builder.commands.demo",
    "validate": "validation.command",
    "eval": "evaluation.command",
    "release": "cards.command",
    "publish": "hf_scripts.command",
    "verify": "hf_scripts.verify_command",
}

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hsi", description="Build, validate and publish Hard-Spurious-ImageNet."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args._run(args)


if __name__ == "__main__":
    sys.exit(main())
