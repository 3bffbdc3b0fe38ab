"""`hsi scgs --runner slurm` on a real single-node Slurm (started by the tests; skipped with the
reason where it cannot start): the generated shards are built by array tasks, each a fresh process
that loads the tiny models with the run's loader, and come out byte for byte as one local process
builds them, manifest included; submitit's files are gone once the array is collected."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from scgs_factory import generated, scgs_command
from slurm_cluster import slurm_session

from builder.core.manifest import MANIFEST_NAME, Manifest
from builder.core.slurm_runner import slurm_folder
from hsi.cli import main

pytestmark = pytest.mark.slow
CONFIG = "planted-spurious-scgs"
# a few generated shards, so that several array tasks build them
SMALL = ("--fraction", "0.2", "--shard-size", "2")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    pytest.importorskip("diffusers")
    with slurm_session(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def digests(folder: Path) -> dict[str, str]:
    paths = [*sorted(folder.glob("*.tar")), folder / MANIFEST_NAME]
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in paths}


def test_scgs_on_slurm_writes_the_bytes_of_one_local_process(
    slurm, planted_source, erm_checkpoint, tiny_pipeline, tmp_path, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the array tasks load the tiny pipeline offline too
    here, there = tmp_path / "here", tmp_path / "there"
    assert main(scgs_command(planted_source, here, erm_checkpoint, tiny_pipeline, *SMALL)) == 0
    on_slurm = ("--runner", "slurm", "--slurm-time", "10")
    assert main(scgs_command(planted_source, there, erm_checkpoint, tiny_pipeline, *SMALL, *on_slurm)) == 0
    local, folder = here / CONFIG, there / CONFIG
    shards = Manifest.read(local).split("train").shards
    assert len(generated(local)) >= 2 and len(shards) >= 3  # copied and generated shards
    assert digests(folder) == digests(local)
    assert not slurm_folder(folder).exists()
    # built there: one array task per shard of every split (the copied val and test too), each ended well
    manifest = Manifest.read(local)
    every_shard = sum(len(manifest.split(split).shards) for split in manifest.splits)
    ended = re.findall(r"_job_complete: JobId=\S+ WEXITSTATUS 0", (slurm.root / "slurmctld.log").read_text())
    assert len(ended) == every_shard > len(shards)
