"""Small composed datasets written to the compose contract (shards + `_info.json` + a validation
report), for the card, release, loader and publishing tests."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from builder.compose.stage import compose_settings
from builder.core.classes import imagenet_classes
from builder.core.config import fingerprint
from builder.core.hashing import sha256_file
from builder.core.manifest import ERRORS_NAME, ErrorCounts, Manifest, SplitEntry, write_json_atomic, write_jsonl_atomic
from builder.core.shard_write import write_shard
from builder.core.shards import shard_filename
from builder.core.taxonomy import PAPER_GROUPS, tier_of
from builder.formats.composites import (
    SCHEMA_VERSION,
    composite_members,
    count_composites,
    fields_of_version,
)

SIZES = (56, 84, 112)


def composite_json(
    config: str,
    split: str,
    index: int,
    label: int,
    class_index: int,
    seed: int,
    group_index: int | None = None,
    schema_version: int = SCHEMA_VERSION,
) -> dict:
    """A sample's json as compose writes it; with an older `schema_version`, as that schema had it
    (a release composed before a field existed)."""
    cls = imagenet_classes()[class_index]
    group, size = PAPER_GROUPS[index % 4 if group_index is None else group_index], SIZES[index % 3]
    corner = group.startswith("Co")
    meta = {
        "wnid": cls.wnid,
        "class_index": cls.index,
        "class_name": cls.name,
        "label": label,
        "source_id": f"{cls.wnid}_{index}",
        "variant": config,
        "split": split,
        "canvas": 224,
        "size": size,
        "effective_size": size,
        "mode": "square",
        "paste": "box",
        "requested_position": "top-right" if corner else "center",
        "position": "top-right" if corner else "center",
        "box_x": 224 - size if corner else 112 - size // 2,
        "box_y": 0 if corner else 112 - size // 2,
        "box_w": size,
        "box_h": size,
        "background": "random" if group.endswith("R") else "original",
        "background_source_id": f"bg_{index}",
        "background_wnid": cls.wnid,
        "background_class_index": cls.index,
        "background_fill_score": round(0.25 + 0.07 * (index % 10), 4),
        "background_status": "none" if index % 5 == 4 else "own",
        "paired_wnid": None,
        "group": group,
        "tier": tier_of(group, size, 224),
        "seed": seed,
        "schema_version": schema_version,
    }
    fields = fields_of_version(schema_version)
    meta = {name: value for name, value in meta.items() if name in fields}
    assert list(meta) == list(fields)
    return meta


def jpeg(seed_value: int, side: int = 32) -> bytes:
    pixels = np.random.default_rng(seed_value).integers(0, 255, (side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


PARTS_FINGERPRINT = "parts0000000000"


def factory_spec(config: str, seed: int) -> dict:
    return {"name": config, "seed": seed, "sizes": list(SIZES)}


def composed_fingerprint(
    config: str = "hard-spurious-imagenet", seed: int = 0, schema_version: int = SCHEMA_VERSION
) -> str:
    """The fingerprint make_composed_dataset's manifest records: that of its settings, as compose
    computes it (so `hsi verify` recomputes the same)."""
    return fingerprint(compose_settings(factory_spec(config, seed), PARTS_FINGERPRINT, schema_version))


def make_composed_dataset(
    out: Path,
    config: str = "hard-spurious-imagenet",
    splits: dict[str, int] | None = None,
    shard_size: int = 4,
    num_classes: int = 3,
    seed: int = 0,
    validation: dict | None = None,
    previews: int = 1,
    groups_in_order: bool = False,
    schema_version: int = SCHEMA_VERSION,
) -> Path:
    """Write OUT/<config>/ with shards, `_info.json` (written last) and `validation.json`. The
    samples cycle through the groups, or with `groups_in_order` come a quarter of each split per
    group, group after group (so the first shards hold only the first group). An older composite
    `schema_version` writes what compose wrote then (for the readers of older releases)."""
    splits = splits or {"test": 8}
    dataset = Path(out) / config
    classes = [c.index * 7 % 1000 for c in imagenet_classes()[:num_classes]]
    manifest_splits = {}
    for split, count in sorted(splits.items()):
        stats, metas = [], []
        for shard_start in range(0, count, shard_size):
            samples = []
            for i in range(shard_start, min(count, shard_start + shard_size)):
                label = i % num_classes
                group_index = i * 4 // count if groups_in_order else None
                meta = composite_json(config, split, i, label, classes[label], seed, group_index, schema_version)
                metas.append(meta)
                picture = jpeg(seed * 100_003 + i + 7919 * len(split))
                samples.append((f"{split}_{i:06d}", composite_members(picture, label, meta)))
            stats.append(write_shard(dataset / shard_filename(split, shard_start // shard_size), samples))
        manifest_splits[split] = SplitEntry(split, stats, counts=count_composites(metas))
    preview_dir = dataset / "previews"
    for p in range(previews):
        preview_dir.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 16), (p * 60, 100, 0)).save(preview_dir / f"sheet-{p}.png")
    write_jsonl_atomic(dataset / ERRORS_NAME, [])
    fingerprint = composed_fingerprint(config, seed, schema_version)
    manifest = Manifest(
        stage="compose",
        config=config,
        tool={"name": "hard-spurious-imagenet", "version": "0.1.0"},
        fingerprint=fingerprint,
        spec=factory_spec(config, seed),
        parts={
            "fingerprint": PARTS_FINGERPRINT,
            "backends": {"masker": {"name": "box"}, "inpainter": {"name": "telea"}},
        },
        schema_version=schema_version,
        splits=manifest_splits,
        errors=ErrorCounts(),
        class_names=[imagenet_classes()[c].name for c in classes],
    )
    manifest.write(dataset)
    report = {
        "ok": True,
        "fingerprint": fingerprint,
        "integrity": {"ok": True, "samples": sum(splits.values())},
        "shards": manifest.shard_sha256(),
        "previews": [f"previews/sheet-{p}.png" for p in range(previews)],  # as validation lists its own
    }
    write_json_atomic(dataset / "validation.json", report if validation is None else validation)
    (dataset / "validation.md").write_text("# Validation\n\nall checks passed\n", "utf-8")
    return dataset


def two_releases(root: Path) -> tuple[Path, Path]:
    """v1.0.0 (5 samples, 3 shards) and v1.1.0 (6 samples, 2 shards, another seed) of one release."""
    from cards.release import build_release

    v1 = build_release(
        root / "v1" / "hard-spurious-imagenet",
        [make_composed_dataset(root / "a", splits={"test": 5}, shard_size=2)],
        version="v1.0.0",
    )
    v2 = build_release(
        root / "v2" / "hard-spurious-imagenet",
        [make_composed_dataset(root / "b", splits={"test": 6}, shard_size=4, seed=1)],
        version="v1.1.0",
        previous_release=v1,
        changes=["new seed"],
    )
    return v1, v2


PARTS_WNIDS = ("n01443537", "n02437312")  # goldfish, Arabian camel


def release_with_parts(root: Path, version: str | None = "v1.0.0", name: str = "hard-spurious-imagenet") -> dict:
    """A demo-like release built with `--parts`: fake parts (2 classes x 2 images, 2 shards, settings per
    split as extract records them) composed to the paper's variant, validated and released. Returns
    {"parts": the parts folder, "dataset": the composed folder, "release": the release folder}."""
    from parts_factory import compose_quietly, fake_images, write_parts

    from hsi.cli import main

    parts = Path(root) / "parts"
    write_parts(parts, {"val": fake_images(PARTS_WNIDS, per_class=2)}, shard_size=3, per_split_settings=True)
    dataset = compose_quietly(parts, "hard-spurious-imagenet", Path(root) / "composed").dataset_dir
    assert main(["validate", str(dataset), "--no-previews"]) == 0
    release = Path(root) / "release" / name
    flags = ["--version", version] if version else []
    assert main(["release", "--out", str(release), str(dataset), "--parts", str(parts), *flags]) == 0
    return {"parts": parts, "dataset": dataset, "release": release}


def shard_bytes(dataset_root: Path) -> dict[str, bytes]:
    """{config/shard: bytes} of every composed shard under a compose --out folder."""
    return {p.relative_to(dataset_root).as_posix(): p.read_bytes() for p in sorted(Path(dataset_root).glob("*/*.tar"))}


def tar_members(path: Path) -> list[tuple[str, bytes]]:
    """[(name, bytes)] of a shard's members, in order."""
    with tarfile.open(path) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    """A plain tar of `members`, any names (the shard writer refuses a dotted key; this does not)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())


def reseal(folder: Path, shard: str, config: str = "hard-spurious-imagenet", split: str = "test") -> None:
    """Record a rewritten shard's bytes and sha256 in its manifest and `_release.json`, as if
    `hsi release` had written it: only the viewer checks can then tell it from a good one."""
    local = folder / "data" / config / shard
    digest, size = sha256_file(local), local.stat().st_size
    info_path, meta_path = folder / "data" / config / "_info.json", folder / "_release.json"
    info = json.loads(info_path.read_text())
    for entry in info["splits"][split]["shards"]:
        if entry["filename"] == shard:
            entry.update(bytes=size, sha256=digest)
    info_path.write_text(json.dumps(info, sort_keys=True, indent=2))
    meta = json.loads(meta_path.read_text())
    for entry in meta["configs"][config]["splits"][split]:
        if entry["filename"] == shard:
            entry.update(bytes=size, sha256=digest)
    meta["files"][f"data/{config}/{shard}"] = digest
    meta["files"][f"data/{config}/_info.json"] = sha256_file(info_path)
    croissant_path = folder / "croissant.json"
    if croissant_path.is_file():  # it records every shard's sha256 and size too: as `hsi release` would
        from cards.croissant import render_croissant

        croissant = json.loads(croissant_path.read_text())
        for entry in croissant["distribution"]:
            if entry.get("@id") == f"data/{config}/{shard}":
                entry.update(sha256=digest, contentSize=f"{size} B")
        croissant_path.write_text(render_croissant(croissant), "utf-8")
        meta["files"]["croissant.json"] = sha256_file(croissant_path)
    meta_path.write_text(json.dumps(meta, sort_keys=True, indent=2))


def rewrite_release_shard(
    folder: Path, shard: str, change, config: str = "hard-spurious-imagenet", split: str = "test"
) -> None:
    """Rewrite a release folder's shard with `change(members)` ([(name, bytes)] in, out) and reseal it."""
    path = folder / "data" / config / shard
    write_tar(path, change(tar_members(path)))
    reseal(folder, shard, config, split)
