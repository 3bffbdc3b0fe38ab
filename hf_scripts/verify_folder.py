"""`hsi verify FOLDER`: the checks of a published version (hf_scripts.verify), on a release folder on
disk (one `hsi release` wrote, a snapshot downloaded from the Hub, a checkout of a `--to-git` mirror).

Every file below the folder is listed (a link, or anything not a regular file, is a problem; a git
checkout's own `.git` is not part of the revision), compared with `_release.json` by the shared
checks (hf_scripts.release_checks), every shard hashed, and each config whose card reads exactly its
shards streamed with `load_dataset(FOLDER, config, streaming=True)`. Problems are lines; none means
that loading the folder reads exactly the shards that were hashed.
"""

from __future__ import annotations

import os
from pathlib import Path

from builder.core.errors import printable
from builder.core.hashing import sha256_file
from builder.core.manifest import Manifest
from builder.core.untrusted import read_json
from cards.croissant import CROISSANT_NAME
from cards.hub_benchmark import EVAL_YAML
from cards.release import RELEASE_META, read_release_meta
from cards.signature import SignerCheck
from hf_scripts.publish import PublishError, release_shards
from hf_scripts.release_checks import (
    CARD,
    card_problems,
    config_read_back,
    fingerprint_problems,
    label_space_problems,
    manifest_path,
    record_problems,
    recorded_file_problems,
    release_document_problems,
    release_signature_problems,
)

GIT_DIR = ".git"  # a mirror checkout's repository, not a file of the revision


def folder_files(folder: Path) -> tuple[set[str], list[str]]:
    """(paths of the regular files below `folder`, a problem for each link or other entry); links are
    never followed."""
    present, problems = set(), []
    for root, dirs, names in os.walk(folder):
        here = Path(root)
        if here == folder and GIT_DIR in dirs:
            dirs.remove(GIT_DIR)
        for name in sorted(names) + sorted(d for d in dirs if (here / d).is_symlink()):
            path = here / name
            relative = path.relative_to(folder).as_posix()
            if path.is_symlink() or not path.is_file():
                problems.append(
                    f"{printable(relative)}: a link or not a regular file; a release holds only its own files"
                )
            else:
                present.add(relative)
    return present, problems


def verify_folder(
    folder: Path, version: str | None = None, signer: SignerCheck | None = None, previous: Path | None = None
) -> tuple[list[str], list[str]]:
    """(report lines, problems) for the release folder `folder`; `version`, if given, must be the one
    its `_release.json` names; `signer`, the key or identity its signature must check against;
    `previous`, the previous release's folder, which its `previous` record must match."""
    from datasets import load_dataset

    folder = Path(folder)
    release = read_release_meta(folder) if folder.is_dir() else None
    if release is None:
        raise PublishError(f"{folder} is not a release folder (no {RELEASE_META}); give one `hsi release` wrote")
    lines, problems = [f"{folder}: release {release.get('version') or '(unversioned)'}"], []
    if version is not None and release.get("version") != version:
        problems.append(f"{RELEASE_META} says version {release.get('version')!r}, not {version}")
    present, listing = folder_files(folder)
    problems += listing
    manifests = {}
    for config, listed in sorted(release["configs"].items()):
        # read through the untrusted-input layer: a linked manifest is refused, never followed
        manifests[config] = Manifest.from_json(read_json(folder / manifest_path(config), manifest_path(config)))
        problems += fingerprint_problems(config, manifests[config], listed["fingerprint"])
        problems += label_space_problems(config, manifests[config])
    problems += recorded_file_problems(
        release, present, lambda path: sha256_file(folder / path), release_shards(release)
    )
    card = (folder / CARD).read_text("utf-8", errors="replace") if CARD in present else None
    card_lines, exact = card_problems(card, manifests)
    problems += card_lines
    croissant = (folder / CROISSANT_NAME).read_text("utf-8", errors="replace") if CROISSANT_NAME in present else None
    problems += release_document_problems(
        release, manifests, card, croissant, folder / EVAL_YAML if EVAL_YAML in present else None
    )
    before = None
    if previous is not None:
        before = read_release_meta(previous) if Path(previous).is_dir() else None
        if before is None:
            raise PublishError(f"--previous {previous} is not a release folder (no {RELEASE_META})")
    found_lines, found = record_problems(release, card, (before, f"--previous {previous}") if before else None)
    lines += found_lines
    problems += found
    found_lines, found = release_signature_problems(release, card, folder, present, signer or SignerCheck())
    lines += found_lines
    problems += found

    def stream(config: str, split: str):
        return load_dataset(str(folder), config, split=split, streaming=True)

    for config, listed in sorted(release["configs"].items()):
        manifest = manifests[config]
        local_shards: dict[str, Path] = {}
        splits = []
        for split in sorted(set(listed["splits"]) | set(manifest.splits)):
            entry = manifest.splits.get(split)
            if entry is None or [s.to_json() for s in entry.shards] != listed["splits"].get(split):
                problems.append(f"{config}/{split}: {manifest_path(config)} and {RELEASE_META} list different shards")
                continue
            splits.append(split)
            for shard in entry.shards:
                path = f"data/{config}/{shard.filename}"
                if path not in present:
                    continue  # the files record's check names it
                local = folder / path
                local_shards[shard.filename] = local
                if local.stat().st_size != shard.bytes or sha256_file(local) != shard.sha256:
                    problems.append(f"{config}/{shard.filename}: sha256 or size differs from the manifest")
        found_lines, found = config_read_back(config, manifest, splits, local_shards, config in exact, stream)
        lines += found_lines
        problems += found
    return lines, problems
