"""The release's `eval.yaml`: what registers its Hub dataset repo as a benchmark.

The format is the Hub's own specification, read in huggingface/hub-docs at commit
242f4a1eeb867daf4ac3f44026a5df4a68908a3d, `docs/hub/eval-results.md` ("Registering a Benchmark" and
"Eval.yaml specification"; https://huggingface.co/docs/hub/eval-results), with the framework names of
huggingface/huggingface.js `packages/tasks/src/eval.ts` (`EVALUATION_FRAMEWORKS`, commit
fe42e68017ffc76d09922ea8f9b38a6964345710). At the repo's root:

    name: ...                    a human-readable display name
    description: ...             a short description of what the benchmark measures
    evaluation_framework: ...    one identifier of eval.ts's EVALUATION_FRAMEWORKS (one per benchmark)
    tasks:                       the tasks (one leaderboard each)
      - id: ...                  required, unique
        config: ...              optional: the dataset config (default: the dataset's default config)
        split: ...               optional: the split (default: "test")

`field_spec`, `solvers` and `scorers` are required with `evaluation_framework: inspect-ai` only
(a language-model harness); this benchmark is not run by it, so they are not written, and a file
holding them (or any key the specification does not define) is refused.

This toolkit writes one task per config and split of the release (the `parts` config holds no
composites to classify, so it is no task), its id `CONFIG/SPLIT` (evaluation.ranking.hub_results.task_id,
the `task_id` that `hsi eval`'s `.eval_results/` files name), config and split always spelled out.
Its framework identifier, `hard-spurious-imagenet`, is not yet one of eval.ts's names: the Hub
validates eval.yaml at push time, and the benchmark is listed once the Hub's team allow-lists it
(docs/publish.md says how to ask).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from builder.core.errors import printable
from builder.core.untrusted import Fields, UntrustedInput, read_yaml
from cards.parts_card import PARTS_CONFIG
from cards.summary import DATASET_NAME, PRETTY_NAME
from evaluation.ranking.hub_results import task_id

EVAL_YAML = "eval.yaml"
EVALUATION_FRAMEWORK = DATASET_NAME
DEFAULT_SPLIT = "test"  # the specification's default split
TOP_KEYS = ("name", "description", "evaluation_framework", "tasks")
TASK_KEYS = ("id", "config", "split")
FRAMEWORK = re.compile(r"[a-z0-9][a-z0-9-]*")
MAX_LINE = 200
PAPER_DESCRIPTION = (
    "ImageNet classifiers on small objects (56, 84 or 112 px on a 224 px canvas) pasted at the centre or in a "
    "corner, on their own or another class's inpainted background (Fatima, Jung, Keuper, TMLR 2025, "
    "arXiv 2505.03569); each task is ranked by worst-group top-1."
)
CUSTOM_DESCRIPTION = (
    f"A custom build made with the {DATASET_NAME} toolkit (objects pasted small at chosen positions on inpainted "
    "backgrounds); each task is ranked by worst-group top-1."
)


def release_tasks(configs: Mapping[str, Mapping], default: str) -> list[tuple[str, str]]:
    """(config, split) of every task of a release: its configs' splits, the parts config left out,
    the default config first, then by name."""
    names = sorted((c for c in configs if c != PARTS_CONFIG), key=lambda c: (c != default, c))
    return [(config, split) for config in names for split in sorted(configs[config]["splits"])]


def benchmark_document(name: str, description: str, tasks: Iterable[tuple[str, str]]) -> dict:
    """The eval.yaml document, keys in the specification's order."""
    return {
        "name": name,
        "description": description,
        "evaluation_framework": EVALUATION_FRAMEWORK,
        "tasks": [{"id": task_id(config, split), "config": config, "split": split} for config, split in tasks],
    }


def eval_yaml_text(document: dict) -> str:
    """The file's bytes: the same document always gives the same bytes."""
    import yaml

    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=10_000, default_flow_style=False)


def default_description(paper: bool) -> str:
    return PAPER_DESCRIPTION if paper else CUSTOM_DESCRIPTION


def default_name(title: str | None) -> str:
    return title or PRETTY_NAME


def _one_line(fields: Fields, key: str) -> str:
    text = fields.string(key)
    if not text.strip():
        raise fields.error("is empty", key)
    if len(text) > MAX_LINE and key == "name":
        raise fields.error(f"is {len(text)} characters long; a display name has at most {MAX_LINE}", key)
    if key == "name" and not text.isprintable():
        raise fields.error("holds a line break or a control character", key)
    return text


def check_eval_yaml(data: object, source: Path | str) -> dict:
    """An eval.yaml document checked field by field against the specification: the document, or
    UntrustedInput in one line naming the file and the field (`eval.yaml: tasks[1].split: expected a
    string, got 3`)."""
    top = Fields(data, source).only(TOP_KEYS)
    document = {
        "name": _one_line(top, "name"),
        "description": _one_line(top, "description"),
        "evaluation_framework": top.string("evaluation_framework", pattern=FRAMEWORK),
    }
    listed = top.list("tasks")
    if not listed:
        raise top.error("lists no task", "tasks")
    tasks, seen = [], set()
    for task in top.objects("tasks"):
        task.only(TASK_KEYS)
        entry = {"id": task.string("id")}
        if not entry["id"]:
            raise task.error("is empty", "id")
        if entry["id"] in seen:
            raise task.error(f"{printable(entry['id'])!r} is the id of an earlier task; ids are unique", "id")
        seen.add(entry["id"])
        for key in ("config", "split"):
            if key in task.data:
                entry[key] = task.string(key)
        tasks.append(entry)
    document["tasks"] = tasks
    return document


def read_eval_yaml(path: Path) -> dict:
    """A release's eval.yaml read and checked (`check_eval_yaml`), or one line naming the problem."""
    return check_eval_yaml(read_yaml(Path(path), EVAL_YAML), EVAL_YAML)


def release_problems(document: dict, release: Mapping) -> list[str]:
    """What a checked eval.yaml gets wrong about the release `_release.json` records (`release`): its
    framework, a task of a config or split the release lacks, a config/split without its task, an id
    other than the one `hsi eval`'s results name. One line each."""
    configs = release.get("configs") or {}
    default = release.get("default_config")
    problems = []
    framework = document["evaluation_framework"]
    if framework != EVALUATION_FRAMEWORK:
        problems.append(f"{EVAL_YAML}: evaluation_framework is {framework!r}, not {EVALUATION_FRAMEWORK!r}")
    covered = set()
    for n, task in enumerate(document["tasks"]):
        where = f"{EVAL_YAML}: tasks[{n}]"
        config = task.get("config", default)
        split = task.get("split", DEFAULT_SPLIT)
        if config == PARTS_CONFIG:
            problems.append(f"{where}: config {PARTS_CONFIG!r} holds the parts, not a benchmark task")
            continue
        if config not in configs:
            problems.append(f"{where}: config {printable(str(config))!r} is not a config of the release")
            continue
        if split not in configs[config]["splits"]:
            problems.append(f"{where}: {config} has no split {printable(split)!r}")
            continue
        if (config, split) in covered:
            problems.append(f"{where}: a second task of {config}/{split}")
            continue
        covered.add((config, split))
        if task["id"] != task_id(config, split):
            problems.append(
                f"{where}: id {printable(task['id'])!r} is not {task_id(config, split)!r}, the task_id "
                "hsi eval's .eval_results files name"
            )
    for config, split in release_tasks(configs, default):
        if (config, split) not in covered:
            problems.append(f"{EVAL_YAML}: no task for {config}/{split}")
    return problems


def eval_yaml_problems(path: Path | None, release: Mapping) -> list[str]:
    """`hsi verify`'s eval.yaml check: the file at `path` (None: the revision has none) read per the
    specification and compared with the release. One line each."""
    if path is None:
        return [f"{EVAL_YAML}: missing; the release is no Hub benchmark (rebuild it with hsi release)"]
    try:
        document = read_eval_yaml(path)
    except UntrustedInput as exc:  # named as the release's file, not by a cache path
        return [str(exc).replace(printable(str(path)), EVAL_YAML, 1)]
    return release_problems(document, release)


__all__ = [
    "EVALUATION_FRAMEWORK",
    "EVAL_YAML",
    "benchmark_document",
    "check_eval_yaml",
    "default_description",
    "default_name",
    "eval_yaml_problems",
    "eval_yaml_text",
    "read_eval_yaml",
    "release_problems",
    "release_tasks",
]
