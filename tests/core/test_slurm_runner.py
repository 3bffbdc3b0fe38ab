"""`--runner slurm` on a real single-node Slurm (munged, slurmctld and slurmd from Debian's packages,
started here; skipped with the reason where they cannot start): extract and compose give the local
runner's bytes, a task cancelled with scancel is named and resumes to the same bytes, a failed task
is named with its log, and a folder an array still writes is refused to other runs."""

import json
import subprocess
import time
from pathlib import Path

import pytest
from fake_imagenet import shard_hashes, write_tree
from slurm_cluster import BytesShardBuilder, slurm_session

from builder.core.runner import load_finished, plan_shards
from builder.core.slurm_runner import (
    ArrayRecord,
    JobSubmitted,
    OutputNotShared,
    SlurmOptions,
    SlurmTaskFailed,
    queued_tasks,
    run_shards_slurm,
    settle_recorded_array,
    slurm_folder,
)
from hsi.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurm_session(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_tree(tmp_path_factory.mktemp("imagenet"), split="val", count=5)


@pytest.fixture(scope="module")
def local_parts(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    assert main(["extract", "--no-progress", "--source", str(tree.root), "--out", str(out), "--shard-size", "2"]) == 0
    return out / "parts"


def same_folder(a: Path, b: Path) -> None:
    assert shard_hashes(a) == shard_hashes(b) and len(shard_hashes(a)) >= 2
    for name in ("_info.json", "errors.jsonl"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def compose(parts: Path, out: Path, *flags: str) -> int:
    args = ["compose", "--no-progress", "--parts", str(parts), "--out", str(out), "--sizes", "40,56"]
    return main([*args, "--shard-size", "3", *flags])


def test_extract_on_slurm_gives_the_local_runners_bytes(slurm, tree, local_parts, tmp_path):
    args = ["extract", "--no-progress", "--source", str(tree.root), "--out", str(tmp_path), "--shard-size", "2"]
    assert main([*args, "--runner", "slurm", "--slurm-time", "10"]) == 0
    same_folder(local_parts, tmp_path / "parts")
    assert not slurm_folder(tmp_path / "parts").exists()  # a collected array leaves no submitit files


def test_compose_on_slurm_gives_the_local_runners_bytes(slurm, local_parts, tmp_path):
    assert compose(local_parts, tmp_path / "local") == 0
    assert compose(local_parts, tmp_path / "slurm", "--runner", "slurm", "--slurm-partition", "debug") == 0
    (local,) = [p.parent for p in (tmp_path / "local").rglob("_info.json")]
    (on_slurm,) = [p.parent for p in (tmp_path / "slurm").rglob("_info.json")]
    same_folder(local, on_slurm)


def test_a_cancelled_task_is_named_and_the_same_command_resumes_to_the_same_bytes(
    slurm, local_parts, tmp_path, capsys
):
    assert compose(local_parts, tmp_path / "local") == 0
    (local,) = [p.parent for p in (tmp_path / "local").rglob("_info.json")]
    config = tmp_path / "slurm.yaml"
    config.write_text("setup: ['sleep 6']\ncpus_per_task: 1\n")  # tasks slow enough to cancel one
    out = tmp_path / "slurm"
    flags = ("--runner", "slurm", "--slurm-config", str(config), "--slurm-array-parallelism", "1")
    assert compose(local_parts, out, *flags, "--detach") == 0
    said = capsys.readouterr().out
    assert "submitted job array" in said and "run the same command again" in said
    folder = out / local.name
    record = ArrayRecord.read(slurm_folder(folder))
    assert record is not None and len(record.tasks) >= 2
    last = len(record.tasks) - 1
    subprocess.run(["scancel", f"{record.job_id}_{last}"], check=True)

    # another runner on the folder the array writes: refused in one line, nothing touched
    assert compose(local_parts, out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"scancel {record.job_id}" in err[0]

    assert compose(local_parts, out, *flags) == 1  # waits, then names the cancelled task
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"array task {record.job_id}_{last} " in err[0]
    assert str(record.log_path(slurm_folder(folder), last)) in err[0]
    assert not (folder / "_info.json").exists()
    missing = set(record.tasks[last])
    assert missing and not missing & {p.name for p in folder.glob("*.tar")}

    assert compose(local_parts, out, *flags) == 0  # resubmits only the cancelled task's shards
    same_folder(local, folder)


def test_a_failed_task_is_named_with_its_log_and_the_rest_is_kept(slurm, tmp_path):
    plans = plan_shards("val", list(range(6)), 2)
    failing = BytesShardBuilder(str(tmp_path), failing=plans[1].filename)
    with pytest.raises(SlurmTaskFailed) as failure:
        run_shards_slurm(plans, failing, tmp_path, SlurmOptions(time_minutes=5), progress=False)
    message = str(failure.value)
    folder = slurm_folder(tmp_path)
    record = ArrayRecord.read(folder)
    assert record is not None and record.tasks == (("val-00000.tar",), ("val-00001.tar",), ("val-00002.tar",))
    log = record.log_path(folder, 1)
    assert f"array task {record.job_id}_1 " in message and str(log) in message, message
    assert "(RuntimeError: planted failure on val-00001.tar)" in message
    assert "planted failure on val-00001.tar" in log.read_text()
    assert [load_finished(tmp_path, plan) is not None for plan in plans] == [True, False, True]

    # the same run with the fault gone builds only the missing shard, then leaves no submitit files
    fixed = BytesShardBuilder(str(tmp_path))
    results, reused = run_shards_slurm(plans, fixed, tmp_path, SlurmOptions(), progress=False)
    assert reused == 2 and [r.stats.filename for r in results] == [p.filename for p in plans]
    assert not folder.exists()


def test_box_redetection_as_a_slurm_array_writes_the_one_process_report(slurm, tmp_path):
    from fake_imagenet import WNIDS
    from tiny_detector import save_tiny_grounding_dino

    model = save_tiny_grounding_dino(tmp_path / "tiny-gdino", WNIDS)
    tree = write_tree(tmp_path / "imagenet", split="val", count=5)
    args = ["validate", "--boxes", "--source", str(tree.root), "--detector", str(model), "--box-threshold", "0"]
    args += ["--text-threshold", "0", "--device", "cpu", "--batch-size", "2"]
    assert main([*args, "--out", str(tmp_path / "here" / "report")]) == 0
    assert main([*args, "--out", str(tmp_path / "slurm" / "report"), "--runner", "slurm", "--workers", "2"]) == 0
    for name in ("validation.json", "validation.md"):
        here, there = tmp_path / "here" / "report" / name, tmp_path / "slurm" / "report" / name
        assert there.read_bytes() == here.read_bytes(), name
    assert json.loads(here.with_name("validation.json").read_text())["detection"]["images"] == 5
    assert not (Path.cwd() / ".hsi-slurm").exists()  # submitit's files are removed once collected


def test_a_task_whose_node_does_not_see_the_folder_is_named_as_such(slurm, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    plans = plan_shards("val", list(range(4)), 2)
    config = tmp_path / "slurm.yaml"
    config.write_text("additional_parameters: {begin: now+4}\n")  # queued long enough to hide the folder
    with pytest.raises(JobSubmitted):
        run_shards_slurm(plans, BytesShardBuilder(str(out)), out, SlurmOptions(config=config, detach=True))
    folder = slurm_folder(out)
    record = ArrayRecord.read(folder)
    assert record is not None
    hidden = folder.with_name(".elsewhere")
    folder.rename(hidden)  # what a node that does not mount the folder finds: nothing there
    deadline = time.monotonic() + 90
    while queued_tasks(record) and time.monotonic() < deadline:
        time.sleep(0.5)
    hidden.rename(folder)
    with pytest.raises(OutputNotShared) as failure:
        settle_recorded_array(out, collect=True, options=SlurmOptions(), progress=False)
    message = str(failure.value)
    assert "\n" not in message and f"array task {record.task_ids[0]} could not start" in message
    assert f"does not see {out.parent}" in message and "JobLaunchFailure" in message
    assert not any(load_finished(out, plan) for plan in plans)
