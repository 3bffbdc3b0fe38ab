"""The parts config of a published release, downloaded for `hsi compose --parts hf://datasets/ORG/NAME@REVISION`.

The revision (a tag such as v1.0.0, a branch or a commit) is resolved to its commit once; then
`_release.json`, the parts manifest (`data/parts/_info.json`) and each shard it lists are downloaded
with huggingface_hub (HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE as everywhere in hf_scripts) into
`<cache>/<ORG>--<NAME>/<commit>/`, as plain files (huggingface_hub's `local_dir` mode, no links),
under `$HF_HOME/hsi/parts` by default: never beside the compose output. Before a name becomes a path
it passes the repo's name rules (builder.core.names): the release record's configs, splits and shard
names, and the manifest must list exactly the shards the record lists. The shards are then checked
with compose's own checks (builder.compose.parts_input: names, regular files, size and sha256); a
cached copy that fails them is downloaded once more before the release is refused.

Offline (HF_HUB_OFFLINE=1) a revision resolves to the commit it resolved to when last downloaded (or
is a commit id), and the files come from that cache folder.
"""

from __future__ import annotations

import re
from pathlib import Path

from builder.core.errors import InputError, printable
from builder.core.manifest import MANIFEST_NAME, Manifest, ManifestError
from builder.core.names import UnsafeNameError, check_split_name, inside
from builder.core.untrusted import UntrustedInput, read_json
from cards.parts_card import PARTS_CONFIG, PARTS_DATA_DIR
from cards.release import RELEASE_META, check_release_record, shard_index
from hf_scripts.publish import REPO_TYPE, PublishError, check_repo_id, hub_errors

HF_PREFIX = "hf://"
ADDRESS = re.compile(r"hf://datasets/(?P<repo>[^/@]+/[^/@]+)(?:@(?P<revision>[A-Za-z0-9][A-Za-z0-9._-]{0,99}))?/?")
COMMIT = re.compile(r"[0-9a-f]{40}")
REFS_DIR = "refs"


def is_hub_address(text: str) -> bool:
    return str(text).startswith(HF_PREFIX)


def parse_address(address: str) -> tuple[str, str]:
    """(ORG/NAME, revision) of `hf://datasets/ORG/NAME@REVISION` (revision `main` when not given)."""
    match = ADDRESS.fullmatch(address)
    if match is None:
        raise InputError(
            f"--parts {printable(address)} is not of the form hf://datasets/ORG/NAME@REVISION "
            "(a release's repo and a tag such as v1.0.0, a branch or a commit)"
        )
    return check_repo_id(match["repo"]), match["revision"] or "main"


def default_cache_root() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "hsi" / "parts"


def _resolve_commit(api, repo_id: str, revision: str, refs: Path) -> str:
    """The commit `revision` names: asked of the Hub, or offline the one recorded at the last download."""
    from huggingface_hub import constants

    if COMMIT.fullmatch(revision):
        return revision
    recorded = refs / revision
    if constants.HF_HUB_OFFLINE:
        text = recorded.read_text("ascii").strip() if recorded.is_file() and not recorded.is_symlink() else ""
        if COMMIT.fullmatch(text):
            return text
        raise PublishError(
            f"the parts of {repo_id}@{revision} are not in the cache and HF_HUB_OFFLINE is set: unset it to download "
            "them once, or give the revision as a commit id that was downloaded before"
        )
    commit = api.dataset_info(repo_id, revision=revision).sha
    if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
        raise PublishError(f"the Hub gives no commit for {repo_id}@{revision}")
    refs.mkdir(parents=True, exist_ok=True)
    (refs / f".{revision}.tmp").write_text(commit + "\n", "ascii")
    (refs / f".{revision}.tmp").replace(recorded)
    return commit


def _plain_json(path: Path, label: str) -> object:
    """A downloaded JSON file, read through the untrusted-input layer (a link is refused, not followed)."""
    try:
        return read_json(path, Path(label).name)
    except UntrustedInput as exc:
        raise UntrustedInput(str(exc).replace(str(path), label, 1)) from None


def fetch_release_parts(address: str, cache_root: Path | None = None, api=None) -> Path:
    """The local parts folder of the release at `address` (hf://datasets/ORG/NAME@REVISION), each of its
    shards proved to hold the parts manifest's bytes; compose reads it like any parts folder."""
    from huggingface_hub import HfApi

    repo_id, revision = parse_address(address)
    api = api or HfApi()
    with hub_errors(api, "downloading the parts config of", repo_id):
        return _fetch(api, repo_id, revision, Path(cache_root) if cache_root else default_cache_root())


def _fetch(api, repo_id: str, revision: str, cache_root: Path) -> Path:
    from huggingface_hub import hf_hub_download

    from builder.compose.parts_input import read_parts_manifest_checked, verify_parts_shards

    repo_folder = cache_root / repo_id.replace("/", "--")
    commit = _resolve_commit(api, repo_id, revision, repo_folder / REFS_DIR)
    local_dir = repo_folder / commit
    label = f"{repo_id}@{revision}"

    def fetch(path: str, force: bool = False) -> Path:
        target = Path(
            hf_hub_download(
                repo_id,
                path,
                repo_type=REPO_TYPE,
                revision=commit,
                token=api.token,
                local_dir=local_dir,
                force_download=force,
            )
        )
        if target.is_symlink() or target.resolve() != inside(local_dir, path).resolve():
            raise InputError(f"{label}/{path}: the download is not a plain file in {local_dir}; refusing it")
        return target

    record = check_release_record(
        _plain_json(fetch(RELEASE_META), f"{label}/{RELEASE_META}"), f"{label}/{RELEASE_META}"
    )
    if PARTS_CONFIG not in record["configs"]:
        raise InputError(
            f"{label} has no {PARTS_CONFIG} config, so it cannot be composed from; rebuild the release with "
            "`hsi release --parts PARTS` and publish it as a new version"
        )
    manifest_label = f"{label}/{PARTS_DATA_DIR}/{MANIFEST_NAME}"
    try:
        typed = Manifest.from_json(_plain_json(fetch(f"{PARTS_DATA_DIR}/{MANIFEST_NAME}"), manifest_label))
    except ManifestError as exc:
        raise ManifestError(f"{manifest_label}: {exc}") from None
    try:
        for split in typed.splits:
            check_split_name(split)
    except UnsafeNameError as exc:
        raise InputError(f"{manifest_label}: {exc}") from None
    # the record's names passed the name rules; the manifest must list exactly those shards
    if shard_index(typed.to_json()) != record["configs"][PARTS_CONFIG]["splits"]:
        raise InputError(
            f"{manifest_label} and {RELEASE_META} list different parts shards; the release cannot be trusted"
        )
    parts_dir = inside(local_dir, "data", PARTS_CONFIG)
    splits = sorted(typed.splits)
    read_parts_manifest_checked(parts_dir, splits)
    for split in splits:
        for filename in typed.splits[split].filenames:
            fetch(f"{PARTS_DATA_DIR}/{filename}")
    try:
        verify_parts_shards(parts_dir, typed, splits)
    except InputError:  # a damaged cached copy: download the shards once more, then refuse
        for split in splits:
            for filename in typed.splits[split].filenames:
                # our own cached copy goes first, so the copy checked next is the one just downloaded,
                # whatever huggingface_hub's local_dir freshness rules (mtime within 1 s) make of it
                cached = inside(local_dir, f"{PARTS_DATA_DIR}/{filename}")
                if cached.is_file() and not cached.is_symlink():
                    cached.unlink()
                fetch(f"{PARTS_DATA_DIR}/{filename}", force=True)
        verify_parts_shards(parts_dir, typed, splits)
    return parts_dir
