"""The training methods are one table: --help's choices, dispatch and the refusal all read it, so a
new method is one module plus one row."""

from __future__ import annotations

import argparse

import pytest

from builder.core.errors import UsageError
from training.methods import METHODS, Method, method


def toy_trainer(settings, out, options, control):
    return "trained", {"method": "toy"}


def test_help_lists_every_row_and_an_unknown_name_names_them():
    from hsi.commands import train

    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    action = next(a for a in parser._actions if a.dest == "method")
    assert list(action.choices) == list(METHODS) == ["erm", "jtt", "dfr"]
    assert all(row.summary in action.help for row in METHODS.values())
    with pytest.raises(UsageError, match="one of erm, jtt, dfr, got 'nope'"):
        method("nope")


def test_one_new_row_is_dispatched(monkeypatch):
    monkeypatch.setitem(METHODS, "toy", Method("toy", f"{__name__}:toy_trainer", False, "a toy"))
    assert method("toy").load()(None, None, None, None) == ("trained", {"method": "toy"})
    assert [m.needs_groups for m in METHODS.values()][:3] == [False, True, True]
