"""Resume inside a shard (issue 44): a Ctrl-C or a kill keeps every image finished, the same command
recomputes only the missing ones and gives the bytes of an uninterrupted run; a run with fewer
shards than --workers splits a shard's images among them, with the bytes of one worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from fake_imagenet import shard_hashes, write_tree
from flaky_backends import CountingMasker  # registers the "counting" masker
from kept_images import SHARD, interrupted_extract, kept_images, masked_lines, partials
from subprocesses import REPOSITORY

from hsi.cli import main


def extract(*args) -> int:
    return main(["extract", "--no-progress", *map(str, args)])


def same_outputs(a, b, names=("_info.json", "errors.jsonl")) -> None:
    assert shard_hashes(a) == shard_hashes(b) and shard_hashes(a)
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture
def mask_log(tmp_path, monkeypatch):
    log = tmp_path / "masked.log"
    monkeypatch.setenv("HSI_TEST_MASK_LOG", str(log))
    return log


@pytest.mark.parametrize("resume_workers", [1, 2])
def test_ctrl_c_inside_a_shard_keeps_every_finished_image(tmp_path, monkeypatch, mask_log, capsys, resume_workers):
    tree = write_tree(tmp_path / "imagenet", count=8, bad=True)
    ids = [image.image_id for image in tree.good]
    args = ["--source", tree.root, "--masker", "counting", "--batch-size", 1, "--max-pixels", 1_000_000]
    assert extract(*args, "--out", tmp_path / "clean") == 0
    assert len(masked_lines(mask_log)) == len(ids)
    mask_log.unlink()

    out = tmp_path / "out" / "parts"
    assert interrupted_extract([*args, "--out", out.parent], 3, monkeypatch) == 130
    assert "every image finished inside the others is kept" in capsys.readouterr().err
    assert not (out / SHARD).exists() and not (out / "_info.json").exists()
    listed = sorted(p.stem for p in (tree.root / "val").glob("*.JPEG"))
    kept = kept_images(out, listed)
    masked_before = [i for i in kept if kept[i].key is not None]
    assert len(masked_before) == 3  # each image the masker finished before the Ctrl-C, none more
    mask_log.unlink()

    assert extract(*args, "--out", out.parent, "--workers", resume_workers) == 0
    assert len(masked_lines(mask_log)) == len(ids) - 3  # only the missing images were computed
    same_outputs(out, tmp_path / "clean" / "parts")
    assert not partials(out)  # a finished folder holds no kept images


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_inside_a_shard_resumes_from_the_first_missing_image(tmp_path, mask_log, workers):
    tree = write_tree(tmp_path / "imagenet", count=12)
    ids = [image.image_id for image in tree.good]
    args = ["--source", tree.root, "--masker", "counting", "--batch-size", 1, "--workers", workers]
    assert extract(*args, "--out", tmp_path / "clean") == 0
    mask_log.unlink()

    out = tmp_path / "killed" / "parts"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPOSITORY), str(REPOSITORY / "tests")]),
        HSI_TEST_MASK_DELAY="0.3",
    )
    code = "import sys, flaky_backends\nfrom hsi.cli import main\nsys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", code, "extract", "--no-progress", *map(str, args), "--out", str(out.parent)]
    process = subprocess.Popen(command, env=env, cwd=REPOSITORY, start_new_session=True)
    deadline = time.time() + 120
    while not (out / "_config.yaml").is_file() or len(kept_images(out, ids)) < 3:
        assert time.time() < deadline and process.poll() is None, "the run made no progress"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert not (out / SHARD).exists()
    kept = len(kept_images(out, ids))
    assert 3 <= kept < len(ids)
    assert len(partials(out)) == workers  # with 2 workers, each kept its half's images in a file of its own
    mask_log.unlink()

    assert extract(*args, "--out", out.parent) == 0
    assert len(masked_lines(mask_log)) == len(ids) - kept
    same_outputs(out, tmp_path / "clean" / "parts")
    assert not partials(out)


def test_two_workers_share_a_one_shard_run_with_the_bytes_of_one(tmp_path, mask_log):
    tree = write_tree(tmp_path / "imagenet", count=9, bad=True)
    args = ["--source", tree.root, "--masker", "counting", "--batch-size", 2, "--max-pixels", 1_000_000]
    assert extract(*args, "--out", tmp_path / "one", "--workers", 1) == 0
    mask_log.unlink()
    assert extract(*args, "--out", tmp_path / "two", "--workers", 2) == 0
    pids = masked_lines(mask_log)
    assert len(pids) == len(tree.good)
    by_worker = {pid: pids.count(pid) for pid in set(pids)}
    assert len(by_worker) == 2 and str(os.getpid()) not in by_worker  # both workers masked images
    same_outputs(tmp_path / "one" / "parts", tmp_path / "two" / "parts")
    assert not partials(tmp_path / "two" / "parts")


def test_three_workers_on_two_shards_give_the_bytes_of_one(tmp_path, mask_log):
    tree = write_tree(tmp_path / "imagenet", count=10)
    args = ["--source", tree.root, "--masker", "counting", "--shard-size", 6]
    assert extract(*args, "--out", tmp_path / "one") == 0
    mask_log.unlink()
    assert extract(*args, "--out", tmp_path / "three", "--workers", 3) == 0
    assert len(set(masked_lines(mask_log))) == 3
    same_outputs(tmp_path / "one" / "parts", tmp_path / "three" / "parts")


def test_the_bar_counts_kept_images_as_done(tmp_path, monkeypatch, mask_log):
    import builder.core.runner as runner

    bars = []

    class Bar:
        def __init__(self, total=None, **kwargs):
            self.total, self.n = total, 0
            bars.append(self)

        def update(self, n=1):
            self.n += n

        def close(self):
            pass

    tree = write_tree(tmp_path / "imagenet", count=6)
    args = ["--source", tree.root, "--masker", "counting", "--batch-size", 1, "--out", tmp_path / "out"]
    assert interrupted_extract(args, 2, monkeypatch) == 130
    monkeypatch.setattr(runner, "tqdm", Bar)
    assert extract(*args) == 0
    (bar,) = bars
    assert bar.total == 6 and bar.n == 6  # the 2 kept at the start, the 4 computed as they finish
    assert len(masked_lines(mask_log)) == 2 + 4


def test_hsi_build_ctrl_c_in_extract_then_the_same_command_gives_one_builds_bytes(tmp_path, monkeypatch, mask_log):
    tree = write_tree(tmp_path / "imagenet", count=6)

    def build(out) -> list:
        return ["build", "--no-progress", "--source", tree.root, "--out", out, "--version", "v1.0.0",
                "--masker", "counting", "--batch-size", 1]  # fmt: skip

    assert main(list(map(str, build(tmp_path / "one")))) == 0
    mask_log.unlink()
    monkeypatch.setattr(CountingMasker, "interrupt_after", 2)
    monkeypatch.setattr(CountingMasker, "masked", 0)
    assert main(list(map(str, build(tmp_path / "two")))) == 130
    monkeypatch.setattr(CountingMasker, "interrupt_after", None)
    assert main(list(map(str, build(tmp_path / "two")))) == 0
    assert len(masked_lines(mask_log)) == 6  # 2 before the Ctrl-C, the 4 others after it
    for folder in ("parts", "datasets/hard-spurious-imagenet"):
        same_outputs(tmp_path / "one" / folder, tmp_path / "two" / folder)
    for config in ("parts", "hard-spurious-imagenet"):
        released = f"hard-spurious-imagenet/data/{config}"
        same_outputs(tmp_path / "one" / released, tmp_path / "two" / released, names=("_info.json",))
