"""The parts as a config of the release (issue 31): `hsi release --parts` ships them, `hsi compose --parts
RELEASE` (a folder or hf://datasets/ORG/NAME@REVISION through the loopback Hub) composes from them the
bytes the local parts folder gives, `load_dataset(RELEASE, "parts")` loads one row per part, `hsi
verify` checks them, and a tampered parts shard is refused by name."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hub_server import LoopbackHub, hub_env
from release_factory import make_composed_dataset, release_with_parts, shard_bytes
from subprocesses import hsi_command, run_hsi

from hsi.cli import main

REPO = "lab/hard-spurious-imagenet"
NEW_POSITIONS = ["--positions", "bottom-left", "--sizes", "40", "--no-progress"]


@pytest.fixture
def built(tmp_path):
    return release_with_parts(tmp_path / "build")


def compose(parts: str, out: Path) -> int:
    return main(["compose", "--parts", parts, "--out", str(out), *NEW_POSITIONS])


def test_compose_from_the_release_gives_the_local_parts_bytes(built, tmp_path):
    assert compose(str(built["parts"]), tmp_path / "local") == 0
    assert compose(str(built["release"]), tmp_path / "released") == 0
    local, released = shard_bytes(tmp_path / "local"), shard_bytes(tmp_path / "released")
    assert local and local == released
    (config,) = {name.split("/")[0] for name in local}
    for name in ("_info.json", "spec.yaml"):  # the manifest and spec too: the same parts, the same record
        assert (tmp_path / "local" / config / name).read_bytes() == (tmp_path / "released" / config / name).read_bytes()
    manifest = json.loads((tmp_path / "released" / config / "_info.json").read_text())
    assert manifest["spec"]["positions"] == ["bottom-left"] and manifest["spec"]["sizes"] == [40]


def test_the_release_holds_the_parts_byte_for_byte_and_loads_one_row_per_part(built, tmp_path, monkeypatch):
    from datasets import load_dataset

    release = built["release"]
    parts_manifest = json.loads((built["parts"] / "_info.json").read_text())
    for shard in parts_manifest["splits"]["val"]["shards"]:
        copied = release / "data" / "parts" / shard["filename"]
        assert not copied.is_symlink() and copied.read_bytes() == (built["parts"] / shard["filename"]).read_bytes()
    record = json.loads((release / "_release.json").read_text())
    assert set(record["configs"]) == {"hard-spurious-imagenet", "parts"} and record["default_config"] != "parts"
    monkeypatch.chdir(release.parent)
    rows = load_dataset(release.name, "parts", split="val", cache_dir=str(tmp_path / "cache"))
    assert rows.num_rows == parts_manifest["splits"]["val"]["num_samples"] == 4
    assert sorted(rows["__key__"]) == sorted(row["source_id"] for row in rows["json"])
    row = rows[0]
    assert row["json"]["fill_scores"] is not None and row["json"]["boxes"] and row["cls"] == row["json"]["class_index"]
    assert row["crop.png"].size == (60, 60) and len(row["canvas.npy"]) == 224
    assert row["json"]["provenance"]["backends"]["masker"]["name"] == "box"
    # the default config is still the composites
    assert load_dataset(release.name, split="val", cache_dir=str(tmp_path / "cache")).num_rows == 48


def test_the_card_describes_the_parts(built):
    card = (built["release"] / "README.md").read_text()
    section = card[card.index("\n## parts\n") : card.index("\n## Usage\n")]
    parts_manifest = json.loads((built["parts"] / "_info.json").read_text())
    total = sum(s["bytes"] for s in parts_manifest["splits"]["val"]["shards"])
    assert f"**{total / 4 * 1000 / 1e6:.1f} MB per 1,000 parts**" in section
    assert "hsi compose --parts hf://datasets/ORG/hard-spurious-imagenet@REVISION" in section
    assert "neither ImageNet nor a GPU" in section and "ImageNet's terms of access" in section
    assert "| score | median | p10 |" in section and "under the poor-fill threshold 0.5" in section
    for member in ("crop.png", "mask.png", "erase.png", "fill.png", "background.png", "canvas.npy"):
        assert f"`{member}`" in section
    assert "| parts |  | val | 4 |" in card  # listed with the configs
    assert 'parts = load_dataset("hard-spurious-imagenet", "parts", split="val")' in card


def test_verify_checks_the_parts_and_names_a_tampered_shard(built, tmp_path, capsys):
    release = built["release"]
    assert main(["verify", str(release)]) == 0
    assert "parts/val: 2 shards hashed, 4 samples streamed" in capsys.readouterr().out
    shard = release / "data" / "parts" / "val-00001.tar"
    data = bytearray(shard.read_bytes())
    data[700] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert main(["verify", str(release)]) == 1
    assert "parts/val-00001.tar: sha256 or size differs from the manifest" in capsys.readouterr().out
    assert compose(str(release), tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "val-00001.tar" in err and "does not match the parts manifest" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*/*.tar"))


def test_a_release_without_parts_says_how_to_rebuild_it(tmp_path, capsys):
    dataset = make_composed_dataset(tmp_path / "ds")
    release = tmp_path / "hard-spurious-imagenet"
    assert main(["release", "--out", str(release), str(dataset)]) == 0
    capsys.readouterr()
    assert compose(str(release), tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert "has no parts config" in err and "hsi release --parts" in err and len(err.splitlines()) == 1


def test_compose_from_a_published_release_through_the_hub(built, tmp_path):
    with LoopbackHub() as hub:
        home = tmp_path / "hf-home"
        env = hub_env(hub.endpoint, home)
        published = run_hsi(["publish", str(built["release"]), "--repo", REPO, "--version", "v1.0.0", "--yes"], env)
        assert published.returncode == 0, published.stderr
        files = hub.state.repos[REPO].commits[hub.state.repos[REPO].tags["v1.0.0"]].files
        assert {"data/parts/_info.json", "data/parts/val-00000.tar", "data/parts/val-00001.tar"} <= set(files)
        verified = run_hsi(["verify", REPO, "--version", "v1.0.0"], env)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert "parts/val: 2 shards hashed, 4 samples streamed" in verified.stdout

        address = f"hf://datasets/{REPO}@v1.0.0"
        hub_out = tmp_path / "from-hub"
        run = run_hsi(["compose", "--parts", address, "--out", str(hub_out), *NEW_POSITIONS], env)
        assert run.returncode == 0, run.stderr
        assert compose(str(built["parts"]), tmp_path / "local") == 0
        assert shard_bytes(hub_out) == shard_bytes(tmp_path / "local") != {}
        cached = home / "hsi" / "parts" / "lab--hard-spurious-imagenet"
        assert sorted(p.name for p in cached.glob("*/data/parts/*")) == ["_info.json", "val-00000.tar", "val-00001.tar"]
        assert not [p for p in cached.rglob("*") if p.is_symlink()]
        assert not (tmp_path / "data").exists()  # nothing downloaded beside the output

        # the shard damaged on the Hub and in the cache: downloaded again, then refused by name
        commit = hub.state.repos[REPO].tags["v1.0.0"]
        hub.state.repos[REPO].commits[commit].files["data/parts/val-00000.tar"] = b"\0" * 10240
        (shard,) = cached.glob("*/data/parts/val-00000.tar")
        shard.write_bytes(b"\1" * 10240)
        bad = run_hsi(["compose", "--parts", address, "--out", str(tmp_path / "bad"), *NEW_POSITIONS], env)
        assert bad.returncode == 2 and "val-00000.tar" in bad.stderr and "does not match" in bad.stderr

    # offline, the tag resolves to the commit of the last download; the restored cache is read
    shard.write_bytes((built["parts"] / "val-00000.tar").read_bytes())
    offline = dict(env, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    again = run_hsi(["compose", "--parts", address, "--out", str(tmp_path / "offline"), *NEW_POSITIONS], offline)
    assert again.returncode == 0, again.stderr
    assert shard_bytes(tmp_path / "offline") == shard_bytes(tmp_path / "local")
    unknown = run_hsi(["compose", "--parts", f"hf://datasets/{REPO}@v9.9.9", "--out", str(tmp_path / "x")], offline)
    assert unknown.returncode == 2 and "HF_HUB_OFFLINE is set" in unknown.stderr


def test_a_published_release_without_parts_is_one_line(tmp_path):
    dataset = make_composed_dataset(tmp_path / "ds")
    release = tmp_path / "hard-spurious-imagenet"
    assert main(["release", "--out", str(release), str(dataset), "--version", "v1.0.0"]) == 0
    with LoopbackHub() as hub:
        env = hub_env(hub.endpoint, tmp_path / "h")
        assert run_hsi(["publish", str(release), "--repo", REPO, "--version", "v1.0.0", "--yes"], env).returncode == 0
        run = run_hsi(["compose", "--parts", f"hf://datasets/{REPO}@v1.0.0", "--out", str(tmp_path / "o")], env)
    assert run.returncode == 2 and "has no parts config" in run.stderr and "hsi release --parts" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("address", ["hf://datasets/lab", "hf://models/a/b@v1", "hf://datasets/a/b@../x"])
def test_a_malformed_address_is_refused_before_any_request(address, tmp_path):
    env = dict(os.environ, HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path))
    run = subprocess.run(
        hsi_command("compose", "--parts", address, "--out", tmp_path / "o"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "hf://datasets/ORG/NAME@REVISION" in run.stderr
