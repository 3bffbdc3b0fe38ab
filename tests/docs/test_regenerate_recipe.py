"""The docs' "regenerate with new positions" recipe (docs/publish.md) runs as written, line by line
in bash with `hsi` on PATH, against a release with its parts published to the loopback Hub: no
ImageNet, no GPU, and the regenerated composites are the bytes the original parts folder gives."""

from __future__ import annotations

import shlex
import stat
import subprocess
import sys
from pathlib import Path

from hub_server import LoopbackHub, hub_env
from release_factory import release_with_parts, shard_bytes
from subprocesses import REPOSITORY, run_hsi

from hsi.cli import main

DOC = REPOSITORY / "docs" / "publish.md"
HEADING = "## Regenerate with new positions"
REPO, REVISION = "lab/hard-spurious-imagenet", "v1.0.0"


def recipe_lines() -> list[str]:
    text = DOC.read_text("utf-8")
    section = text[text.index(HEADING) :]
    section = section[: section.index("\n## ", 1)]
    block = section[section.index("```bash\n") + len("```bash\n") :]
    return [line for line in block[: block.index("```")].splitlines() if line.strip()]


def hsi_on_path(folder: Path) -> Path:
    folder.mkdir()
    script = folder / "hsi"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m hsi.cli "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def test_the_recipe_regenerates_from_a_published_release(tmp_path):
    lines = recipe_lines()
    assert lines[0].startswith("hsi compose --parts hf://datasets/ORG/NAME@REVISION --positions bottom-left --sizes 40")
    built = release_with_parts(tmp_path / "build")
    work = tmp_path / "work"
    work.mkdir()
    with LoopbackHub() as hub:
        env = hub_env(hub.endpoint, tmp_path / "hf-home")
        env["PYTHONPATH"] = str(REPOSITORY)
        env["PATH"] = f"{hsi_on_path(tmp_path / 'bin')}:{env['PATH']}"
        published = run_hsi(["publish", str(built["release"]), "--repo", REPO, "--version", REVISION, "--yes"], env)
        assert published.returncode == 0, published.stderr
        for line in lines:
            line = line.replace("ORG/NAME@REVISION", f"{REPO}@{REVISION}")
            done = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"`{line}` exited {done.returncode}:\n{done.stderr[-3000:]}"
    local = tmp_path / "local"
    flags = ["--positions", "bottom-left", "--sizes", "40", "--name", "bottom-left-40", "--no-progress"]
    assert main(["compose", "--parts", str(built["parts"]), "--out", str(local), *flags]) == 0
    assert shard_bytes(work / "regenerated") == shard_bytes(local) != {}
    assert (work / "bottom-left-40" / "README.md").is_file()
    assert not list(work.glob("**/data/parts"))  # the parts went to the cache, not beside the output
