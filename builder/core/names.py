"""The one set of rules for names that become paths: config names, split names, shard filenames.

Manifests (`_info.json`, `_release.json`) come from disk or from the Hub and may be hostile: a config
`../../../x` or a shard `../victim.txt` must never become a path outside its folder. Every reader
and writer (release, stream, validation) checks names here before joining them to a folder, and
`inside` resolves the joined path and checks that it really stays in the folder (links included).

The rules are strict ASCII allow-lists rather than deny-lists, so unicode look-alikes of `.` and `/`,
backslashes, NUL and control characters are refused without being enumerated.
"""

from __future__ import annotations

import re
from pathlib import Path

from builder.core.errors import InputError, shown

# One path component: starts with a letter or digit (so never `.`, `..` or a hidden name).
CONFIG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# Split names as datasets accepts them (word characters), which also keeps `<split>-NNNNN.tar` parseable.
SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,63}")
SHARD_FILENAME = re.compile(r"(?P<split>[A-Za-z0-9][A-Za-z0-9_]{0,63})-(?P<index>[0-9]{5,9})\.tar")
# One path component made from a sample's metadata (a source id, a sample key, a group's folder such
# as `xy:0.25,0.75_gray`): never `.`, `..` or a hidden name, no separator, printable ASCII only.
PATH_COMPONENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._,:-]{0,199}")
WNID = re.compile(r"n[0-9]{8}")
# A pixel size that becomes a folder name (`56/`): a positive int, at most a canvas anyone builds.
MAX_SIZE = 100_000


class UnsafeNameError(InputError, ValueError):
    """A name from a manifest that could not safely be used as a path component."""


def _matching(pattern: re.Pattern, name: object, problem: str) -> str:
    if not isinstance(name, str) or not pattern.fullmatch(name):
        raise UnsafeNameError(f"{shown(name)} {problem}")
    return name


def check_config_name(name: object) -> str:
    return _matching(
        CONFIG_NAME,
        name,
        "is not one safe path component for a config name (ASCII letters, digits, "
        "'.', '_', '-', starting with a letter or digit, at most 100 characters); rename the config and rebuild",
    )


def check_split_name(name: object) -> str:
    return _matching(
        SPLIT_NAME,
        name,
        "is not a safe split name (ASCII letters, digits and '_', starting with a "
        "letter or digit, at most 64 characters)",
    )


def check_shard_filename(name: object, split: str | None = None) -> str:
    """A shard filename is `<split>-NNNNN.tar`, of the split it is listed under when one is given."""
    match = SHARD_FILENAME.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        raise UnsafeNameError(
            f"shard filename {shown(name)} is not of the form <split>-NNNNN.tar; the manifest cannot be trusted"
        )
    if split is not None and match["split"] != split:
        raise UnsafeNameError(
            f"shard filename {shown(name)} is listed under split {shown(split)}; a shard is named after its split"
        )
    return match.string  # the name itself, now known to be a str


def check_path_component(name: object, what: str = "name") -> str:
    return _matching(
        PATH_COMPONENT,
        name,
        f"is not a safe {what} to become a file or folder name (ASCII letters, digits and . _ - , :, "
        "not starting with '.', at most 200 characters)",
    )


def check_wnid(name: object) -> str:
    return _matching(WNID, name, "is not a WordNet id (n followed by 8 digits)")


def check_size(value: object) -> str:
    """A pixel size as the folder name it becomes (`56`): a positive int, never a string."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIZE:
        raise UnsafeNameError(f"{shown(value)} is not a size in pixels (an integer from 1 to {MAX_SIZE})")
    return str(value)


def check_relative_path(path: object, what: str = "path") -> list[str]:
    """The components of a relative path `a/b/c` a record lists, each one a safe component."""
    if not isinstance(path, str) or not path:
        raise UnsafeNameError(f"{shown(path)} is not a relative path")
    return [check_path_component(part, what) for part in path.split("/")]


def inside(folder: Path, *parts: str) -> Path:
    """`folder/part/...`, refused unless the resolved path stays inside the resolved folder (a link
    planted on the way cannot lead out)."""
    folder = Path(folder)
    path = folder.joinpath(*parts)
    root = folder.resolve()
    if not path.resolve().is_relative_to(root):
        raise UnsafeNameError(f"{path} leads outside {folder}; refusing to use it")
    return path
