"""Release folders: composed, validated datasets gathered as configs of one loadable folder.

    <release>/README.md                      the card (cards.render)
    <release>/croissant.json                 Croissant 1.1 metadata with the RAI fields (cards.croissant)
    <release>/eval.yaml                      the Hub benchmark: a task per config and split (cards.hub_benchmark)
    <release>/_release.json                  name, version, default config, every shard's sha256, changelog,
                                             and the sha256 of every file it wrote (`files`)
    <release>/data/<config>/<split>-%05d.tar the shards, byte-identical to the dataset's
    <release>/data/<config>/_info.json       the dataset's manifest (timm's WebDataset reader form)
    <release>/data/<config>/validation.json  the validation report it passed (+ validation.md)
    <release>/previews/<config>/*.png        preview sheets shown in the card
    <release>/data/parts/<split>-%05d.tar    with --parts: the parts shards, byte-identical to extract's
    <release>/data/parts/_info.json          the parts manifest, so `hsi compose --parts RELEASE` reads them
    <release>/results/<model>_accuracy_vs_size.png   with --results: each model's plot (cards.results)

Only manifests and validation reports are read to learn what exists; shards are copied and their
sha256 checked against the manifest. A dataset whose validation is missing, failed or belongs to
another build is refused. The folder is built under a temporary name and renamed when complete.
`--overwrite` replaces only a folder whose every file is one the earlier release recorded in its
`_release.json` and is unchanged since (sha256): a file someone put there, or edited, is refused by name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder import __version__
from builder.core.classes import label_space_problem
from builder.core.errors import HsiError, first_few, shown
from builder.core.folders import own_preview_names, read_json_dict, refuse_foreign, stray_entries
from builder.core.hashing import sha256_file
from builder.core.locks import exclusive_folder
from builder.core.manifest import COMPOSITES, MANIFEST_NAME, Manifest, ManifestError, format_of, write_json_atomic
from builder.core.names import UnsafeNameError, check_config_name, check_shard_filename, check_split_name, inside
from builder.core.shard_read import iter_shard
from builder.core.untrusted import Fields, check_string, read_json
from cards.croissant import CROISSANT_NAME, croissant_metadata, render_croissant
from cards.hub_benchmark import (
    EVAL_YAML,
    benchmark_document,
    default_description,
    default_name,
    eval_yaml_text,
    release_tasks,
)
from cards.parts_card import PARTS_CONFIG, PARTS_DATA_DIR, PartsSummary
from cards.release_fields import (
    RELEASE_META,
    VERSION_PATTERN,
    base_record,
    describe_changes,
    record_field_problems,
)
from cards.render import render_card, table
from cards.results import RELEASE_PLOT_SUFFIX, RESULTS_DIR, copy_plots, load_results, render_results, select_results
from cards.signature import SIGNATURE, ReleaseSigner, check_recorded_signer, sign_folder
from cards.summary import (
    DATASET_NAME,
    DEFAULT_CONFIG,
    ChangelogEntry,
    ConfigSummary,
    default_title,
    is_paper_benchmark,
)

VALIDATION_JSON = "validation.json"
VALIDATION_MD = "validation.md"
PREVIEWS_DIR = "previews"
SHA256 = re.compile(r"[0-9a-f]{64}")


class ReleaseError(HsiError):
    """A dataset cannot be released (missing or failed validation, broken shard) or the release
    folder cannot be written; the message says which and why."""


@dataclass(frozen=True)
class ReleaseInput:
    path: Path
    manifest: dict
    validation: dict

    @property
    def config(self) -> str:
        return self.manifest["config"]


# a line break, a control or format character (bidi overrides, zero-width marks) or a separator
REFUSED_TEXT = ("Cc", "Cf", "Cs", "Zl", "Zp")


def check_card_text(flag: str, text: str) -> str:
    """`text` (a --title, --description or --change) if it is one line of printable text: the card
    and the changelog render it as written, so a line break or a control character would change what
    the card says around it (and fail the release's own verify later)."""
    for position, char in enumerate(text):
        if unicodedata.category(char) in REFUSED_TEXT:
            raise ReleaseError(
                f"{flag} {shown(text)} holds {shown(char)} (character {position + 1}); give one line of "
                "printable text, without line breaks or control characters"
            )
    return text


def parse_version(version: str) -> tuple[int, int, int]:
    match = VERSION_PATTERN.match(version)
    if not match:
        raise ReleaseError(f"version {version!r} is not of the form vMAJOR.MINOR.PATCH (e.g. v1.0.0)")
    return tuple(int(g) for g in match.groups())  # type: ignore[return-value]


def check_version_bump(previous: str | None, version: str | None, data_changed: bool) -> None:
    """A change of any sample needs a new minor or major version; the same data may keep it."""
    if previous is None or version is None:
        return
    old, new = parse_version(previous), parse_version(version)
    if data_changed and new[:2] <= old[:2]:
        raise ReleaseError(
            f"samples changed since {previous}, so {version} must raise the minor or major version "
            f"(e.g. v{old[0]}.{old[1] + 1}.0)"
        )
    if not data_changed and new < old:
        raise ReleaseError(f"version {version} is older than the previous release {previous}")


def subset_wnids(subset: object) -> list | None:
    """The foreground wnids of a spec's `subset` (its `pairs`' keys), which name the label space; None
    when the spec has no subset."""
    if not isinstance(subset, dict):
        return None
    pairs = subset.get("pairs")
    return list(pairs) if isinstance(pairs, dict) else []


def load_release_input(dataset_dir: Path) -> ReleaseInput:
    """Read a composed dataset's manifest and validation report, refusing anything not releasable."""
    dataset_dir = Path(dataset_dir)
    try:
        typed = Manifest.read(dataset_dir)  # a hostile manifest is refused by field, not by a crash
        manifest = typed.to_json()
    except FileNotFoundError as exc:
        raise ReleaseError(str(exc)) from None
    if format_of(manifest.get("stage")) != COMPOSITES:
        raise ReleaseError(f"{dataset_dir}: manifest stage is {manifest.get('stage')!r}, not a composed dataset")
    for key in ("config", "splits", "class_names"):
        if key not in manifest:
            raise ReleaseError(f"{dataset_dir}: manifest lacks {key!r}")
    check_release_names(dataset_dir, manifest)
    subset = (manifest.get("spec") or {}).get("subset") if isinstance(manifest.get("spec"), dict) else None
    problem = label_space_problem(manifest["class_names"], subset_wnids(subset))
    if problem:
        raise ReleaseError(f"{dataset_dir}/{MANIFEST_NAME}: {problem}; compose the dataset again")
    report_path = dataset_dir / VALIDATION_JSON
    if not report_path.is_file():
        raise ReleaseError(f"{dataset_dir}: no {VALIDATION_JSON}; run `hsi validate {dataset_dir}` first")
    validation = json.loads(report_path.read_text("utf-8"))
    if validation.get("ok") is not True:
        raise ReleaseError(f"{dataset_dir}: validation failed (ok={validation.get('ok')!r}); see {VALIDATION_MD}")
    validated = validation.get("fingerprint")
    if validated is not None and validated != manifest.get("fingerprint"):
        raise ReleaseError(
            f"{dataset_dir}: validation.json is for fingerprint {validated}, the dataset is "
            f"{manifest.get('fingerprint')}; validate it again"
        )
    check_validated_shards(dataset_dir, validation, typed.shard_sha256())
    return ReleaseInput(dataset_dir, manifest, validation)


@dataclass(frozen=True)
class PartsInput:
    path: Path
    manifest: dict


def load_parts_input(parts_dir: Path) -> PartsInput:
    """The parts folder `hsi extract` wrote (OUT/parts or OUT), checked as compose checks it before
    reading: its manifest is one of extract's, every shard name `<split>-NNNNN.tar` and every shard a
    regular file with the manifest's size and sha256 (builder.compose.parts_input)."""
    from builder.compose.parts_input import read_parts_manifest_checked, verify_parts_shards
    from builder.formats.parts_index import resolve_parts_dir

    parts_dir = resolve_parts_dir(Path(parts_dir))
    manifest_file = parts_dir / MANIFEST_NAME
    if manifest_file.is_symlink():
        raise ReleaseError(
            f"{manifest_file} is a symbolic link; a release copies no links: give the parts folder itself"
        )
    try:
        typed = Manifest.read(parts_dir)
    except FileNotFoundError:
        raise ReleaseError(
            f"--parts {parts_dir}: no {MANIFEST_NAME}; give the parts folder `hsi extract` wrote (OUT/parts or OUT)"
        ) from None
    splits = sorted(typed.splits)
    for split in splits:
        try:
            check_split_name(split)
        except UnsafeNameError as exc:
            raise ReleaseError(f"{manifest_file}: {exc}") from None
    typed = read_parts_manifest_checked(parts_dir, splits)
    verify_parts_shards(parts_dir, typed, splits)
    return PartsInput(parts_dir, typed.to_json())


def release_parts_dir(release_dir: Path) -> Path:
    """The parts folder inside a release folder (`data/parts`), for `hsi compose --parts RELEASE`;
    refused in one line when the release has no parts config. Its shards are checked by compose."""
    release_dir = Path(release_dir)
    record = read_release_meta(release_dir)
    if record is None:
        raise ReleaseError(f"{release_dir} is not a release folder (no {RELEASE_META})")
    if PARTS_CONFIG not in record["configs"]:
        raise ReleaseError(
            f"{release_dir} has no {PARTS_CONFIG} config, so it cannot be composed from; rebuild it with "
            "`hsi release --parts PARTS` (the parts folder `hsi extract` wrote)"
        )
    parts_dir = inside(release_dir, "data", PARTS_CONFIG)
    for path in (release_dir / "data", parts_dir, parts_dir / MANIFEST_NAME):
        if path.is_symlink():
            raise ReleaseError(f"{path} is a symbolic link; a release holds only its own files: download it again")
    if not (parts_dir / MANIFEST_NAME).is_file():
        raise ReleaseError(f"{release_dir}: the {PARTS_CONFIG} config has no {PARTS_DATA_DIR}/{MANIFEST_NAME}")
    manifest = Manifest.read(parts_dir).to_json()
    if shard_index(manifest) != record["configs"][PARTS_CONFIG]["splits"]:
        raise ReleaseError(
            f"{release_dir}: {PARTS_DATA_DIR}/{MANIFEST_NAME} and {RELEASE_META} list different parts shards; "
            "the release was changed after `hsi release` wrote it"
        )
    return parts_dir


def load_composed(dataset_dir: Path, split: str | None = None, config: str | None = None, **kwargs):
    """`datasets.load_dataset` for a composed dataset folder (`OUT/<config>`) or a release folder.

    A plain `load_dataset("OUT/<config>")` fails: with no card to declare its configs, `datasets`
    infers splits from file names, takes `validation.json` for a `validation` split and `_info.json`
    for JSON data. Here the shards come from the manifest, as explicit `data_files` of the webdataset
    builder, with the declared features (so labels are class names). A release folder is loaded by its
    card (`config` names one of its configs). `kwargs` go to `load_dataset` (e.g. `streaming=True`).
    """
    from datasets import load_dataset

    from cards.metadata import composite_features

    dataset_dir = Path(dataset_dir)
    if (dataset_dir / RELEASE_META).is_file():
        return load_dataset(str(dataset_dir), config, split=split, **kwargs)
    try:
        manifest = Manifest.read(dataset_dir).to_json()
    except (FileNotFoundError, ValueError, ManifestError) as exc:
        raise ReleaseError(
            f"{dataset_dir} is neither a composed dataset folder nor a release ({exc}); compose one "
            "with `hsi compose`, or gather datasets into a loadable folder with `hsi release`"
        ) from None
    if format_of(manifest.get("stage")) != COMPOSITES or "class_names" not in manifest:
        raise ReleaseError(
            f"{dataset_dir} holds the output of stage {manifest.get('stage')!r}, not a composed "
            "dataset; load a composed dataset folder (OUT/<config>) or a folder made by `hsi release`"
        )
    check_release_names(dataset_dir, manifest)
    if split is not None and split not in manifest["splits"]:
        raise ReleaseError(f"split {split!r} is not in {dataset_dir}; it has {', '.join(sorted(manifest['splits']))}")
    files = {
        name: [str(inside(dataset_dir, f)) for f in entry["filenames"]]
        for name, entry in sorted(manifest["splits"].items())
    }
    features = composite_features(manifest["class_names"], manifest.get("schema_version"))
    return load_dataset("webdataset", data_files=files, features=features, split=split, **kwargs)


def check_validated_shards(dataset_dir: Path, validation: dict, listed: dict[str, str]) -> None:
    """The report must vouch for exactly the shards the manifest lists: a report left over from an
    earlier build (or a crashed validate) must not ship other bytes."""
    recorded = validation.get("shards")
    if not isinstance(recorded, dict):
        raise ReleaseError(
            f"{dataset_dir}: validation is stale ({VALIDATION_JSON} records no shard sha256); "
            f"re-run `hsi validate {dataset_dir}`"
        )
    differing = sorted(name for name in set(recorded) | set(listed) if recorded.get(name) != listed.get(name))
    if differing:
        raise ReleaseError(
            f"{dataset_dir}: validation is stale: {VALIDATION_JSON} checked other bytes than the "
            f"manifest lists for {first_few(differing)}; re-run `hsi validate {dataset_dir}`"
        )


def check_release_names(dataset_dir: Path, manifest: dict) -> None:
    """Config, split and shard names become paths of the release: each must be one safe component,
    every shard `<split>-NNNNN.tar` of its own split and listed once."""
    try:
        check_config_name(manifest["config"])
        seen: set[str] = set()
        for split, entry in manifest["splits"].items():
            check_split_name(split)
            for shard in entry["shards"]:
                name = check_shard_filename(shard["filename"], split)
                if name in seen:
                    raise UnsafeNameError(f"shard {name!r} is listed twice")
                seen.add(name)
    except UnsafeNameError as exc:
        raise ReleaseError(f"{dataset_dir}/{MANIFEST_NAME}: {exc}") from None


def regular_source(source: Path) -> Path:
    """`source` if it is a regular file; a link is never followed into the release (it could lead
    to any file of the machine)."""
    if source.is_symlink():
        raise ReleaseError(f"{source} is a symbolic link; a release copies no links: replace it with the file itself")
    if not source.is_file():
        raise ReleaseError(f"{source} is missing or not a regular file")
    return source


def copy_new_file(source: Path, target: Path) -> None:
    """Copy a regular file to a path that must not exist yet (never overwrite, never follow a link)."""
    regular_source(source)
    with open(os.open(source, os.O_RDONLY | os.O_NOFOLLOW), "rb") as src, open(target, "xb") as dst:
        shutil.copyfileobj(src, dst)


def copy_verified(source: Path, target: Path, sha256: str, size: int) -> None:
    """Hard-link (or copy) a shard and check it is the one the manifest describes."""
    regular_source(source)
    try:
        os.link(source, target, follow_symlinks=False)
    except FileExistsError:
        raise ReleaseError(f"{target} exists already; a release never overwrites a file") from None
    except OSError:  # another file system, or links not allowed: copy instead
        copy_new_file(source, target)
    if target.is_symlink() or target.stat().st_size != size or sha256_file(target) != sha256:
        raise ReleaseError(f"{source} does not match its manifest entry (size or sha256); rebuild the dataset")


def shard_index(manifest: dict) -> dict:
    """{split: [shard entries]}: what a changelog and a verify compare between releases."""
    return {split: entry["shards"] for split, entry in sorted(manifest["splits"].items())}


def read_release_meta(release_dir: Path) -> dict | None:
    """The release's `_release.json`, checked field by field (read_release_record), or None when the
    folder has none."""
    path = Path(release_dir) / RELEASE_META
    if not (path.exists() or path.is_symlink()):
        return None
    return read_release_record(path)


def read_release_record(path: Path, source: str | None = None) -> dict:
    """A `_release.json` (of a folder, or downloaded from the Hub) as the plain dict `hsi release` wrote,
    every field it is read for checked: one line naming the file (`source`, if given) and the field.
    Config, split and shard names become paths, so each must pass the name rules."""
    return check_release_record(read_json(path, RELEASE_META), source or path)


def _name(fields: Fields, field: str, name: object, check: Callable[[object], str]) -> str:
    """`name` (the value of `field`, or the key itself) if it passes the name rule `check`."""
    try:
        return check(name)
    except UnsafeNameError as exc:
        raise fields.error(str(exc), field) from None


def _record_configs(configs: Fields) -> dict:
    checked = {}
    for config in configs.data:
        entry = configs.object(_name(configs, str(config), config, check_config_name)).only(("fingerprint", "splits"))
        splits = entry.object("splits")
        listed = {}
        for split in splits.data:
            _name(splits, str(split), split, check_split_name)
            listed[split] = [
                {
                    "filename": _name(
                        shard, "filename", shard.string("filename"), lambda n, s=split: check_shard_filename(n, s)
                    ),
                    "num_samples": shard.integer("num_samples", low=0),
                    "bytes": shard.integer("bytes", low=0),
                    "sha256": shard.string("sha256", pattern=SHA256),
                }
                for shard in (s.only(("filename", "num_samples", "bytes", "sha256")) for s in splits.objects(split))
            ]
        checked[config] = {"fingerprint": entry.string("fingerprint", None), "splits": listed}
    return checked


def _record_changelog(fields: Fields) -> list[dict]:
    return [
        {
            "version": entry.only(("version", "changes")).string("version"),
            "changes": [
                check_string(line, lambda problem, n=n, e=entry: e.error(problem, f"changes[{n}]"))
                for n, line in enumerate(entry.list("changes", []))
            ],
        }
        for entry in fields.objects("changelog", [])
    ]


# every key `hsi release` writes; any other is refused by name (nothing in a release goes unread)
RECORD_FIELDS = ("files", "name", "version", "default_config", "configs", "changelog", "previous", "tool", "signer")


def check_release_record(data: object, source: Path | str) -> dict:
    top = Fields(data, source).only(RECORD_FIELDS)
    tool = top.object("tool", None).only(("name", "version"))
    record = {
        "name": top.string("name", None),
        "version": top.string("version", None, pattern=VERSION_PATTERN),
        "default_config": top.string("default_config"),
        "configs": _record_configs(top.object("configs")),
        "changelog": _record_changelog(top),
        "previous": None,
        "tool": {key: tool.string(key) for key in ("name", "version") if key in tool.data},
        "signer": check_recorded_signer(top),
    }
    if top.has("previous"):
        previous = top.object("previous").only(("version", "configs", "changelog"))
        record["previous"] = {
            "version": previous.string("version", None, pattern=VERSION_PATTERN),
            "configs": _record_configs(previous.object("configs", None)),
            "changelog": _record_changelog(previous),
        }
    if top.has("files"):
        files = top.object("files")
        record["files"] = {str(k): files.string(str(k), pattern=SHA256) for k in files.data}
    if record["default_config"] not in record["configs"]:
        raise top.error(f"{record['default_config']!r} is not one of its configs", "default_config")
    return record


def load_previous_release(previous_release: Path) -> dict:
    """The record of `--previous FOLDER`: a published (versioned) release whose card and files vouch
    for its record (check_previous_release)."""
    meta = read_release_meta(previous_release)
    if meta is None:
        raise ReleaseError(f"--previous {previous_release} is not a release folder (no {RELEASE_META})")
    if meta.get("version") is None:
        raise ReleaseError(
            f"--previous {previous_release} is an unversioned build, not a published release; "
            "give the folder of the last release made with --version"
        )
    check_previous_release(Path(previous_release), meta)
    return meta


def published_base(previous_release: dict | None, replaced: dict | None, version: str | None) -> dict | None:
    """The last *published* release (one whose `_release.json` has a version) to compare against:
    `previous_release` (the record load_previous_release read) when given; else the folder being
    overwritten when it holds another version;
    else (an unversioned folder, or the same version rebuilt) the release that folder was compared
    against, recorded in its `previous` field. The folder being replaced is never its own base."""
    if previous_release is not None:
        return previous_release
    if replaced is None:
        return None
    if replaced.get("version") is not None and replaced.get("version") != version:
        return replaced
    return replaced.get("previous")


def check_previous_release(folder: Path, record: dict, flag: str = "--previous") -> None:
    """Refuse a previous release whose record its own card and files do not vouch for: its card must
    be the one its `files` record names, and every field the card renders (changelog, tool) must be
    what the record says (cards.release_fields); else an edited changelog would be carried into the
    next release, card and all."""
    card_path = folder / "README.md"
    recorded = (record.get("files") or {}).get("README.md")
    if card_path.is_symlink() or not card_path.is_file() or recorded is None or sha256_file(card_path) != recorded:
        raise ReleaseError(
            f"{flag} {folder}: its README.md is missing or not the card its {RELEASE_META} records; give the "
            "previous release as `hsi release` wrote it (`hsi verify` says what changed)"
        )
    problems = record_field_problems(record, card_path.read_text("utf-8", errors="replace"))
    if problems:
        raise ReleaseError(
            f"{flag} {folder}: {problems[0]}{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}; "
            "its record was changed after `hsi release` wrote it (`hsi verify` lists what)"
        )


def build_release(
    release_dir: Path,
    dataset_dirs: list[Path],
    *,
    overwrite: bool = False,
    version: str | None = None,
    changes: list[str] | tuple[str, ...] = (),
    default_config: str | None = None,
    previous_release: Path | None = None,
    results_dirs: list[Path] | tuple[Path, ...] = (),
    title: str | None = None,
    description: str | None = None,
    announce: Callable[[str], None] | None = None,
    parts_dir: Path | None = None,
    sign: ReleaseSigner | None = None,
) -> Path:
    """Gather validated composed datasets into the release folder `release_dir` and return it.

    The folder's name is the dataset name users load (`load_dataset("hard-spurious-imagenet")` from
    its parent). `previous_release`, else the folder being overwritten when it holds another published
    version, supplies the changelog so far (see `published_base`); a previous release whose record
    departs from its own card is refused rather than copied forward.
    `results_dirs`: `hsi eval` outputs whose reports become the card's Results section.
    `title`/`description`/`changes`: the card's heading, introduction and this version's changelog lines,
    each one line of printable text (by default they say whether the configs are the paper's benchmark
    or a custom build). `announce` receives notes (a partial evaluation left out of the card).
    `parts_dir`: the parts `hsi extract` wrote, added as the `parts` config (checked first as compose
    checks them), so the release can be composed from. `sign`: the signer (cards.signature) whose
    detached signature over every file's sha256 the folder then holds. The folder's lock
    (builder.core.locks) is held from the first look at `release_dir` to the last rename.
    """
    release_dir = Path(release_dir)
    if version is not None:
        parse_version(version)
    for flag, text in [("--title", title), ("--description", description), *(("--change", c) for c in changes)]:
        if text is not None:
            check_card_text(flag, text)
    if not dataset_dirs:
        raise ReleaseError("give at least one composed dataset folder")
    check_release_folder(release_dir, overwrite)
    inputs = [load_release_input(Path(d)) for d in dataset_dirs]
    parts = load_parts_input(Path(parts_dir)) if parts_dir is not None else None
    previous = load_previous_release(Path(previous_release)) if previous_release is not None else None
    with exclusive_folder(release_dir):  # two releases into one --out: the second is refused, never both written
        recover_leftovers(release_dir)
        check_release_folder(release_dir, overwrite)
        return _build_release(
            release_dir,
            inputs,
            parts,
            version=version,
            changes=changes,
            default_config=default_config,
            previous_release=previous,
            results_dirs=results_dirs,
            title=title,
            description=description,
            announce=announce,
            sign=sign,
        )


def check_release_folder(release_dir: Path, overwrite: bool) -> None:
    """Refuse an `--out` that may not be written: one that exists without --overwrite, a link, a
    folder that is not a release, or a release holding files `hsi release` did not write."""
    if release_dir.exists() and not overwrite:
        raise ReleaseError(f"{release_dir} exists; use --overwrite to replace it")
    if release_dir.is_symlink():  # the swap below would replace the link and leave the release behind it
        raise ReleaseError(
            f"{release_dir} is a link (to {os.readlink(release_dir)}): --overwrite only replaces a real "
            "release folder; pass the folder it leads to, or remove the link"
        )
    if release_dir.exists() and any(release_dir.iterdir()) and not (release_dir / RELEASE_META).is_file():
        raise ReleaseError(
            f"{release_dir} is not empty and is not a release folder; --overwrite only replaces a release"
        )
    if release_dir.exists():
        refuse_foreign(release_dir, foreign_release_entries(release_dir), "--out", ReleaseError)


def _build_release(
    release_dir: Path,
    inputs: list[ReleaseInput],
    parts: PartsInput | None,
    *,
    version: str | None,
    changes: list[str] | tuple[str, ...],
    default_config: str | None,
    previous_release: dict | None,
    results_dirs: list[Path] | tuple[Path, ...],
    title: str | None,
    description: str | None,
    announce: Callable[[str], None] | None,
    sign: ReleaseSigner | None,
) -> Path:
    names = [i.config for i in inputs]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ReleaseError(f"config names given twice: {duplicated}")
    if PARTS_CONFIG in names:
        raise ReleaseError(
            f"a composed config is named {PARTS_CONFIG!r}, the name of the release's parts config; rename it "
            "(hsi compose --name) and compose again"
        )
    default = default_config or (DEFAULT_CONFIG if DEFAULT_CONFIG in names else names[0])
    if default not in names:
        raise ReleaseError(f"default config {default!r} is not among the datasets' configs {names}")

    results = load_results(list(results_dirs)) if results_dirs else []
    results, notes = select_results(results, {i.config: i.manifest.get("fingerprint") for i in inputs})
    for note in notes:
        (announce or (lambda _line: None))(note)

    replaced = read_release_meta(release_dir) if release_dir.exists() else None
    if previous_release is None and replaced is not None and replaced.get("files") is not None:
        check_previous_release(release_dir, replaced, "--out")  # its changelog may become this one's
    previous = published_base(previous_release, replaced, version)
    configs_meta = {
        i.config: {"fingerprint": i.manifest.get("fingerprint"), "splits": shard_index(i.manifest)}
        for i in sorted(inputs, key=lambda i: i.config)
    }
    if parts is not None:
        configs_meta[PARTS_CONFIG] = {
            "fingerprint": parts.manifest.get("fingerprint"),
            "splits": shard_index(parts.manifest),
        }
    auto_changes = describe_changes(previous, configs_meta)
    previous_version = previous.get("version") if previous else None
    check_version_bump(previous_version, version, data_changed=bool(auto_changes))
    changelog = [ChangelogEntry(e["version"], tuple(e["changes"])) for e in (previous or {}).get("changelog", [])]
    if not (previous and version == previous_version):  # re-releasing the same version keeps its entry
        changelog.insert(
            0, ChangelogEntry(version or "unreleased", tuple(changes) + tuple(auto_changes) or ("first release",))
        )

    release_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = release_dir.with_name(f".{release_dir.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        summaries = [_stage_config(staging, i, default=(i.config == default)) for i in inputs]
        # The default config comes first in the card, the rest in the order given.
        summaries.sort(key=lambda s: not s.default)
        parts_summary = _stage_parts(staging, parts) if parts is not None else None
        section = render_results(results, copy_plots(results, staging), table) if results else None
        signer = sign.record() if sign is not None else None
        card = render_card(
            summaries,
            changelog,
            version,
            section,
            title,
            description,
            name=release_dir.name,
            parts=parts_summary,
            signer=signer,
        )
        (staging / "README.md").write_text(card, "utf-8")
        manifests = {i.config: i.manifest for i in inputs} | ({PARTS_CONFIG: parts.manifest} if parts else {})
        croissant = croissant_metadata(title or default_title(summaries), version, default, manifests)
        (staging / CROISSANT_NAME).write_text(render_croissant(croissant), "utf-8")
        # eval.yaml registers the Hub repo as a benchmark: one task per config and split (cards.hub_benchmark)
        benchmark = benchmark_document(
            default_name(title or default_title(summaries)),
            description or default_description(is_paper_benchmark(summaries)),
            release_tasks(configs_meta, default),
        )
        (staging / EVAL_YAML).write_text(eval_yaml_text(benchmark), "utf-8")
        write_json_atomic(
            staging / RELEASE_META,
            {
                "files": written_files(staging, configs_meta),
                "name": DATASET_NAME,
                "version": version,
                "default_config": default,
                "configs": configs_meta,
                "changelog": [{"version": e.version, "changes": list(e.changes)} for e in changelog],
                "previous": base_record(previous),
                "tool": {"name": DATASET_NAME, "version": __version__},
                **({"signer": signer} if signer else {}),
            },
        )
        if sign is not None:  # last: the signature covers every file above, _release.json included
            sign_folder(staging, release_dir.name, sign)
        if release_dir.exists():
            # A kill between these renames leaves the old release as `.NAME.PID.old`, which the next
            # run puts back (recover_leftovers): the history is never lost.
            trash = release_dir.with_name(f".{release_dir.name}.{os.getpid()}.old")
            os.replace(release_dir, trash)
            os.replace(staging, release_dir)
            shutil.rmtree(trash)
        else:
            os.replace(staging, release_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return release_dir


def written_files(staging: Path, configs: dict) -> dict[str, str]:
    """{release-relative path: sha256} of every file written into the staging folder (all but
    `_release.json`, which holds this record): what a later --overwrite may delete, and only while
    unchanged. Shards keep the sha256 their copy was checked against."""
    shards = {
        f"data/{config}/{shard['filename']}": shard["sha256"]
        for config, entry in configs.items()
        for listed in entry["splits"].values()
        for shard in listed
    }
    files = {}
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        relative = path.relative_to(staging).as_posix()
        files[relative] = shards.get(relative) or sha256_file(path)
    return files


def _listed_shards(entry) -> set:
    try:
        return {shard["filename"] for listed in entry["splits"].values() for shard in listed}
    except (KeyError, TypeError, AttributeError):
        return set()


def foreign_release_entries(release_dir: Path) -> list[str]:
    """The entries of an existing release folder that `hsi release` did not write there (sorted
    paths, folders with a trailing `/`): what is not in the layout above for the configs its
    `_release.json` lists, with the shards listed there and, per config, the previews its
    validation report lists (own_preview_names) and the results plots."""
    data = release_dir / "data"
    record = read_json_dict(release_dir / RELEASE_META)
    configs = record.get("configs")
    configs = configs if isinstance(configs, dict) else {}
    # A release of this version records every file's sha256: a file is ours only while unchanged. One
    # written before the record existed is judged by the layout alone, except the results plots,
    # whose names a user's own file can match.
    files = record.get("files") if isinstance(record.get("files"), dict) else None

    def unchanged(relative: str) -> bool:
        if files is None:
            return True
        recorded = files.get(relative)
        return isinstance(recorded, str) and sha256_file(release_dir / relative) == recorded

    data_files = {c: _listed_shards(e) | {MANIFEST_NAME, VALIDATION_JSON, VALIDATION_MD} for c, e in configs.items()}
    previews = {
        c: own_preview_names(read_json_dict(data / c / MANIFEST_NAME), read_json_dict(data / c / VALIDATION_JSON))
        for c in configs
        if isinstance(c, str) and "/" not in c
    }

    def in_layout(relative: str) -> bool:
        parts = relative.split("/")
        if len(parts) == 1:
            return relative in ("README.md", CROISSANT_NAME, EVAL_YAML)
        if len(parts) == 2:
            return parts[0] == RESULTS_DIR and parts[1].endswith(RELEASE_PLOT_SUFFIX) and files is not None
        top, config, name = parts
        return (top == "data" and name in data_files.get(config, ())) or (
            top == PREVIEWS_DIR and name in previews.get(config, ())
        )

    def own_file(relative: str) -> bool:
        return relative in (RELEASE_META, SIGNATURE) or (in_layout(relative) and unchanged(relative))

    def own_folder(relative: str) -> bool:
        top, _, config = relative.partition("/")
        return relative in ("data", PREVIEWS_DIR, RESULTS_DIR) or (top in ("data", PREVIEWS_DIR) and config in previews)

    return stray_entries(release_dir, own_file, own_folder)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # a folder of our own pid is from an earlier process that had it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_leftovers(release_dir: Path) -> None:
    """Finish what a killed `hsi release` left beside `release_dir`: a `.NAME.PID.old` folder with no
    release in place is the old release of a kill between the swap's two renames, so it comes back;
    every other `.NAME.PID.tmp`/`.old` folder of a dead process is deleted. Only exactly these names
    are touched, never a link, never a folder of a run still alive."""
    parent = release_dir.parent
    if not parent.is_dir():
        return
    ours = re.compile(rf"\.{re.escape(release_dir.name)}\.([0-9]+)\.(tmp|old)")
    for entry in sorted(parent.iterdir(), key=lambda p: not p.name.endswith(".old")):
        match = ours.fullmatch(entry.name)
        if not match or entry.is_symlink() or not entry.is_dir() or _pid_alive(int(match[1])):
            continue
        if match[2] == "old" and not release_dir.exists() and (entry / RELEASE_META).is_file():
            os.replace(entry, release_dir)
        else:
            shutil.rmtree(entry)


def _stage_config(staging: Path, item: ReleaseInput, default: bool) -> ConfigSummary:
    # Names were checked in load_release_input; `inside` also catches a link planted on the way.
    data_dir = inside(staging, "data", item.config)
    data_dir.mkdir(parents=True)
    classes: set = set()
    for _split, entry in sorted(item.manifest["splits"].items()):
        for shard in entry["shards"]:
            name = shard["filename"]
            copy_verified(inside(item.path, name), inside(data_dir, name), shard["sha256"], shard["bytes"])
            classes |= shard_classes(inside(data_dir, name))
    write_json_atomic(data_dir / MANIFEST_NAME, item.manifest)
    write_json_atomic(data_dir / VALIDATION_JSON, item.validation)
    if (item.path / VALIDATION_MD).exists() or (item.path / VALIDATION_MD).is_symlink():
        copy_new_file(item.path / VALIDATION_MD, data_dir / VALIDATION_MD)
    previews = []
    source_previews = item.path / PREVIEWS_DIR
    if source_previews.is_dir() and not source_previews.is_symlink():
        target = inside(staging, PREVIEWS_DIR, item.config)
        ours = own_preview_names(item.manifest, item.validation)
        for png in sorted(source_previews.glob("*.png")):
            if png.name not in ours:  # a picture someone else put there is never published
                continue
            target.mkdir(parents=True, exist_ok=True)
            copy_new_file(png, target / png.name)
            previews.append(f"{PREVIEWS_DIR}/{item.config}/{png.name}")
    return ConfigSummary(item.config, item.manifest, item.validation, tuple(previews), default, len(classes))


def _stage_parts(staging: Path, parts: PartsInput) -> PartsSummary:
    """The parts shards, copied and checked against their manifest, and the manifest beside them."""
    data_dir = inside(staging, "data", PARTS_CONFIG)
    data_dir.mkdir(parents=True)
    for _split, entry in sorted(parts.manifest["splits"].items()):
        for shard in entry["shards"]:
            name = shard["filename"]
            copy_verified(inside(parts.path, name), inside(data_dir, name), shard["sha256"], shard["bytes"])
    write_json_atomic(data_dir / MANIFEST_NAME, parts.manifest)
    return PartsSummary(parts.manifest)


def shard_classes(shard: Path) -> set:
    """The distinct `class_index` of a shard's samples: the manifest counts groups and sizes, not
    classes, and the card must say how many classes a config really holds (a verified copy is read
    anyway, so this costs one sequential pass)."""
    found = set()
    try:
        for _, members in iter_shard(shard):
            found.add(json.loads(members["json"].decode("utf-8")).get("class_index"))
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        raise ReleaseError(
            f"{shard}: a sample's json does not read ({type(exc).__name__}: {exc}); rebuild the dataset"
        ) from None
    return found
