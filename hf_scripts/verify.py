"""`hsi verify ORG/NAME --version vX.Y.Z`: read a published version back and check it.

The tag is resolved to its commit; every shard listed in each config's `_info.json` at that commit
is downloaded and its sha256 and size compared with the manifest and with `_release.json`; then each
config and split is streamed with `load_dataset(..., revision=...)` and the samples counted and their
`json` checked against the schema and the manifest's counts and class names. Before that, everything
else the release records is compared (hf_scripts.release_checks): the card reads exactly the
manifest's shards, every recorded file has its recorded sha256 and the revision holds no other,
each manifest's fingerprint is that of its settings. A config whose card entry reads other files is
not streamed. Problems are collected as lines; none means the version is intact.
"""

from __future__ import annotations

from pathlib import Path

from builder.core.hashing import sha256_file
from builder.core.manifest import Manifest, ManifestError
from builder.core.untrusted import UntrustedInput, read_json
from cards.croissant import CROISSANT_NAME
from cards.hub_benchmark import EVAL_YAML
from cards.release import check_release_record
from cards.signature import SIGNATURE, SignerCheck
from hf_scripts.publish import REPO_TYPE, PublishError, check_repo_id, hub_errors, release_shards, version_tags
from hf_scripts.release_checks import (
    card_problems,
    card_text,
    config_read_back,
    fetched,
    fingerprint_problems,
    label_space_problems,
    record_problems,
    recorded_file_problems,
    release_document_problems,
    release_signature_problems,
)


def verify_release(
    api, repo_id: str, version: str, cache_dir: str | None = None, signer: SignerCheck | None = None
) -> tuple[list[str], list[str]]:
    """(report lines, problems) for the tagged version of `repo_id`; `signer`: the key or identity
    its signature must check against."""
    check_repo_id(repo_id)
    with hub_errors(api, "verifying", repo_id):
        return _verify_release(api, repo_id, version, cache_dir, signer or SignerCheck())


def read_downloaded_json(local: str | Path, label: str) -> object:
    """The JSON of a file hf_hub_download fetched, its errors naming `label` (the file in the repo at
    the version), not the cache's blob path. The cache's snapshot entry is a link of huggingface_hub's
    own into its blob store; the blob itself is read, through the untrusted-input layer."""
    blob = Path(local).resolve()
    try:
        return read_json(blob, Path(label).name)
    except UntrustedInput as exc:
        raise UntrustedInput(str(exc).replace(str(blob), label, 1)) from None


def _verify_release(
    api, repo_id: str, version: str, cache_dir: str | None, signer: SignerCheck
) -> tuple[list[str], list[str]]:
    from datasets import load_dataset
    from huggingface_hub import hf_hub_download

    tags = version_tags(api.list_repo_refs(repo_id, repo_type=REPO_TYPE))
    if version not in tags:
        raise PublishError(f"{repo_id} has no tag {version}; it has {sorted(tags) or 'none'}")
    commit = tags[version]

    def fetch(path, revision=commit):
        return hf_hub_download(
            repo_id, path, repo_type=REPO_TYPE, revision=revision, token=api.token, cache_dir=cache_dir
        )

    def fetch_json(path):
        return read_downloaded_json(fetch(path), f"{repo_id}@{version}/{path}")

    # config and shard names become download paths: the record's names pass the name rules
    label = f"{repo_id}@{version}/_release.json"
    release = check_release_record(fetch_json("_release.json"), label)
    lines, problems = [f"{repo_id} {version} -> commit {commit}"], []
    if release["version"] != version:
        problems.append(f"_release.json says version {release['version']!r}, the tag is {version}")
    manifests = {}
    for config, listed in sorted(release["configs"].items()):
        path = f"data/{config}/_info.json"
        try:
            manifests[config] = Manifest.from_json(fetch_json(path))
        except ManifestError as exc:
            raise ManifestError(f"{repo_id}@{version}/{path}: {exc}") from None
        problems += fingerprint_problems(config, manifests[config], listed["fingerprint"])
        problems += label_space_problems(config, manifests[config])
    # what the revision holds and the card reads, against what the release records (hf_scripts.release_checks)
    present = set(api.list_repo_files(repo_id, repo_type=REPO_TYPE, revision=commit))
    listed_shards = release_shards(release)
    problems += recorded_file_problems(release, present, lambda path: sha256_file(fetched(fetch, path)), listed_shards)
    card = card_text(fetch, present)
    card_lines, exact = card_problems(card, manifests)
    problems += card_lines
    croissant = (
        fetched(fetch, CROISSANT_NAME).read_text("utf-8", errors="replace") if CROISSANT_NAME in present else None
    )
    problems += release_document_problems(
        release, manifests, card, croissant, fetched(fetch, EVAL_YAML) if EVAL_YAML in present else None
    )
    # `previous` against the previous version's own record, read at its tag when the repo has it
    kept = (release.get("previous") or {}).get("version")
    before = None
    if kept in tags and kept != version:
        where = f"{repo_id}@{kept}/_release.json"
        before = (check_release_record(read_downloaded_json(fetch("_release.json", tags[kept]), where), where), where)
    found_lines, found = record_problems(release, card, before)
    lines += found_lines
    problems += found
    record_lines = len(lines)  # the signature's lines follow these, before each config's

    def stream(config: str, split: str):
        return load_dataset(repo_id, config, split=split, streaming=True, revision=commit, token=api.token)

    for config, listed in sorted(release["configs"].items()):
        manifest = manifests[config]
        for split in sorted(set(listed["splits"]) - set(manifest.splits)):
            problems.append(f"{config}/{split}: _release.json lists the split, _info.json does not")
        local_shards: dict[str, Path] = {}
        splits = []
        for split, entry in sorted(manifest.splits.items()):
            shards = [shard.to_json() for shard in entry.shards]
            if shards != listed["splits"].get(split):
                problems.append(f"{config}/{split}: _info.json and _release.json list different shards")
                continue  # only names _release.json lists (checked above) become download paths
            splits.append(split)
            for shard in entry.shards:
                local = fetched(fetch, f"data/{config}/{shard.filename}")
                local_shards[shard.filename] = local
                if local.stat().st_size != shard.bytes or sha256_file(local) != shard.sha256:
                    problems.append(f"{config}/{shard.filename}: sha256 or size differs from the manifest")
        found_lines, found = config_read_back(config, manifest, splits, local_shards, config in exact, stream)
        lines += found_lines
        problems += found
    # every file of the revision is downloaded by now: huggingface_hub's snapshot folder of the commit
    # holds them (its links into its blob store), which the signature is checked against
    snapshot = Path(fetch(SIGNATURE)).parent if SIGNATURE in present else Path(fetch("_release.json")).parent
    found_lines, found = release_signature_problems(release, card, snapshot, present, signer, cache_links=True)
    return lines[:record_lines] + found_lines + lines[record_lines:], problems + found
