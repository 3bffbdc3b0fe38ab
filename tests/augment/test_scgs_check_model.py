"""`--check-model` (any model spec; here a TorchScript classifier of the config's 4 labels) and
`--keep flag`: every generated image is kept, the ones the check does not confirm are flagged."""

from __future__ import annotations

import pytest
import torch
from scgs_factory import generated, scgs_command
from trusted_code import trust_flags

from builder.core.manifest import Manifest
from builder.formats.augmented import decode_augment_json
from hsi.cli import main

pytest.importorskip("diffusers")


def test_check_model_and_keep_flag(planted_source, erm_checkpoint, tiny_pipeline, tmp_path):
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
    path = tmp_path / "check.pt"
    torch.jit.trace(net, torch.zeros(1, 3, 64, 64)).save(str(path))
    command = scgs_command(
        planted_source,
        tmp_path / "out",
        erm_checkpoint,
        tiny_pipeline,
        "--check-model",
        f"ts:{path}",
        "--keep",
        "flag",
        *trust_flags(f"ts:{path}"),
    )
    assert main(command) == 0
    folder = tmp_path / "out" / "planted-spurious-scgs"
    blocks = [decode_augment_json(m) for m in generated(folder).values()]
    assert blocks and all(isinstance(b["label_check"]["check_label"], int) for b in blocks)
    for b in blocks:
        check = b["label_check"]
        assert check["agrees"] == (check["erm_label"] == check["check_label"] == b["true_label"])
        assert check["kept"] and check["flagged"] == (not check["agrees"])
    overall = Manifest.read(folder).augment["label_check"]["overall"]
    assert overall["kept"] == len(blocks) and overall["agrees"] == sum(b["label_check"]["agrees"] for b in blocks)
    assert Manifest.read(folder).backends["check_model"]["spec"] == "ts:check.pt"
