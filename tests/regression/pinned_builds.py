"""Builds whose bytes are pinned: the demo, and extract + compose of a fake ImageNet tree with bad
inputs into the paper's, the AR, the -10 and a custom variant. Every shard's and manifest's sha256
(manifests with the tool's version removed) is returned by path, so a refactor that changes a byte
shows which file moved."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from builder.compose.spec import load_variant
from hsi.cli import main

VERSION_KEYS = {"version", "tool_version"}


def _without_versions(payload):
    if isinstance(payload, dict):
        return {k: _without_versions(v) for k, v in payload.items() if k not in VERSION_KEYS}
    if isinstance(payload, list):
        return [_without_versions(v) for v in payload]
    return payload


def digest_tree(root: Path) -> dict[str, str]:
    """sha256 of every shard and manifest below `root`, keyed by relative path."""
    digests = {}
    for path in sorted(root.rglob("*")):
        if path.suffix == ".tar":
            digests[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.name == "_info.json":
            canonical = json.dumps(_without_versions(json.loads(path.read_text("utf-8"))), sort_keys=True)
            digests[str(path.relative_to(root))] = hashlib.sha256(canonical.encode()).hexdigest()
    return digests


def build_everything(work: Path) -> dict[str, str]:
    from fake_imagenet import extract_args, write_tree
    from parts_factory import compose_args, fake_images, write_parts

    assert main(["demo", "--out", str(work / "demo"), "--no-progress"]) == 0
    write_tree(work / "imagenet", bad=True, count=12)
    assert main(extract_args(work / "imagenet", work / "fake", "--shard-size", "5")) == 0
    parts = str(work / "fake" / "parts")
    datasets = str(work / "fake" / "datasets")
    for extra in (
        ["--variant", "hard-spurious-imagenet", "--shard-size", "40"],
        ["--variant", "hard-spurious-imagenet-ar"],
        [
            "--variant",
            "hard-spurious-imagenet",
            "--name",
            "custom",
            "--positions",
            "bottom-left,random-corner,left,xy:0.25,0.75",
            "--backgrounds",
            "original,random,gray,noise",
            "--sizes",
            "40,72",
            "--paste",
            "mask",
            "--margin",
            "4",
            "--seed",
            "7",
        ],
    ):
        assert main(compose_args(parts, datasets, *extra, "--no-progress")) == 0
    pairs = dict(load_variant("hard-spurious-imagenet-10").subset.pairs)
    images = fake_images(sorted(pairs), per_class=6, image_size=(64, 48), box=(8, 8, 39, 31))
    write_parts(work / "ten" / "parts", {"val": images}, shard_size=16)
    assert (
        main(
            compose_args(
                work / "ten" / "parts",
                work / "ten" / "datasets",
                "--variant",
                "hard-spurious-imagenet-10",
                "--no-progress",
            )
        )
        == 0
    )
    return digest_tree(work)
