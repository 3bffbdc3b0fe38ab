"""A parts folder on an object store (`hsi compose --parts s3://BUCKET/PATH/parts`), copied into its
local staging folder and proved as a local one is: the manifest's shard names pass the name rules
before any becomes a path, only the shards it lists are fetched, and each must have the manifest's
size and sha256 (compose's own checks, builder.compose.parts_input). A release folder on a store
(`_release.json`) is read through its parts config, `data/parts`."""

from __future__ import annotations

import os
from pathlib import Path

from builder.compose.parts_input import read_parts_manifest_checked, verify_parts_shards
from builder.core.errors import InputError
from builder.core.manifest import MANIFEST_NAME, Manifest
from builder.core.object_store import StoreFolder, staging_folder

RELEASE_META = "_release.json"  # cards.release's name; a release folder's parts live in data/parts


def fetch_store_parts(url: str) -> Path:
    """The local copy of the parts folder at `url`, every shard proved against its manifest."""
    store = StoreFolder(url.rstrip("/"))
    if store.read_bytes(RELEASE_META) is not None:
        store = store.child("data", "parts")
    manifest = store.read_bytes(MANIFEST_NAME)
    if manifest is None:
        raise InputError(
            f"--parts {url}: no {MANIFEST_NAME} there; name the parts folder `hsi extract --out` wrote "
            "(OUT/parts) or a release folder, and check the store's credentials"
        )
    local = staging_folder(store.url)
    local.mkdir(parents=True, exist_ok=True)
    tmp = local / f".{MANIFEST_NAME}.{os.getpid()}.tmp"
    tmp.write_bytes(manifest)
    os.replace(tmp, local / MANIFEST_NAME)
    splits = sorted(Manifest.read(local).splits)
    checked = read_parts_manifest_checked(local, splits)  # names checked before any is fetched

    def fetch(force: bool) -> None:
        for split in splits:
            for stats in checked.splits[split].shards:
                target = local / stats.filename
                if force or not (target.is_file() and not target.is_symlink() and target.stat().st_size == stats.bytes):
                    try:
                        store.download(stats.filename, target)
                    except FileNotFoundError:
                        raise InputError(
                            f"--parts {url}: its manifest lists {stats.filename}, which the store does not hold; "
                            "upload the whole parts folder again"
                        ) from None

    fetch(force=False)
    try:
        verify_parts_shards(local, checked, splits)
    except InputError:  # a stale staged copy: fetch every shard once more, then refuse
        fetch(force=True)
        verify_parts_shards(local, checked, splits)
    return local
