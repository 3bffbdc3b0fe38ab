"""Release folders: layout, refusals, loading with `datasets` by relative name, and `stream(...)`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from manifest_io import read_manifest
from release_factory import make_composed_dataset

from builder.core.shard_read import iter_shard
from builder.core.stage import RunOptions
from cards.release import ReleaseError, build_release, check_version_bump
from hsi.cli import main as hsi

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = tmp_path_factory.mktemp("rel")
    main = make_composed_dataset(root / "ds", splits={"test": 10, "train": 5}, shard_size=3)
    ten = make_composed_dataset(root / "ds", config="hard-spurious-imagenet-10", splits={"test": 4}, num_classes=2)
    return build_release(root / "out" / "hard-spurious-imagenet", [ten, main], version="v1.0.0"), main, ten


def fresh_load(*args, cache, **kwargs):
    from datasets import load_dataset

    return load_dataset(*args, cache_dir=str(cache), **kwargs)


def test_release_layout_copies_shards_byte_identical(release):
    folder, main, ten = release
    meta = json.loads((folder / "_release.json").read_text())
    assert meta["default_config"] == "hard-spurious-imagenet" and meta["version"] == "v1.0.0"
    for dataset in (main, ten):
        manifest = read_manifest(dataset)
        info = json.loads((folder / "data" / manifest["config"] / "_info.json").read_text())
        for split, entry in manifest["splits"].items():
            assert info["splits"][split]["filenames"] == entry["filenames"]  # timm's reader fields
            assert info["splits"][split]["shard_lengths"] == [s["num_samples"] for s in entry["shards"]]
            assert info["splits"][split]["num_samples"] == entry["num_samples"]
            for name in entry["filenames"]:
                assert (folder / "data" / manifest["config"] / name).read_bytes() == (dataset / name).read_bytes()
    assert (folder / "previews" / "hard-spurious-imagenet" / "sheet-0.png").is_file()
    assert json.loads((folder / "data" / "hard-spurious-imagenet" / "validation.json").read_text())["ok"] is True
    assert "![sheet-0.png](previews/hard-spurious-imagenet/sheet-0.png)" in (folder / "README.md").read_text()


def test_refuses_missing_failed_or_stale_validation(tmp_path):
    failed = make_composed_dataset(tmp_path / "a", validation={"ok": False})
    with pytest.raises(ReleaseError, match="validation failed"):
        build_release(tmp_path / "r1", [failed])
    stale = make_composed_dataset(tmp_path / "b", validation={"ok": True, "fingerprint": "other"})
    with pytest.raises(ReleaseError, match="validate it again"):
        build_release(tmp_path / "r2", [stale])
    missing = make_composed_dataset(tmp_path / "c")
    (missing / "validation.json").unlink()
    with pytest.raises(ReleaseError, match="no validation.json"):
        build_release(tmp_path / "r3", [missing])
    with pytest.raises(ReleaseError, match="given twice"):
        build_release(tmp_path / "r4", [make_composed_dataset(tmp_path / "d")] * 2)
    assert not any(p.name.startswith("r") for p in tmp_path.iterdir())


def test_cli_release_refuses_overwrite_and_checks_versions(tmp_path, capsys):
    data = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    out = tmp_path / "hard-spurious-imagenet"
    assert hsi(["release", "--out", str(out), "--version", "v1.0.0", str(data)]) == 0
    assert hsi(["release", "--out", str(out), str(data)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    changed = make_composed_dataset(tmp_path / "ds2", splits={"test": 4})
    assert hsi(["release", "--out", str(out), "--overwrite", "--version", "v1.0.1", str(changed)]) == 2
    assert "must raise the minor or major version" in capsys.readouterr().err
    assert (
        hsi(
            [
                "release",
                "--out",
                str(out),
                "--overwrite",
                "--version",
                "v1.1.0",
                "--change",
                "one more sample",
                str(changed),
            ]
        )
        == 0
    )
    card = (out / "README.md").read_text()
    assert (
        "- **v1.1.0**\n  - one more sample\n  - hard-spurious-imagenet/test: samples changed (3 -> 4 samples)\n- "
        "**v1.0.0**" in card
    )
    check_version_bump("v1.1.0", "v1.1.1", data_changed=False)
    with pytest.raises(ReleaseError):
        check_version_bump("v1.1.0", "v2", data_changed=True)


def test_load_dataset_by_relative_name_per_config_and_streaming(release, tmp_path, monkeypatch):
    folder = release[0]
    monkeypatch.chdir(folder.parent)
    ds = fresh_load("hard-spurious-imagenet", cache=tmp_path / "c1")
    assert sorted(ds) == ["test", "train"] and ds["test"].num_rows == 10 and ds["train"].num_rows == 5
    assert ds["test"].features["cls"].names == ["tench", "cock", "indigo bunting"]
    first = ds["test"][0]
    assert first["__key__"] == "test_000000" and first["json"]["group"] == "CeO" and first["jpg"].size == (32, 32)
    ten = fresh_load("hard-spurious-imagenet", "hard-spurious-imagenet-10", split="test", cache=tmp_path / "c2")
    assert ten.num_rows == 4 and ten.features["cls"].names == ["tench", "cock"]
    assert [s["json"]["size"] for s in ten] == [56, 84, 112, 56]
    streamed = fresh_load("hard-spurious-imagenet", split="train", streaming=True, cache=tmp_path / "c3")
    assert streamed.features["cls"].names == ["tench", "cock", "indigo bunting"]  # declared, not inferred
    assert [s["__key__"] for s in streamed] == [f"train_{i:06d}" for i in range(5)]


def test_fresh_offline_session_loads_the_release(release, tmp_path):
    folder = release[0]
    code = (
        "from datasets import load_dataset\n"
        f"ds = load_dataset('hard-spurious-imagenet', split='test', cache_dir={str(tmp_path / 'c')!r})\n"
        "print(ds.num_rows, ds[3]['json']['group'], ds.features['cls'].names[1])"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "home"))
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=folder.parent, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-3:] == ["10", "CoR", "cock"]


def test_stream_with_two_workers_yields_each_sample_once(release):
    import torch

    from builder.formats.stream import stream

    folder, main, _ = release
    expected = sorted(key for path in sorted(main.glob("test-*.tar")) for key, _ in iter_shard(path))
    data = stream(folder, split="test", shuffle_buffer=4, seed=3)
    assert len(data) == 10
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2)
    keys = [s["key"] for s in loader]
    assert sorted(keys) == expected and len(keys) == 10
    assert keys != expected  # the buffer shuffled
    again = [s["key"] for s in torch.utils.data.DataLoader(data, batch_size=None, num_workers=2)]
    assert again == keys  # same seed and epoch: same order
    # two nodes x two workers over one-shard config: split by sample, still each exactly once
    seen = []
    for rank in range(2):
        node = stream(folder, "hard-spurious-imagenet-10", "test", rank=rank, world_size=2, keep_json=True)
        seen += [
            (s["key"], s["group"], s["json"]["size"])
            for s in torch.utils.data.DataLoader(node, batch_size=None, num_workers=2)
        ]
    assert sorted(k for k, _, _ in seen) == [f"test_{i:06d}" for i in range(4)]
    assert dict((k, g) for k, g, _ in seen)["test_000003"] == "CoR"


def test_stream_transform_and_batches(release):
    import torch

    from builder.formats.stream import stream

    data = stream(release[0], split="train", transform=lambda im: torch.from_numpy(np.array(im)))
    batch = next(iter(torch.utils.data.DataLoader(data, batch_size=5)))
    assert batch["image"].shape == (5, 32, 32, 3) and batch["label"].tolist() == [0, 1, 2, 0, 1]
    assert batch["group"] == ["CeO", "CoO", "CeR", "CoR", "CeO"]


def test_end_to_end_compose_validate_release_load(tmp_path, monkeypatch):
    from parts_factory import fake_images, write_parts

    from builder.compose import stage as compose
    from validation import report

    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(["n01440764", "n01443537"], per_class=2)})
    summary = compose.compose_dataset(
        parts, "hard-spurious-imagenet", tmp_path / "composed", options=RunOptions(progress=False)
    )
    dataset = summary.dataset_dir
    assert report.validate_dataset(dataset, parts_dir=parts).ok
    folder = build_release(tmp_path / "rel" / "hard-spurious-imagenet", [dataset])
    monkeypatch.chdir(folder.parent)
    manifest = read_manifest(dataset)
    split = sorted(manifest["splits"])[0]
    ds = fresh_load("hard-spurious-imagenet", split=split, cache=tmp_path / "cache")
    assert ds.num_rows == manifest["splits"][split]["num_samples"] > 0
    assert set(ds[0]["json"]) == set(ds.features["json"]) and ds[0]["json"]["variant"] == "hard-spurious-imagenet"


def test_overwrite_only_replaces_a_release_folder(tmp_path):
    dataset = make_composed_dataset(tmp_path / "datasets", splits={"test": 2})
    precious = tmp_path / "hard-spurious-imagenet"
    precious.mkdir()
    (precious / "paper.pdf").write_text("keep me")
    with pytest.raises(ReleaseError, match="not a release folder"):
        build_release(precious, [dataset], overwrite=True)
    assert (precious / "paper.pdf").read_text() == "keep me"


def test_timm_reads_a_release_config_through_its_webdataset_reader(release):
    from timm.data import create_dataset

    folder, main, _ = release
    expected = [
        int(members["cls"])
        for path in sorted((folder / "data" / "hard-spurious-imagenet").glob("train-*.tar"))
        for _, members in iter_shard(path)
    ]
    dataset = create_dataset(
        "wds/hard-spurious-imagenet",
        root=str(folder / "data" / "hard-spurious-imagenet"),
        split="train",
        is_training=False,
        batch_size=1,
    )
    assert len(dataset) == read_manifest(main)["splits"]["train"]["num_samples"] == 5
    seen = [(image.size, int(target)) for image, target in dataset]
    assert [target for _, target in seen] == expected
