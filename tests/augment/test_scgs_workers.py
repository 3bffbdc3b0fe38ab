"""`hsi scgs --workers N` and `--runner ray`: the shards are spread over worker processes or Ray
actors and come out byte for byte as one process builds them, manifest included; a run killed with
-9 midway under `--workers 2` resumes in one process to the same bytes; the runner options are
fitted to the GPUs before any write; a worker loads the models once and refuses other ones.

These tests run with the machine's default torch threads (no pinning): before every process used
the run's one intra-op thread, one process (2 threads on a 2-core machine) and `--workers 2` or
`--runner ray` (1 thread each) differed in 5 of the 33 shards and the manifest, and the killed run
resumed in one process in 2 shards and the manifest."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from scgs_factory import scgs_command
from subprocesses import REPOSITORY, hsi_command, run_hsi, wait_for_states

from builder.augment.generation import GenerationModels, ModelHandle, WorkerModelsDiffer
from builder.augment.stage import check_run_options
from builder.core.errors import UsageError
from builder.core.manifest import MANIFEST_NAME, Manifest
from builder.core.runner import STATE_DIR
from builder.core.stage import RunOptions
from hsi.cli import main

CONFIG = "planted-spurious-scgs"
# All 30 misclassified train images, twice each at 3 steps, 2 a shard: 30 generated shards after the
# 3 copied ones. Enough generated pixels that an image whose float arithmetic ran with another
# intra-op thread count rounds to other JPEG bytes somewhere (5 of 33 shards did, 1 vs 2 threads).
SPREAD = ("--fraction", "1.0", "--per-image", "2", "--steps", "3", "--shard-size", "2")
COPIED = 3


def command(source: Path, out: Path, checkpoint: Path, pipeline: Path, *extra: str) -> list[str]:
    return scgs_command(source, out, checkpoint, pipeline, *SPREAD, *extra)


def digests(folder: Path) -> dict[str, str]:
    """{name: sha256} of every shard of the folder and of its manifest."""
    paths = [*sorted(folder.glob("*.tar")), folder / MANIFEST_NAME]
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in paths}


def differing(folder: Path, reference: Path) -> list[str]:
    """The shards (and manifest) of `folder` whose bytes are not `reference`'s, by name; [] when
    both folders hold the same files with the same bytes."""
    mine, theirs = digests(folder), digests(reference)
    assert sorted(mine) == sorted(theirs)
    return [name for name in mine if mine[name] != theirs[name]]


@pytest.fixture(scope="module")
def one_process(planted_source, erm_checkpoint, tiny_pipeline, tmp_path_factory) -> Path:
    pytest.importorskip("diffusers")
    out = tmp_path_factory.mktemp("scgs-one-process")
    assert main(command(planted_source, out, erm_checkpoint, tiny_pipeline)) == 0
    folder = out / CONFIG
    assert len(Manifest.read(folder).split("train").shards) - 1 >= 4  # several generated shards to spread
    return folder


@pytest.fixture
def local_ray():
    ray = pytest.importorskip("ray")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_two_worker_processes_write_the_bytes_of_one_process(
    one_process, planted_source, erm_checkpoint, tiny_pipeline, tmp_path
):
    # in a fresh process, as a user runs it: a test process that ran backward passes before cannot
    # fork workers that run autograd (torch refuses it)
    out = tmp_path / "workers"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = run_hsi(command(planted_source, out, erm_checkpoint, tiny_pipeline, "--workers", "2"), env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert differing(out / CONFIG, one_process) == []


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_two_ray_actors_write_the_bytes_of_one_process(
    local_ray, one_process, planted_source, erm_checkpoint, tiny_pipeline, tmp_path
):
    # the actors are fresh processes: each loads the models with the run's loader, once
    out = tmp_path / "ray"
    assert main(command(planted_source, out, erm_checkpoint, tiny_pipeline, "--runner", "ray", "--workers", "2")) == 0
    assert differing(out / CONFIG, one_process) == []


@pytest.mark.slow
def test_a_run_killed_midway_with_two_workers_resumes_in_one_process_to_the_same_bytes(
    one_process, planted_source, erm_checkpoint, tiny_pipeline, tmp_path
):
    out = tmp_path / "killed"
    args = command(planted_source, out, erm_checkpoint, tiny_pipeline)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    process = subprocess.Popen(hsi_command(*args, "--workers", "2"), cwd=REPOSITORY, env=env, start_new_session=True)
    folder = out / CONFIG
    total = len(digests(one_process)) - 1
    try:
        # half the shards are done (by the workers, with their thread count), mid-generation
        wait_for_states(folder, total // 2, timeout=180)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the parent and its workers, mid-generation
        process.wait(timeout=60)
    finished = {
        p.name.removesuffix(".json"): (folder / p.name.removesuffix(".json")).stat().st_mtime_ns
        for p in (folder / STATE_DIR).glob("*.json")
    }
    assert not (folder / MANIFEST_NAME).exists() and COPIED < len(finished) < total
    assert main(args) == 0  # the rest in this one process
    assert differing(folder, one_process) == []
    assert {name: (folder / name).stat().st_mtime_ns for name in finished} == finished  # kept, not rebuilt
    assert not list(folder.glob("*.tmp"))


# --- fast: how the work is spread, and what a worker loads ------------------------------------


@pytest.fixture
def two_gpus(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return monkeypatch


def test_on_cuda_each_worker_gets_a_gpu_of_its_own(two_gpus):
    assert check_run_options(RunOptions(workers=2), "cuda").gpus == (0, 1)
    assert check_run_options(RunOptions(workers=1), "auto").gpus == ()  # one process: the models stay here
    assert check_run_options(RunOptions(workers=3, runner="ray"), "auto").gpus == (0, 1, 2)  # Ray's GPUs, not ours
    two_gpus.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert check_run_options(RunOptions(workers=2), "auto").gpus == (3, 5)  # the GPUs this process was given
    assert check_run_options(RunOptions(workers=2), "cpu").gpus == ()  # CPU processes


def test_workers_that_do_not_fit_the_gpus_are_refused_in_one_line(two_gpus):
    with pytest.raises(UsageError, match=r"^--workers 3 runs one process per GPU, but 2 GPU\(s\) are visible") as info:
        check_run_options(RunOptions(workers=3), "cuda")
    assert "\n" not in str(info.value)
    with pytest.raises(UsageError, match="--device cuda:1 names one GPU"):
        check_run_options(RunOptions(workers=2), "cuda:1")
    two_gpus.setenv("CUDA_VISIBLE_DEVICES", "GPU-1f2e,GPU-3c4d")
    with pytest.raises(UsageError, match="by UUID"):
        check_run_options(RunOptions(workers=2), "cuda")


def fake_models(sha: str) -> GenerationModels:
    classifier = SimpleNamespace(provenance=lambda: {"spec": "test_resnet", "checkpoint_sha256": sha})
    inpainter = SimpleNamespace(model_id="tiny-sd", weights_sha256="w", native_size=32, dtype="float32")
    return GenerationModels(classifier, inpainter)


def test_a_worker_loads_the_models_once_and_refuses_other_ones():
    expected = fake_models("a").provenance()
    calls: list[str] = []

    def loader(device: str) -> GenerationModels:
        calls.append(device)
        return fake_models("a")

    handle = ModelHandle("test-once", "cuda", expected, loader)
    try:
        first = handle.get()
        assert handle.get() is first and calls == ["cuda"]  # the next shards reuse them
    finally:
        handle.release()
    planned = ModelHandle("test-planned", "cpu", expected, loader)
    planned.register(fake_models("a"))  # the planning process's own: never loaded again
    try:
        assert planned.get().provenance() == expected and calls == ["cuda"]
    finally:
        planned.release()
    changed = ModelHandle("test-changed", "cpu", expected, lambda device: fake_models("b"))
    with pytest.raises(WorkerModelsDiffer, match=r"classifier\.checkpoint_sha256: 'a' -> 'b'"):
        changed.get()
