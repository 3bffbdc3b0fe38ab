"""Publish a release folder to the Hugging Face Hub as an immutable, tagged version.

One release is one commit: every file of the folder is added (files the previous release had and
this one lacks are deleted) in a single `create_commit` whose `parent_commit` is the previous
release's commit, then `create_tag(vX.Y.Z)` names that commit. A single commit (rather than
`upload_folder`, which with hf_xet may split a large folder into several commits) means the tag
points at exactly the release, and `parent_commit` guards all of it: if anyone changed the repo since
the previous release, the Hub refuses the commit and nothing is half-published.

`plan_publish` only reads the Hub; `perform_publish` writes. The token is whatever huggingface_hub
finds (HF_TOKEN or `hf auth login`); it is never printed or stored here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.errors import HsiError, printable
from builder.core.hashing import sha256_file
from builder.core.names import UnsafeNameError, check_config_name, check_shard_filename
from cards.hub_benchmark import EVAL_YAML, eval_yaml_problems
from cards.metadata import check_card
from cards.release import (
    RELEASE_META,
    ReleaseError,
    check_version_bump,
    describe_changes,
    foreign_release_entries,
    parse_version,
    read_release_meta,
)
from cards.summary import CardError
from hf_scripts.viewer_checks import release_folder_viewer_problems

REPO_TYPE = "dataset"
KEEP_REMOTE = {".gitattributes"}  # created by the Hub with the repo; not part of a release
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


class PublishError(HsiError):
    """Publishing is refused (tag exists, card invalid, repo moved on); the message says why."""


@dataclass
class PublishPlan:
    repo_id: str
    version: str
    release_dir: Path
    repo_exists: bool
    parent_commit: str | None
    previous_version: str | None
    uploads: list[tuple[str, int]] = field(default_factory=list)  # (path in repo, bytes)
    deletes: list[str] = field(default_factory=list)
    tag_only: bool = False  # main is already this release (a run stopped before its tag)
    offline: bool = False  # the Hub could not be read (HF_HUB_OFFLINE): a dry run only

    def describe(self, private: bool = False) -> list[str]:
        if self.offline:
            return [
                f"offline (HF_HUB_OFFLINE is set): {self.repo_id} was not read, so this dry run cannot check whether "
                f"the repo exists, whether tag {self.version} is free, which release it follows, or which of its "
                "files a commit would delete; the release folder itself was checked (version, card, files)",
                "commit on top of the repo's latest release (unknown offline):",
                *[f"  upload {path} ({size} bytes)" for path, size in self.uploads],
                f"tag the commit {self.version}",
            ]
        if self.tag_only:
            return [f"main of {self.repo_id} ({self.parent_commit}) is already this release: tag it {self.version}"]
        lines = []
        if not self.repo_exists:
            lines.append(f"create dataset repo {self.repo_id}" + (" (private)" if private else ""))
        base = (
            f"previous release {self.previous_version} ({self.parent_commit})"
            if self.previous_version
            else (f"current main ({self.parent_commit})" if self.parent_commit else "an empty repo")
        )
        lines.append(f"commit on top of {base}:")
        lines += [f"  upload {path} ({size} bytes)" for path, size in self.uploads]
        lines += [f"  delete {path}" for path in self.deletes]
        lines.append(f"tag the commit {self.version}")
        return lines


def release_shards(meta: dict) -> dict[str, str]:
    """{path in repo: sha256} of every shard `_release.json` lists, names checked by the name rules."""
    shards = {}
    try:
        for config, entry in meta["configs"].items():
            check_config_name(config)
            for split, listed in entry["splits"].items():
                for shard in listed:
                    shards[f"data/{config}/{check_shard_filename(shard['filename'], split)}"] = shard["sha256"]
    except (UnsafeNameError, KeyError, TypeError, AttributeError) as exc:
        raise PublishError(
            f"{RELEASE_META} cannot be trusted ({exc}); rebuild the release with `hsi release`"
        ) from None
    return shards


def release_files(release_dir: Path, meta: dict) -> list[tuple[str, int]]:
    """(path in repo, bytes) of the release's files, sorted: exactly what `hsi release` writes for the
    configs of `_release.json`. A link, or a file that is not part of that layout (something planted
    in the folder), is refused rather than published."""
    release_dir = Path(release_dir)
    shards = release_shards(meta)
    # what `hsi release` did not write there, by the same layout its --overwrite check uses
    foreign = set(foreign_release_entries(release_dir))
    foreign_folders = tuple(entry for entry in foreign if entry.endswith("/"))
    files, strays = [], []
    for folder, dirs, names in os.walk(release_dir):  # os.walk never descends into linked folders
        for name in sorted(names) + [d for d in dirs if (Path(folder) / d).is_symlink()]:
            path = Path(folder) / name
            relative = path.relative_to(release_dir).as_posix()
            if path.is_symlink() or not path.is_file():
                raise PublishError(f"{path} is a link or not a regular file; a release holds only its own files")
            if relative in foreign or relative.startswith(foreign_folders):
                strays.append(relative)
            files.append((relative, path.stat().st_size))
    changed = sorted(path for path in strays if path in meta.get("files", {}))
    if changed:
        raise PublishError(
            f"{release_dir}: {', '.join(changed[:10])} changed since `hsi release` wrote them (their sha256 differs "
            f"from {RELEASE_META}); rebuild the release with `hsi release`"
        )
    if strays:
        raise PublishError(
            f"{release_dir} holds files that are not part of the release: {', '.join(sorted(strays)[:10])}; "
            "remove them or rebuild the folder with `hsi release`"
        )
    missing = sorted(set(shards) - {path for path, _ in files})
    if missing:
        raise PublishError(
            f"{release_dir} lacks shards its {RELEASE_META} lists: {', '.join(missing[:10])}; rebuild it"
        )
    return sorted(files)


def version_tags(refs) -> dict[str, str]:
    """{tag name: commit} of the repo's vX.Y.Z tags."""
    tags = {}
    for tag in refs.tags:
        try:
            parse_version(tag.name)
        except ReleaseError:
            continue
        tags[tag.name] = tag.target_commit
    return tags


@dataclass(frozen=True)
class CheckedRelease:
    """A release folder that passed every check before an upload: its `_release.json` and its files
    ((path in repo, bytes), sorted), hashed once."""

    meta: dict
    files: list[tuple[str, int]]


def check_release_folder(release_dir: Path, version: str) -> CheckedRelease:
    """The release's metadata and files, after checking the version, that the card loads as declared,
    that every file is the release's own and unchanged, and what the Hub's viewer and eval.yaml need."""
    meta = read_release_meta(release_dir)
    if meta is None:
        raise PublishError(f"{release_dir} is not a release folder (no {RELEASE_META}); build it with `hsi release`")
    try:
        parse_version(version)
    except ReleaseError as exc:
        raise PublishError(str(exc)) from None
    if meta.get("version") is None:
        raise PublishError(
            f"{release_dir} was built without a version (`hsi release` without --version), so it cannot be "
            f"published; rebuild it with `hsi release --version {version} --overwrite` so the card and changelog "
            "name the version"
        )
    if meta.get("version") != version:
        raise PublishError(
            f"{release_dir} was released as {meta.get('version')!r}, not {version}; rebuild it with "
            f"`hsi release --version {version}` so the card and changelog name the version"
        )
    readme = Path(release_dir) / "README.md"
    if not readme.is_file():
        raise PublishError(f"{release_dir} has no README.md card")
    try:
        check_card(readme.read_text("utf-8"))
    except CardError as exc:
        raise PublishError(f"the card is refused: {exc}") from None
    files = release_files(Path(release_dir), meta)  # a changed shard is named as changed before the viewer reads it
    viewer = release_folder_viewer_problems(Path(release_dir), meta)  # the checks `hsi verify` runs too
    if viewer:
        raise PublishError(
            f"{release_dir}: the Hub's dataset viewer would refuse or show only part of it:\n"
            + "\n".join(f"FAILED: {line}" for line in viewer)
        )
    benchmark = Path(release_dir) / EVAL_YAML
    if benchmark.exists() or benchmark.is_symlink():  # uploaded with the card: checked as verify checks it
        problems = eval_yaml_problems(benchmark, meta)
        if problems:
            raise PublishError(f"{release_dir}: {problems[0]}; rebuild the release with `hsi release`")
    return CheckedRelease(meta, files)


def check_repo_id(repo_id: str) -> str:
    """ORG/NAME as the Hub allows them; anything else (a path with `..`, a URL) is refused before
    a request is made."""
    if not isinstance(repo_id, str) or not REPO_ID.fullmatch(repo_id) or ".." in repo_id or "--" in repo_id:
        raise PublishError(
            f"repo id {repo_id!r} is not of the form ORG/NAME (letters, digits, '-', '_', '.'; no '..' "
            "or '--'), e.g. lab/hard-spurious-imagenet"
        )
    return repo_id


# What a request raises when the Hub cannot be reached at all (no network, refused, timed out), by
# class name: huggingface_hub, datasets and fsspec use different HTTP clients (httpx, its fork
# httpx2, requests, aiohttp), and the names are what they share.
UNREACHABLE = {
    "RequestError",
    "TransportError",
    "NetworkError",
    "ConnectError",
    "ConnectTimeout",
    "TimeoutException",
    "ConnectionError",
    "ClientConnectionError",
    "LocalEntryNotFoundError",
}


def _unreachable(exc: BaseException) -> bool:
    return isinstance(exc, (ConnectionError, TimeoutError)) or any(c.__name__ in UNREACHABLE for c in type(exc).__mro__)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return printable(text.splitlines()[0][:200]) if text else type(exc).__name__


@contextmanager
def hub_errors(api, action: str, repo_id: str, dry_run: bool = False) -> Iterator[None]:
    """Turn the Hub's HTTP errors, offline mode and an unreachable Hub into a PublishError that says
    what failed and what to do; the token never appears in it. `dry_run`: a publish plan, which can
    also be made offline."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    try:
        yield
    except OfflineModeIsEnabled:
        raise PublishError(
            f"{action} on {repo_id} needs the Hub, and HF_HUB_OFFLINE is set: unset it where the network "
            "reaches the Hub, or set HF_ENDPOINT to a mirror that serves the repo"
        ) from None
    except HfHubHTTPError as exc:
        status = getattr(exc.response, "status_code", None)
        detail = exc.server_message or str(exc).splitlines()[0]
        if status in (401, 403):
            hint = "check the token (HF_TOKEN or `hf auth login`) and that it may write to this repo"
        elif status is not None and status >= 500:
            hint = "the Hub failed; nothing is tagged until a run succeeds: run again later"
        else:
            hint = "see the message; nothing is tagged until a run succeeds"
        message = f"{action} on {repo_id} failed with HTTP {status}: {detail}; {hint}"
        token = getattr(api, "token", None)
        raise PublishError(message.replace(token, "<token>") if token else message) from None
    except Exception as exc:
        if not _unreachable(exc):
            raise
        raise _unreachable_error(api, action, repo_id, exc, constants.ENDPOINT, dry_run) from None


def _unreachable_error(
    api, action: str, repo_id: str, exc: BaseException, endpoint: str, dry_run: bool
) -> PublishError:
    message = (
        f"{action} on {repo_id}: the Hub at {getattr(api, 'endpoint', None) or endpoint} cannot be reached "
        f"({type(exc).__name__}: {_first_line(exc)}); check the network or proxy, and HF_ENDPOINT if you use a mirror"
        + ("; or make the dry run offline with HF_HUB_OFFLINE=1 (it then checks the release folder only)" * dry_run)
    )
    token = getattr(api, "token", None)
    return PublishError(message.replace(token, "<token>") if token else message)


def _same_files(api, repo_id: str, revision: str, release_dir: Path, files: list[tuple[str, int]]) -> bool:
    """True when the Hub's tree at `revision` is exactly the release's files (same paths, sizes and
    content hashes): a commit of this release whose tag was never created."""
    from huggingface_hub.hf_api import RepoFile

    remote = {
        e.path: e
        for e in api.list_repo_tree(repo_id, repo_type=REPO_TYPE, revision=revision, recursive=True)
        if isinstance(e, RepoFile) and e.path not in KEEP_REMOTE
    }
    if set(remote) != {path for path, _ in files}:
        return False
    for path, size in files:
        entry, local = remote[path], release_dir / path
        if entry.size != size:
            return False
        if entry.lfs is not None and entry.lfs.sha256 != sha256_file(local):
            return False
        if entry.lfs is None and entry.blob_id != git_blob_sha1(local):
            return False
    return True


def git_blob_sha1(path: Path) -> str:
    """The git object id of a file's bytes (what the Hub reports for a regular, non-LFS file)."""
    digest = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def plan_publish(api, release_dir: Path, repo_id: str, version: str) -> PublishPlan:
    """Read the Hub (never write) and decide every file operation of this release."""
    check_repo_id(repo_id)
    with hub_errors(api, "reading the repo", repo_id, dry_run=True):
        return _plan_publish(api, Path(release_dir), repo_id, version)


def _plan_publish(api, release_dir: Path, repo_id: str, version: str) -> PublishPlan:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import OfflineModeIsEnabled, RepositoryNotFoundError

    checked = check_release_folder(release_dir, version)  # hashes every file once
    meta, uploads = checked.meta, checked.files
    try:
        refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
    except RepositoryNotFoundError:
        return PublishPlan(repo_id, version, release_dir, False, None, None, uploads)
    except OfflineModeIsEnabled:
        return PublishPlan(repo_id, version, release_dir, False, None, None, uploads, offline=True)
    tags = version_tags(refs)
    if version in tags:
        raise PublishError(
            f"{repo_id} already has tag {version} (commit {tags[version]}); a published version is never moved or "
            "reused, release a new version"
        )
    main = next((b.target_commit for b in refs.branches if b.name == "main"), None)
    previous_version = max(tags, key=parse_version) if tags else None
    parent = main
    if previous_version:
        parent = tags[previous_version]
        if parse_version(version) <= parse_version(previous_version):
            raise PublishError(f"{version} is not newer than the latest release {previous_version}")
        previous_meta_path = hf_hub_download(
            repo_id, RELEASE_META, repo_type=REPO_TYPE, revision=parent, token=api.token
        )
        previous_meta = json.loads(Path(previous_meta_path).read_text("utf-8"))
        try:
            check_version_bump(previous_version, version, bool(describe_changes(previous_meta, meta["configs"])))
        except ReleaseError as exc:
            raise PublishError(str(exc)) from None
    if main is not None and (main != parent or previous_version is None):
        # An earlier run committed this very release and was stopped before its tag: only tag it.
        # (The release's _release.json names this version, so no other commit has this tree.)
        if _same_files(api, repo_id, main, release_dir, uploads):
            return PublishPlan(repo_id, version, release_dir, True, main, previous_version, tag_only=True)
        if main != parent:
            raise PublishError(
                f"main of {repo_id} ({main}) moved past the latest release {previous_version} ({parent}); refusing to "
                "publish over changes that are not a release"
            )
    remote = set(api.list_repo_files(repo_id, repo_type=REPO_TYPE, revision=parent)) if parent else set()
    deletes = sorted(remote - {path for path, _ in uploads} - KEEP_REMOTE)
    return PublishPlan(repo_id, version, release_dir, True, parent, previous_version, uploads, deletes)


def perform_publish(api, plan: PublishPlan, private: bool = False) -> str:
    """Create the repo if needed, commit the release on its parent and tag it. Returns the commit."""
    with hub_errors(api, "publishing", plan.repo_id):
        return _perform_publish(api, plan, private)


def _perform_publish(api, plan: PublishPlan, private: bool) -> str:
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete
    from huggingface_hub.errors import HfHubHTTPError

    if plan.offline:
        raise PublishError(
            f"cannot publish to {plan.repo_id} offline (HF_HUB_OFFLINE is set); unset it and run again, "
            "or publish into a local git mirror with --to-git"
        )

    if plan.tag_only:
        _create_tag(api, plan, plan.parent_commit)
        return plan.parent_commit
    if not plan.repo_exists:
        api.create_repo(plan.repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
    operations = [CommitOperationDelete(path) for path in plan.deletes] + [
        CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(plan.release_dir / path)) for path, _ in plan.uploads
    ]
    parent = plan.parent_commit
    if parent is None:  # a new repo: the Hub may have made an initial commit (.gitattributes)
        refs = api.list_repo_refs(plan.repo_id, repo_type=REPO_TYPE)
        parent = next((b.target_commit for b in refs.branches if b.name == "main"), None)
    try:
        info = api.create_commit(
            plan.repo_id,
            operations,
            repo_type=REPO_TYPE,
            parent_commit=parent,
            commit_message=f"Release {plan.version}",
            commit_description=f"hsi publish: {len(plan.uploads)} files, {len(plan.deletes)} deleted",
        )
    except HfHubHTTPError as exc:
        status = getattr(exc.response, "status_code", None)
        if status == 412:
            raise PublishError(
                f"{plan.repo_id} changed since the plan was made (parent {parent} is no longer the head); nothing was "
                "committed, run again"
            ) from None
        raise
    _create_tag(api, plan, info.oid)
    return info.oid


def _create_tag(api, plan: PublishPlan, commit: str) -> None:
    from huggingface_hub.errors import HfHubHTTPError

    try:
        api.create_tag(
            plan.repo_id,
            tag=plan.version,
            revision=commit,
            repo_type=REPO_TYPE,
            tag_message=f"Hard-Spurious-ImageNet {plan.version}",
        )
    except HfHubHTTPError as exc:
        if getattr(exc.response, "status_code", None) == 409:
            raise PublishError(
                f"tag {plan.version} appeared on {plan.repo_id} meanwhile; it is not moved. The commit {commit} is "
                "untagged"
            ) from None
        raise PublishError(
            f"commit {commit} of {plan.repo_id} holds the release but tagging it failed "
            f"(HTTP {getattr(exc.response, 'status_code', None)}: {exc.server_message or exc}); "
            "run the same publish again: it finds the commit and only tags it"
        ) from None
