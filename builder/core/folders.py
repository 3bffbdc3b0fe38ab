"""What an output folder may hold and who wrote it: a folder is written into only when it is empty or
the toolkit's own, `--overwrite` empties it only when every entry is one the toolkit wrote (it
looks into our own `_state/` and `previews/`, and a link is never ours), and only our own
temporaries are ever removed as stale."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from builder.core.config import CONFIG_NAME
from builder.core.errors import SettingsError, first_few
from builder.core.hashing import sha256_file
from builder.core.manifest import ERRORS_NAME, MANIFEST_NAME
from builder.core.names import SHARD_FILENAME
from builder.core.runner import STATE_DIR, read_state_record


class ForeignOutput(SettingsError, FileExistsError):
    """An output folder that holds files this toolkit did not write."""


def is_toolkit_folder(out_dir: Path) -> bool:
    """A folder this toolkit wrote: it holds our manifest or our settings file."""
    return (out_dir / MANIFEST_NAME).is_file() or (out_dir / CONFIG_NAME).is_file()


def check_writable_folder(out_dir: Path, what: str = "--out") -> None:
    """Refuse to write into a non-empty folder that this toolkit did not write."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ForeignOutput(f"{what} {out_dir} is a file, not a folder: choose a folder to write into")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not is_toolkit_folder(out_dir):
        raise ForeignOutput(
            f"{out_dir} is not empty and holds no dataset of this toolkit; it only ever writes into an empty "
            "folder or one it wrote itself: choose another --out or --name"
        )


VALIDATION_REPORT = "validation.json"  # validation.report's JSON_NAME (validation imports it from here)
# What the stages (and `hsi validate` on their folders) write in an output folder as plain files,
# beside its shards and our temporaries: --overwrite removes a folder only when it holds nothing else.
OWN_FILES = frozenset(
    {
        MANIFEST_NAME,
        CONFIG_NAME,
        ERRORS_NAME,
        "spec.yaml",
        VALIDATION_REPORT,
        "validation.md",
        "scores_per_class.csv",
    }
)
PREVIEWS_DIR = "previews"
# The sheets `hsi scgs` draws in its folder's previews/ (cards.scgs draws them, cards.release
# publishes them): named here, at the bottom of the stack, so the claim and the release agree.
SCGS_PREVIEW_NAME = "scgs_preview.png"
SCGS_LABEL_CHECK_NAME = "scgs_label_check.png"
# The previews/ pictures a stage draws itself, beyond those its validation report lists (by the
# stage name in the folder's manifest, as STAGE_OUTPUTS in builder.core.manifest).
STAGE_PREVIEWS: dict[str, frozenset[str]] = {"scgs": frozenset({SCGS_PREVIEW_NAME, SCGS_LABEL_CHECK_NAME})}
# `_state/` holds one record per finished shard, written through a temporary of ours.
STATE_RECORD = re.compile(rf"{SHARD_FILENAME.pattern}\.json(?:\.\d+\.tmp)?")


def is_plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def is_plain_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def read_json_dict(path: Path) -> dict:
    """A JSON object file of ours, or {} when it is missing, a link or unreadable (it then claims nothing)."""
    try:
        data = json.loads(path.read_text("utf-8")) if is_plain_file(path) else None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def own_preview_names(manifest: dict, report: dict) -> set[str]:
    """The names of the pictures in a folder's `previews/` that the toolkit drew for it, from its
    manifest and validation report: those the report lists (as `previews/NAME`) and those its stage
    draws itself (STAGE_PREVIEWS)."""
    listed = report.get("previews")
    paths = listed if isinstance(listed, list) else []
    names = {
        p.removeprefix(f"{PREVIEWS_DIR}/") for p in paths if isinstance(p, str) and p.startswith(f"{PREVIEWS_DIR}/")
    }
    stage = manifest.get("stage")
    return names | (STAGE_PREVIEWS.get(stage, frozenset()) if isinstance(stage, str) else frozenset())


def _own_top_file(name: str) -> bool:
    """A top-level name we write that is not a shard (a shard is ours only by its record: own_shard)."""
    return (
        name in OWN_FILES
        or bool(OWN_TEMPORARY.match(name))
        or bool(re.fullmatch(r"\.validation\.md(\.\d+)?\.tmp", name))
    )


def own_shard(folder: Path, name: str, digests: dict[str, str]) -> bool:
    """Whether the file `name` in `folder` is a shard this toolkit wrote there, unchanged: the
    folder's manifest lists it with this sha256, or (a killed run's shard, before any manifest)
    its `_state/` record does. A user's `val-00007.tar` is theirs, however it is named."""
    if not SHARD_FILENAME.fullmatch(name):
        return False
    path = folder / name
    expected = digests.get(name)
    if expected is None:
        record = read_state_record(folder / STATE_DIR / f"{name}.json", name)
        if record is None or record.stats.bytes != path.stat().st_size:
            return False
        expected = record.stats.sha256
    return sha256_file(path) == expected


def stray_entries(folder: Path, own_file: Callable[[str], bool], own_folder: Callable[[str], bool]) -> list[str]:
    """The entries below `folder` the toolkit did not write, as sorted paths relative to it (a folder
    with a trailing `/`, not looked into). `own_file`/`own_folder` say which relative paths are ours;
    only our folders are descended into, and a link is never ours."""
    found: list[str] = []

    def walk(path: Path, prefix: str) -> None:
        for entry in path.iterdir():
            relative = prefix + entry.name
            if is_plain_file(entry) and own_file(relative):
                continue
            if is_plain_folder(entry) and own_folder(relative):
                walk(entry, relative + "/")
            else:
                found.append(relative + ("/" if is_plain_folder(entry) else ""))

    if is_plain_folder(folder):
        walk(folder, "")
    return sorted(found)


def foreign_entries(folder: Path) -> list[str]:
    """The entries of a stage's output folder that this toolkit did not write there (see
    stray_entries). It looks into our own sub-folders: `_state/` holds only shard records, `previews/`
    only the pictures drawn for this folder (own_preview_names). A name of ours on an entry of
    another kind (a folder where we write a file) is foreign."""
    manifest = read_json_dict(folder / MANIFEST_NAME)
    previews = own_preview_names(manifest, read_json_dict(folder / VALIDATION_REPORT))
    digests = listed_shard_digests(manifest)
    shards = set(digests)

    def own_file(relative: str) -> bool:
        top, _, below = relative.partition("/")
        if not below:
            return _own_top_file(top) or own_shard(folder, top, digests)
        return (top == STATE_DIR and own_state_record(folder, below, shards)) or (
            top == PREVIEWS_DIR and below in previews
        )

    return stray_entries(folder, own_file, lambda relative: relative in (STATE_DIR, PREVIEWS_DIR))


def listed_shard_digests(manifest: dict) -> dict[str, str]:
    """{shard filename: sha256} of the shards a folder's manifest lists (none when it lists them in
    another form; a shard listed without a digest string is not vouched for)."""
    splits = manifest.get("splits")
    entries = splits.values() if isinstance(splits, dict) else []
    rows = [row for entry in entries if isinstance(entry, dict) for row in _list(entry.get("shards"))]
    return {
        row["filename"]: row["sha256"]
        for row in rows
        if isinstance(row, dict) and isinstance(row.get("filename"), str) and isinstance(row.get("sha256"), str)
    }


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def own_state_record(folder: Path, name: str, shards: set[str]) -> bool:
    """Whether `_state/NAME` is one of our shard records: named after a shard this folder holds (its
    manifest lists it, or the shard file is there) and, unless it is our temporary of one (a killed
    run's half-written record, beside a shard already renamed into place), parsing as our state
    record of that shard. A user's `_state/val-00099.tar.json` for a shard that does not exist is
    theirs, whatever its name."""
    if not STATE_RECORD.fullmatch(name):
        return False
    shard = name[: name.index(".tar") + len(".tar")]
    if shard not in shards and not is_plain_file(folder / shard):
        return False
    return name.endswith(".tmp") or read_state_record(folder / STATE_DIR / name, shard) is not None


def refuse_foreign(folder: Path, foreign: Sequence[str], flag: str, error: type[Exception] = ForeignOutput) -> None:
    """Refuse an --overwrite that would delete `foreign` (paths in `folder`), naming them."""
    if foreign:
        raise error(
            f"--overwrite would delete {first_few(foreign)} in {folder}, which this toolkit did not write: "
            f"move them out of the folder first, or choose another {flag}"
        )


def prepare_output(out_dir: Path, overwrite: bool) -> None:
    """Create `out_dir`; with `overwrite`, empty it first. Both only for a folder this toolkit wrote
    (or an empty one): a folder of someone else's is never written into, and --overwrite never
    deletes a file the toolkit did not write (it refuses, naming them)."""
    check_writable_folder(out_dir)
    if overwrite and out_dir.is_symlink():  # rmtree refuses a link; what it leads to is not emptied either
        raise ForeignOutput(
            f"{out_dir} is a link (to {os.readlink(out_dir)}): --overwrite only replaces a real folder; "
            "pass the folder it leads to, or remove the link"
        )
    if overwrite and out_dir.exists():
        refuse_foreign(out_dir, foreign_entries(out_dir), "--out")
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)


# Our temporaries are `<file we write>.<pid>.tmp`; nothing else in a folder is ever deleted as stale.
OWN_TEMPORARY = re.compile(
    r"^(?:[A-Za-z0-9][A-Za-z0-9_-]*-\d{5}\.tar|_info\.json|errors\.jsonl|_config\.yaml|spec\.yaml"
    r"|[A-Za-z0-9][A-Za-z0-9_-]*-\d{5}\.tar\.json)\.\d+\.tmp$"
)


def remove_stale_temporaries(out_dir: Path) -> None:
    """Delete what a killed run of ours left half-written (the folder is locked, so no live run of
    ours is writing them)."""
    for folder in (out_dir, out_dir / STATE_DIR):
        if folder.is_dir():
            for tmp in folder.iterdir():
                if OWN_TEMPORARY.match(tmp.name) and tmp.is_file() and not tmp.is_symlink():
                    tmp.unlink(missing_ok=True)
