"""Every refusal of the loader gate's attack list is one line: `hsi eval` is run as a user runs it,
in a process of its own with a terminal's "y" waiting on stdin, and its stderr (everything the
libraries log or print included) is counted: exactly one line, no terminal escape, exit status 2,
no output folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from release_factory import make_composed_dataset
from subprocesses import REPOSITORY, hsi_command
from tiny_clip import OPENCLIP_CONFIG, save_tiny_hf_clip, save_tiny_openclip

from builder.backends.loader_gate import MAX_TENSORS

pytest.importorskip("open_clip")
pytest.importorskip("transformers")


class CreatesFile:
    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), "utf-8")
    return path


def open_clip_config(folder: Path, stem: str, text_cfg: dict) -> Path:
    config = json.loads(json.dumps(OPENCLIP_CONFIG))
    config["text_cfg"].update(text_cfg)
    return write_json(folder / f"{stem}.json", config)


def many_tensors(path: Path) -> Path:
    header = {f"t{n}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for n in range(MAX_TENSORS + 1)}
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw)
    return path


def power_tower_program(path: Path) -> Path:
    """A .pt2 of a tiny classifier whose symbolic batch size is the expression 9^9^9^9."""
    import zipfile

    class Mean(torch.nn.Module):
        def forward(self, x):
            return x.mean((2, 3)).repeat(1, 4)

    exported = torch.export.export(Mean(), (torch.rand(2, 3, 8, 8),), dynamic_shapes={"x": {0: torch.export.Dim("b")}})
    plain = path.with_name("plain.pt2")
    torch.export.save(exported, str(plain))
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(path, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            if name.endswith("models/model.json"):
                program = json.loads(data)
                size = program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"]
                size["expr_str"] = "9^9^9^9"
                data = json.dumps(program).encode()
            target.writestr(name, data)
    return path


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict:
    """Each refusal of the attack list: (hsi eval arguments after DATA --out OUT, a needle of its line)."""
    root = tmp_path_factory.mktemp("gate-lines")
    weights = save_tiny_openclip(root / "tiny" / "tiny-clip.safetensors")
    clip = save_tiny_hf_clip(root / "hf-clip")
    tokenizer = root / "code-tokenizer"
    write_json(tokenizer / "tokenizer_config.json", {"auto_map": {"AutoTokenizer": ["evil.Evil", None]}})
    (tokenizer / "evil.py").write_text(f"open({str(root / 'ran')!r}, 'w')\n", "utf-8")
    trusting = open_clip_config(
        root / "configs",
        "hsi-lines-trusting",
        {"hf_tokenizer_name": str(tokenizer), "tokenizer_kwargs": {"trust_remote_code": True}},
    )
    link = root / "linked-clip"
    link.symlink_to(clip, target_is_directory=True)
    auto_map = shutil.copytree(clip, root / "auto-map-clip")
    processor = json.loads((auto_map / "preprocessor_config.json").read_text())
    processor["auto_map"] = {"AutoImageProcessor": "evil.EvilProcessor"}
    write_json(auto_map / "preprocessor_config.json", processor)
    huge_header = shutil.copytree(clip, root / "many-tensors-clip")
    many_tensors(huge_header / "model.safetensors")
    pickled = root / "weights.pt"
    torch.save({"fc.weight": CreatesFile(root / "ran")}, pickled)
    templates = root / "twice.yaml"
    templates.write_text('mine:\n  - "a {}."\nmine:\n  - "the {}."\n', "utf-8")
    plain_config = open_clip_config(root / "configs", "hsi-lines-plain", {})
    return {
        "root": root,
        "dataset": make_composed_dataset(root / "data", splits={"test": 4}),
        "open_clip trust_remote_code": (
            ["--model", f"openclip:{trusting}:{weights}"],
            "text_cfg.tokenizer_kwargs.trust_remote_code",
        ),
        "hf-clip folder is a link": (["--model", f"hf-clip:{link}"], "is a link"),
        "hf-clip auto_map": (["--model", f"hf-clip:{auto_map}"], "'auto_map'"),
        "safetensors header of too many tensors": (
            ["--model", f"hf-clip:{huge_header}"],
            f"declares {MAX_TENSORS + 1} tensors",
        ),
        "--arch state_dict holding an object": (["--model", str(pickled), "--arch", "resnet18"], "never unpickled"),
        "ep: power tower with carets": (["--model", f"ep:{power_tower_program(root / 'tower.pt2')}"], "9^9^9^9"),
        "templates naming a set twice": (
            ["--model", f"openclip:{plain_config}:{weights}", "--templates", str(templates)],
            "'mine' is given twice",
        ),
    }


CASES = [
    "open_clip trust_remote_code",
    "hf-clip folder is a link",
    "hf-clip auto_map",
    "safetensors header of too many tensors",
    "--arch state_dict holding an object",
    "ep: power tower with carets",
    "templates naming a set twice",
]


@pytest.mark.parametrize("case", CASES)
def test_each_refusal_is_exactly_one_line_with_a_yes_waiting_on_stdin(cases, case):
    arguments, needle = cases[case]
    out = cases["root"] / f"out-{CASES.index(case)}"
    result = subprocess.run(
        hsi_command("eval", cases["dataset"], "--out", out, "--no-progress", *arguments),
        input="y\n" * 10,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPOSITORY,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1, f"{len(lines)} lines: {result.stderr[:2000]}"
    assert lines[0].startswith("hsi eval: error: ") and needle in lines[0], lines[0]
    assert "\x1b" not in result.stderr + result.stdout
    assert not out.exists()
    assert not (cases["root"] / "ran").exists()
