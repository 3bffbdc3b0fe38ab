"""Telea's fills are pinned: the demo photos extracted with `--inpainter telea` give the background
and canvas bytes the code before #31 gave (#31 added fill.png and fill scores beside them and changed
PatchMatch's fill, never Telea's)."""

import hashlib
from pathlib import Path

from builder.core.shard_read import iter_shard
from hsi.cli import main

DEMO = Path(__file__).resolve().parents[2] / "builder" / "demo_data" / "imagenet"
PINNED = {
    "hsi_demo_camera/background.png": "0707893efa14d0f95d991e849eecc82a410cdbc3e0ba4d1b6df04f8171afb734",
    "hsi_demo_camera/canvas.npy": "01bce949e5aa3ced899fe2cbc5fb19ace76e4d237c6c13d12a47abaf556c5b0f",
    "hsi_demo_chelsea/background.png": "5922a174859dcccbf2598ee66a6e8752b00af49975cfa7f9dcea621567bdfeb0",
    "hsi_demo_chelsea/canvas.npy": "ddb962dc05fe951cd0b9fbc9e736373d89b5a4fd6637d6f8973afb5f16e3e724",
    "hsi_demo_coffee/background.png": "44298b38756cabd0f2479a110594d4a06009b607a17c0b6eb36840d5dabf287b",
    "hsi_demo_coffee/canvas.npy": "766a1ec18cec3191aac040a81f2895cce4a0bd5d30c2c88942bc9a5b8295bcf8",
    "hsi_demo_rocket/background.png": "ca973d48223d1f6e2aa6aeb40ae3728cb9ca30a0098dbc6f47db46acd7860475",
    "hsi_demo_rocket/canvas.npy": "cd6f096affcd258ff2698c40cffcce67fb07ef6a7e9859f6a963890b64870455",
}


def test_telea_backgrounds_keep_their_bytes(tmp_path):
    assert (
        main(["extract", "--no-progress", "--source", str(DEMO), "--out", str(tmp_path), "--inpainter", "telea"]) == 0
    )
    found = {}
    for shard in sorted((tmp_path / "parts").glob("*.tar")):
        for key, members in iter_shard(shard):
            assert members["fill.png"] == members["erase.png"]  # Telea replaces the erase mask, no more
            for name in ("background.png", "canvas.npy"):
                found[f"{key}/{name}"] = hashlib.sha256(members[name]).hexdigest()
    assert found == PINNED
