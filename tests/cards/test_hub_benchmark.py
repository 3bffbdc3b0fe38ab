"""eval.yaml, the release's Hub benchmark registration (cards.hub_benchmark), field by field against
the Hub's specification (huggingface/hub-docs docs/hub/eval-results.md, "Eval.yaml specification"):
top-level `name`, `description`, `evaluation_framework`, `tasks`; each task an `id` and optional
`config` and `split`; nothing else for a framework other than inspect-ai."""

from __future__ import annotations

import json

import yaml
from release_factory import make_composed_dataset, release_with_parts

from builder.core.hashing import sha256_file
from cards.hub_benchmark import EVALUATION_FRAMEWORK, check_eval_yaml
from cards.release import build_release
from evaluation.ranking.hub_results import task_id
from hsi.cli import main

NAME = "hard-spurious-imagenet"
TEN = "hard-spurious-imagenet-10"


def two_config_release(root, name=NAME, **kwargs):
    datasets = [
        make_composed_dataset(root / "ten", config=TEN, splits={"test": 2}),
        make_composed_dataset(root / "main", splits={"test": 4, "val": 3}),
    ]
    return build_release(root / "rel" / name, datasets, version="v1.0.0", **kwargs)


def test_eval_yaml_holds_the_specifications_fields_and_one_task_per_config_and_split(tmp_path):
    release = two_config_release(tmp_path)
    document = yaml.safe_load((release / "eval.yaml").read_text("utf-8"))
    assert list(document) == ["name", "description", "evaluation_framework", "tasks"]  # the spec's, no other
    assert isinstance(document["name"], str) and document["name"]
    assert isinstance(document["description"], str) and document["description"]
    assert document["evaluation_framework"] == EVALUATION_FRAMEWORK == NAME
    # the default config's tasks first; config and split always spelled out (no reliance on defaults)
    assert document["tasks"] == [
        {"id": f"{NAME}/test", "config": NAME, "split": "test"},
        {"id": f"{NAME}/val", "config": NAME, "split": "val"},
        {"id": f"{TEN}/test", "config": TEN, "split": "test"},
    ]
    assert all(task["id"] == task_id(task["config"], task["split"]) for task in document["tasks"])
    assert check_eval_yaml(document, "eval.yaml") == document
    record = json.loads((release / "_release.json").read_text())
    assert record["files"]["eval.yaml"] == sha256_file(release / "eval.yaml")  # hashed like the card


def test_eval_yaml_bytes_are_deterministic_and_follow_title_and_description(tmp_path):
    first = two_config_release(tmp_path / "a")
    second = two_config_release(tmp_path / "b")
    assert (first / "eval.yaml").read_bytes() == (second / "eval.yaml").read_bytes()
    named = two_config_release(tmp_path / "c", title="My corner cases", description="Small objects, far corners.")
    document = yaml.safe_load((named / "eval.yaml").read_text("utf-8"))
    assert document["name"] == "My corner cases" and document["description"] == "Small objects, far corners."


def test_the_parts_config_is_no_task_and_the_release_verifies(tmp_path, capsys):
    built = release_with_parts(tmp_path)
    document = yaml.safe_load((built["release"] / "eval.yaml").read_text("utf-8"))
    assert [task["config"] for task in document["tasks"]] == [NAME]
    assert document["tasks"] == [{"id": f"{NAME}/val", "config": NAME, "split": "val"}]
    assert document["name"] == "Hard-Spurious-ImageNet"  # the paper's variant: the paper's name
    assert main(["verify", str(built["release"]), "--version", "v1.0.0"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"OK: {built['release']} is intact"


def test_overwrite_and_publish_treat_eval_yaml_as_the_releases_own_file(tmp_path):
    from hf_scripts.publish import release_files

    release = two_config_release(tmp_path)
    again = build_release(
        release,
        [make_composed_dataset(tmp_path / "main2", splits={"test": 4, "val": 3})],
        version="v1.0.0",
        overwrite=True,
    )
    record = json.loads((again / "_release.json").read_text())
    assert "eval.yaml" in [path for path, _ in release_files(again, record)]
    assert [task["config"] for task in yaml.safe_load((again / "eval.yaml").read_text())["tasks"]] == [NAME, NAME]
