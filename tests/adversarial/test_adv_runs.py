"""Hostile conditions for the runs themselves: foreign files in output folders, two runs at once, a
parent killed under its workers, a full or read-only disk, Ctrl-C. Each test failed before its fix."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fake_imagenet import extract_args, write_tree
from parts_factory import compose_args, fake_images, write_parts
from subprocesses import hsi_command, wait_for_states

from builder.core.locks import exclusive_folder
from hsi.cli import main


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.tar"))}


def children_of(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_extract_overwrite_never_deletes_files_it_did_not_write(tmp_path, capsys):
    tree = write_tree(tmp_path / "imagenet", count=2)
    parts = tmp_path / "out" / "parts"
    parts.mkdir(parents=True)
    foreign = {name: f"someone's {name}" for name in ("val-00000.tar", "val-notes.txt", "draft.tmp")}
    for name, text in foreign.items():
        (parts / name).write_text(text)
    for extra in ([], ["--overwrite"]):
        assert main(extract_args(tree.root, tmp_path / "out", *extra)) == 2
        assert "holds no dataset of this toolkit" in capsys.readouterr().err
    assert {p.name: p.read_text() for p in parts.iterdir()} == foreign


def small_compose_args(tmp_path: Path) -> list[str]:
    """`hsi compose` of parts with one image of each of two classes (written here) into tmp_path/out."""
    write_parts(tmp_path / "parts", {"val": fake_images(["n01443537", "n02437312"], per_class=1)})
    return compose_args(tmp_path / "parts", tmp_path / "out", "--no-progress")


@pytest.fixture()
def composed(tmp_path) -> tuple[list[str], Path]:
    """A finished small compose: its arguments and the dataset folder it wrote."""
    args = small_compose_args(tmp_path)
    assert main(args) == 0
    return args, tmp_path / "out" / "hard-spurious-imagenet"


def test_only_the_toolkits_own_temporaries_are_removed(composed):
    args, dataset = composed
    (dataset / "my-notes.tmp").write_text("mine")
    (dataset / "val-00000.tar.4242.tmp").write_bytes(b"half a shard")  # what a killed run of ours leaves
    assert main(args) == 0
    assert (dataset / "my-notes.tmp").read_text() == "mine"
    assert not (dataset / "val-00000.tar.4242.tmp").exists()


def test_overwrite_of_our_own_folder_refuses_while_it_holds_a_users_file(composed, capsys):
    """Failed before: `--overwrite` on a compose folder of ours emptied it whole, a user's notes with it."""
    args, dataset = composed
    (dataset / "my-notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in dataset.iterdir() if p.is_file()}
    assert main([*args, "--overwrite"]) == 2
    assert "--overwrite would delete my-notes.txt in" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in dataset.iterdir() if p.is_file()} == before
    (dataset / "my-notes.txt").unlink()
    assert main([*args, "--overwrite"]) == 0  # only our own files left: emptied and rebuilt, the same bytes
    del before["my-notes.txt"]
    assert {p.name: p.read_bytes() for p in dataset.iterdir() if p.is_file()} == before


def test_a_second_run_into_a_locked_folder_is_refused_naming_the_first(tmp_path, capsys):
    args, out = small_compose_args(tmp_path), tmp_path / "out"
    with exclusive_folder(out / "hard-spurious-imagenet"):
        code = main(args)
        assert code == 2
        assert f"is being written by another hsi run (pid {os.getpid()})" in capsys.readouterr().err
    assert not (out / "hard-spurious-imagenet").exists()


def test_two_composes_at_once_never_lose_composites(tmp_path):
    write_parts(
        tmp_path / "parts", {"val": fake_images(["n01443537", "n02437312", "n01440764"], per_class=6)}, shard_size=2
    )
    common = ["compose", "--parts", tmp_path / "parts", "--shard-size", 12, "--workers", 2, "--no-progress"]
    assert subprocess.run(hsi_command(*common, "--out", tmp_path / "clean"), check=False).returncode == 0
    racers = [
        subprocess.Popen(hsi_command(*common, "--out", tmp_path / "race"), stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outcomes = [(p.wait(timeout=120), p.stderr.read()) for p in racers]
    assert sorted(code for code, _ in outcomes) in ([0, 0], [0, 2])  # the second waits its turn or is refused
    assert all("another hsi run" in err for code, err in outcomes if code == 2)
    assert subprocess.run(hsi_command(*common, "--out", tmp_path / "race"), check=False).returncode == 0
    clean, race = tmp_path / "clean" / "hard-spurious-imagenet", tmp_path / "race" / "hard-spurious-imagenet"
    assert digests(race) == digests(clean)
    assert (race / "_info.json").read_bytes() == (clean / "_info.json").read_bytes()


def test_workers_die_with_their_parent(tmp_path):
    tree = write_tree(tmp_path / "imagenet", count=80)
    process = subprocess.Popen(
        hsi_command(
            "extract",
            "--source",
            tree.root,
            "--out",
            tmp_path / "out",
            "--shard-size",
            2,
            "--workers",
            2,
            "--no-progress",
        ),
        start_new_session=True,
    )
    wait_for_states(tmp_path / "out" / "parts", 1)
    workers = children_of(process.pid)
    assert workers
    os.kill(process.pid, signal.SIGKILL)  # the parent alone: its workers must not keep running
    process.wait(timeout=30)
    deadline = time.time() + 10
    while time.time() < deadline and any(Path(f"/proc/{pid}").exists() and _state(pid) != "Z" for pid in workers):
        time.sleep(0.1)
    alive = [pid for pid in workers if Path(f"/proc/{pid}").exists() and _state(pid) != "Z"]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived their parent"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_full_disk_is_one_clear_error(tmp_path, capsys, monkeypatch):
    args = small_compose_args(tmp_path)

    def no_space(path, samples):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("builder.compose.shard_builder.write_shard", no_space)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "run the same command to resume" in err


def test_a_failed_settings_write_leaves_the_old_settings_file_whole(tmp_path, monkeypatch):
    from builder.core.config import load_settings, save_settings

    save_settings(tmp_path, {"stage": "compose", "seed": 1})
    real_write_text = Path.write_text

    def disk_fills_midway(self, data, *args, **kwargs):
        real_write_text(self, data[:3], *args, **kwargs)  # a few bytes land, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", disk_fills_midway)
    with pytest.raises(OSError):
        save_settings(tmp_path, {"stage": "compose", "seed": 2})
    monkeypatch.undo()
    assert load_settings(tmp_path) == {"stage": "compose", "seed": 1}


def test_ctrl_c_stops_a_multi_worker_run_within_seconds_and_it_resumes(tmp_path):
    tree = write_tree(tmp_path / "imagenet", count=120)
    common = ["extract", "--source", tree.root, "--shard-size", 2, "--workers", 2, "--no-progress"]
    assert subprocess.run(hsi_command(*common, "--out", tmp_path / "clean"), check=False).returncode == 0
    out = tmp_path / "stopped"
    process = subprocess.Popen(
        hsi_command(*common, "--out", out), start_new_session=True, stderr=subprocess.PIPE, text=True
    )
    wait_for_states(out / "parts", 2)
    started = time.time()
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole process group
    code = process.wait(timeout=30)
    elapsed, err = time.time() - started, process.stderr.read()
    assert code == 130 and elapsed < 10
    assert "Traceback" not in err and err.strip().count("\n") == 0
    assert err.startswith("hsi extract: error: interrupted:") and "run the same command again to resume" in err
    assert len(list((out / "parts" / "_state").glob("*.json"))) < 60  # the queue was cancelled, not drained
    assert subprocess.run(hsi_command(*common, "--out", out), check=False).returncode == 0
    assert digests(out / "parts") == digests(tmp_path / "clean" / "parts")
    clean_manifest = json.loads((tmp_path / "clean" / "parts" / "_info.json").read_text())
    assert json.loads((out / "parts" / "_info.json").read_text()) == clean_manifest


@pytest.mark.parametrize("target", ["file"])
def test_compose_out_pointing_at_a_file_is_a_clear_error(tmp_path, capsys, target):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "hard-spurious-imagenet").write_text("not a folder")
    assert main(small_compose_args(tmp_path)) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
