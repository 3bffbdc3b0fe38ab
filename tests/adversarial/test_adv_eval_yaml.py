"""A hostile eval.yaml in a release folder (issue 32): wrong types, keys the Hub's specification does
not define, a task of a config or split the release lacks, the parts config as a task, a task twice,
a config/split without its task, not YAML, a link. `hsi verify` refuses each in one line naming the
file and the field, and exits 1."""

from __future__ import annotations

import shutil

import pytest
import yaml
from release_factory import make_composed_dataset

from cards.hub_benchmark import read_eval_yaml
from cards.release import build_release
from hsi.cli import main

NAME = "hard-spurious-imagenet"
GOOD_TASKS = [{"id": f"{NAME}/test", "config": NAME, "split": "test"}]


def good_document() -> dict:
    return {"name": "N", "description": "D", "evaluation_framework": NAME, "tasks": [dict(t) for t in GOOD_TASKS]}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval_yaml")
    return build_release(
        root / "rel" / NAME, [make_composed_dataset(root / "composed", splits={"test": 4})], version="v1.0.0"
    )


def edited(document: dict, change) -> dict:
    change(document)
    return document


CASES = [
    (lambda d: d.update(name=3), "eval.yaml: name: expected a string, got 3"),
    (lambda d: d.update(description=""), "eval.yaml: description: is empty"),
    (lambda d: d.update(name="two\nlines"), "eval.yaml: name: holds a line break or a control character"),
    (lambda d: d.update(tasks="all"), "eval.yaml: tasks: expected a list, got 'all'"),
    (lambda d: d.update(tasks=[]), "eval.yaml: tasks: lists no task"),
    (lambda d: d["tasks"][0].update(split=3), "eval.yaml: tasks[0].split: expected a string, got 3"),
    (lambda d: d["tasks"][0].pop("id"), "eval.yaml: tasks[0].id: missing"),
    (lambda d: d.update(tasks=["x"]), "eval.yaml: tasks[0]: expected an object, got 'x'"),
    (lambda d: d.update(solvers=[]), "eval.yaml: unknown key 'solvers'"),
    (lambda d: d["tasks"][0].update(field_spec={}), "eval.yaml: tasks[0]: unknown key 'field_spec'"),
    (lambda d: d.update(evaluation_framework="Not An Id"), "eval.yaml: evaluation_framework: 'Not An Id' is not"),
    (lambda d: d.update(evaluation_framework="inspect-ai"), "eval.yaml: evaluation_framework is 'inspect-ai'"),
    (
        lambda d: d["tasks"].append({"id": "other/test", "config": "other", "split": "test"}),
        "eval.yaml: tasks[1]: config 'other' is not a config of the release",
    ),
    (lambda d: d["tasks"][0].update(split="train"), f"eval.yaml: tasks[0]: {NAME} has no split 'train'"),
    (
        lambda d: d["tasks"].append({"id": "parts/val", "config": "parts", "split": "val"}),
        "eval.yaml: tasks[1]: config 'parts' holds the parts, not a benchmark task",
    ),
    (
        lambda d: d["tasks"].append({"id": "again", "config": NAME}),
        f"eval.yaml: tasks[1]: a second task of {NAME}/test",
    ),
    (lambda d: d["tasks"].append(dict(GOOD_TASKS[0])), "eval.yaml: tasks[1].id: 'hard-spurious-imagenet/test' is the"),
    (lambda d: d["tasks"][0].update(id="leaderboard"), "eval.yaml: tasks[0]: id 'leaderboard' is not"),
    (lambda d: d.update(tasks=[{"id": "x", "config": NAME, "split": "val"}]), f"eval.yaml: no task for {NAME}/test"),
]


@pytest.mark.parametrize(("change", "message"), CASES)
def test_a_hostile_eval_yaml_is_one_line_from_hsi_verify(release, tmp_path, capsys, change, message):
    folder = tmp_path / NAME
    shutil.copytree(release, folder)
    (folder / "eval.yaml").write_text(yaml.safe_dump(edited(good_document(), change), sort_keys=False), "utf-8")
    assert main(["verify", str(folder)]) == 1
    out = capsys.readouterr().out.splitlines()
    failed = [line.removeprefix("FAILED: ") for line in out if line.startswith("FAILED: ")]
    assert "eval.yaml: sha256 differs from _release.json's record (changed since `hsi release` wrote it)" in failed
    ours = [line for line in failed if line.startswith("eval.yaml: ") and "sha256" not in line]
    assert any(line.startswith(message) for line in ours), failed
    assert all("\n" not in line for line in ours)


def test_the_unedited_document_passes_and_broken_files_are_one_line(release, tmp_path, capsys):
    folder = tmp_path / NAME
    shutil.copytree(release, folder)
    assert main(["verify", str(folder)]) == 0
    for text, message in [
        ("tasks: [", "eval.yaml: eval.yaml is not valid YAML"),
        ("- a list", "eval.yaml: expected an object, got a list"),
        ("name: !!python/object:os.system x", "eval.yaml: eval.yaml is not valid YAML"),
        (b"\xff\xfe", "eval.yaml: eval.yaml is not UTF-8 text"),
    ]:
        target = folder / "eval.yaml"
        target.write_bytes(text if isinstance(text, bytes) else text.encode())
        assert main(["verify", str(folder)]) == 1
        failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAILED: eval.yaml: ")]
        assert [line for line in failed if "sha256" not in line][0].removeprefix("FAILED: ").startswith(message)
    (folder / "eval.yaml").unlink()
    (folder / "eval.yaml").symlink_to(release / "eval.yaml")  # a link is refused, never followed
    assert main(["verify", str(folder)]) == 1
    assert "FAILED: eval.yaml: a link or not a regular file" in capsys.readouterr().out
    with pytest.raises(Exception, match="is a link"):
        read_eval_yaml(folder / "eval.yaml")


def test_publish_uploads_eval_yaml_with_the_card_and_refuses_a_hostile_one(release, tmp_path, capsys):
    folder = tmp_path / NAME
    shutil.copytree(release, folder)
    assert main(["publish", str(folder), "--repo", "lab/hsi", "--version", "v1.0.0"]) == 0  # the offline dry run
    out = capsys.readouterr().out
    assert "upload README.md" in out and "upload eval.yaml" in out
    (folder / "eval.yaml").write_text(yaml.safe_dump(edited(good_document(), lambda d: d.update(tasks=3))), "utf-8")
    assert main(["publish", str(folder), "--repo", "lab/hsi", "--version", "v1.0.0"]) != 0
    err = capsys.readouterr().err
    # its sha256 no longer matches _release.json's record: refused as changed, before it is read
    assert "eval.yaml changed since `hsi release` wrote them" in err and len(err.strip().splitlines()) == 1
