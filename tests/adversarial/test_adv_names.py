"""Property tests of the name rules (builder.core.names): whatever passes stays inside its folder
when joined, and the hostile shapes an attacker reaches for are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.core.names import UnsafeNameError, check_config_name, check_shard_filename, check_split_name, inside

FOLDER = Path("/srv/release/data")
PROPERTY = settings(max_examples=200, deadline=None)
# Text biased towards the characters that make paths: separators, dots, NUL, unicode look-alikes.
PATHISH = st.text(
    alphabet=st.sampled_from(list("./\\\0 -_aZ09~:\u2024\u2025\uff0e\u2215\uff0f\u00a0")) | st.characters(), max_size=40
)


def stays_inside(name: str) -> bool:
    joined = os.path.normpath(FOLDER / name)
    return Path(joined).parent == FOLDER and Path(joined).name == name


@PROPERTY
@given(PATHISH)
def test_any_accepted_config_name_is_one_component_inside_its_folder(name):
    try:
        check_config_name(name)
    except UnsafeNameError:
        return
    assert stays_inside(name) and name not in (".", "..") and name.isascii()


@PROPERTY
@given(PATHISH, st.integers(min_value=0, max_value=10**9))
def test_any_accepted_shard_filename_is_one_component_inside_its_folder(split, index):
    for name in (split, f"{split}-{index:05d}.tar"):
        try:
            check_shard_filename(name)
        except UnsafeNameError:
            continue
        assert stays_inside(name) and name.endswith(".tar") and name.isascii()


@PROPERTY
@given(st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True), st.integers(min_value=0, max_value=99_999))
def test_the_names_the_toolkit_writes_are_accepted(split, index):
    name = f"{split}-{index:05d}.tar"
    assert check_shard_filename(name, split) == name and check_split_name(split) == split
    assert check_config_name(f"{split}-10") == f"{split}-10"


HOSTILE = [
    "",
    ".",
    "..",
    "../x",
    "a/../../b",
    "/etc/passwd",
    "a/b",
    "a\\b",
    "..\\..\\x",
    "a\0b",
    "x\n",
    "\u2024\u2024",
    "\uff0e\uff0e",
    "a\u2215b",
    "a\uff0fb",
    ".hidden",
    "-flag",
    "x" * 101,
    "C:\\x",
    "~root",
    "con fig",
    "caf\u00e9",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_refused_by_every_rule(name):
    for check in (check_config_name, check_split_name):
        with pytest.raises(UnsafeNameError):
            check(name)
    for shard in (name, f"{name}-00000.tar", f"test-00000.tar{name}" if name else "test-00000.tar/"):
        with pytest.raises(UnsafeNameError):
            check_shard_filename(shard)


def test_non_strings_are_refused():
    for value in (None, 3, ["test-00000.tar"], b"test-00000.tar"):
        for check in (check_config_name, check_split_name, check_shard_filename):
            with pytest.raises(UnsafeNameError):
                check(value)


def test_inside_refuses_a_link_that_leads_out(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "config").symlink_to(tmp_path)
    assert inside(tmp_path / "folder", "ok.tar") == tmp_path / "folder" / "ok.tar"
    with pytest.raises(UnsafeNameError, match="leads outside"):
        inside(tmp_path / "folder", "config", "x.tar")
    with pytest.raises(UnsafeNameError, match="leads outside"):
        inside(tmp_path / "folder", "..", "x.tar")
