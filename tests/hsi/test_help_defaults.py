"""`--help` of `hsi` and of every subcommand shows each flag's default as `(default: X)`, once, and
exits 0. A flag without a value when not given (None, an empty list, an off switch) shows none: its
help says in words what happens instead."""

from __future__ import annotations

import argparse

import pytest

from hsi.cli import build_parser, main


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) of `parser` and of every subcommand parser under it, nested ones too."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


PARSERS = dict(walk(build_parser()))
COMMANDS = [path for path in PARSERS if path]


def shows_a_default(action: argparse.Action) -> bool:
    """A flag that takes a value and has one when not given (switches, help and version take none)."""
    default = action.default
    if not action.option_strings or action.nargs == 0 or default is None or default == argparse.SUPPRESS:
        return False
    return not (isinstance(default, (str, list, tuple)) and len(default) == 0)


def expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The action's help as `--help` prints it, before wrapping (a wrap may break a default at a hyphen)."""
    return parser._get_formatter()._expand_help(action)


def test_every_subcommand_is_walked():
    assert {"eval", "train", "probe", "compose", "extract", "scgs"} <= {path[0] for path in COMMANDS}


@pytest.mark.parametrize("path", list(PARSERS), ids=lambda path: " ".join(("hsi", *path)))
def test_every_default_is_shown_once(path):
    parser = PARSERS[path]
    checked = 0
    for action in parser._actions:
        flag = "/".join(action.option_strings)
        if shows_a_default(action):
            assert action.help, f"{flag} has a default but no help to show it in"
            text = expanded_help(parser, action)
            value = str(action.default)
            assert f"(default: {value})" in text, f"{flag}: {text!r} does not show its default {value!r}"
            # no second, hand-written default beside the shown one (a stale one would contradict it)
            assert text.count("default") == 1 + value.count("default"), f"{flag} states its default twice: {text!r}"
            checked += 1
        elif action.option_strings and action.help and action.help != argparse.SUPPRESS:
            assert "(default: False)" not in expanded_help(parser, action), flag
            assert "(default: None)" not in expanded_help(parser, action), flag
    if path == ("eval",):
        assert checked >= 8  # --out, --label-space, --batch-size, --workers, --device, --bootstrap, --seed, ...


def test_computed_defaults_say_where_they_come_from():
    sizes = next(a for a in PARSERS[("compose",)]._actions if a.dest == "shard_size")
    assert sizes.default is None  # the spec's value must win when the flag is not given
    assert "(default: the variant spec's)" in expanded_help(PARSERS[("compose",)], sizes)
    groups = {group.title: group.description for group in PARSERS[("compose",)]._action_groups}
    assert "(default: the spec's)" in groups["variant overrides"]


@pytest.mark.parametrize("path", [(), *COMMANDS], ids=lambda path: " ".join(("hsi", *path, "--help")))
def test_help_exits_0(path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {' '.join(('hsi', *path))}")
    shown = [a.option_strings[-1] for a in PARSERS[path]._actions if a.option_strings and a.help != argparse.SUPPRESS]
    assert shown and all(flag in out for flag in shown)
