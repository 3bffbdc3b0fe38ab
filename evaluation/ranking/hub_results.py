"""The Hub's evaluation-results file of one model: `.eval_results/<benchmark>.yaml` beside entry.json.

The Hugging Face Hub collects a benchmark's leaderboard from YAML files in the `.eval_results/`
folder of model repos. The format followed here is the Hub's own specification, read in
huggingface/hub-docs at commit 242f4a1eeb867daf4ac3f44026a5df4a68908a3d:

- `docs/hub/eval-results.md` ("Adding Evaluation Results"; https://huggingface.co/docs/hub/eval-results)
- `eval_results.yaml` at that repository's root (the field-by-field specification it links to)

A file is a YAML list of results; each result is

    dataset:                 required
      id: ORG/NAME           required: the Hub dataset id of the benchmark (it must be a Benchmark)
      task_id: ...           required: the id of a task of the dataset's eval.yaml
      revision: <hash>       optional: the dataset revision (a commit hash)
    value: 0.412             required: the metric value
    verifyToken: ...         optional: a signature proving the run (the Hub's jobs issue it)
    date: "2025-01-15"       optional: ISO-8601, a string
    source: {url, name, user, org}   optional: attribution; `url` required when source is given
    notes: "..."             optional: details of the evaluation setup

The specification has no field naming the metric: a task's leaderboard ranks one number per model.
This toolkit's task for a config and split (`task_id`, shared with `cards.hub_benchmark`, which
writes the release's eval.yaml) is ranked by the worst-group top-1; the mean over groups and each
group's top-1 are stated in `notes`, so the leaderboard never mixes two metrics under one task.

The file is written only for what a leaderboard can take: data read from the Hub
(`hf://datasets/ORG/NAME[@REVISION]`, which gives `dataset.id`; a local folder has no Hub id, and
none is guessed), a config with groups, and every sample scored (no `--limit`, no partial run).
`revision` is written only when the source names a commit hash, as the specification asks; a tag
or branch is stated in `notes`. `verifyToken` is never written: only the Hub's own jobs issue one.
`source` points to the entry: its `url` is where the model's owner publishes entry.json, which only
they know, so it is written when the entry says (`hsi eval --entry-url URL`, the entry's `url`), with
`name` naming the file; without it, `source` is left out rather than given a link that is not public.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from builder import __version__

EVAL_RESULTS_DIR = ".eval_results"
HEADLINE = "worst-group top-1"
ENTRY_SOURCE_NAME = "hard-spurious-imagenet leaderboard entry"  # the `source.name` of a result
# hf://datasets/ORG/NAME[@REVISION][/path]: huggingface_hub's HfFileSystem address of a dataset repo
HUB_DATASET = re.compile(r"hf://datasets/([A-Za-z0-9][\w.-]*)/([A-Za-z0-9][\w.-]*)(?:@([^/]+))?(?:/.*)?")
COMMIT = re.compile(r"[0-9a-f]{40}")


def task_id(config: str, split: str) -> str:
    """The benchmark task of one config and split: `CONFIG/SPLIT` (a config name holds no `/`, so the
    id names exactly one pair)."""
    return f"{config}/{split}"


def hub_dataset(source: str) -> tuple[str, str | None] | None:
    """(repo id, revision or None) of an `hf://datasets/...` data source, None for any other source."""
    match = HUB_DATASET.fullmatch(str(source))
    if match is None:
        return None
    org, name, revision = match.groups()
    return f"{org}/{name}", unquote(revision) if revision else None


def results_file(source: str, config: str | None, partial: bool, limit: int | None, grouped: bool) -> str | None:
    """The model-folder path of the evaluation-results file an evaluation of this data gets, or None
    when it gets none (see the module docstring)."""
    hub = hub_dataset(source)
    if hub is None or config is None or partial or limit is not None or not grouped:
        return None
    return f"{EVAL_RESULTS_DIR}/{hub[0].split('/')[1]}.yaml"


def report_results_file(report: dict) -> str | None:
    """`results_file` of an eval.json payload."""
    data = report["data"]
    worst = ((report.get("metrics") or {}).get("groups_summary") or {}).get("worst_group")
    return results_file(data["source"], data.get("config"), bool(data.get("partial")), data.get("limit"), bool(worst))


def entry_results_file(entry: dict) -> str | None:
    """`results_file` of a leaderboard entry (entry.json)."""
    data = entry["data"]
    grouped = bool(entry["figures"].get("worst_group"))
    return results_file(data["source"], data.get("config"), bool(data.get("partial")), data.get("limit"), grouped)


def _figure(value: float) -> str:
    return f"{value:.4f}"


def results_notes(entry: dict, revision: str | None) -> str:
    """The `notes` of the result: what the value is, and the other headline figures beside it."""
    figures, data = entry["figures"], entry["data"]
    worst = figures["worst_group"]
    parts = [f"value: {HEADLINE} (group {worst['group']})"]
    if figures.get("mean_over_groups"):
        parts.append(f"mean over groups {_figure(figures['mean_over_groups']['value'])}")
    by_group = [
        f"{row['group']} {_figure(row['top1']['value'])}" for row in figures.get("by_group") or [] if row["top1"]
    ]
    if by_group:
        parts.append("top-1 by group: " + ", ".join(by_group))
    if revision is not None and not COMMIT.fullmatch(revision):
        parts.append(f"data revision {revision}")
    if data.get("num_samples") is not None:
        parts.append(f"{data['num_samples']} samples")
    parts.append(f"preprocessing: {entry['preprocessing']['description']}")
    parts.append(f"scored by hard-spurious-imagenet {data.get('toolkit_version') or __version__} (entry.json)")
    return "; ".join(parts)


def eval_results(entry: dict) -> list[dict] | None:
    """The evaluation-results document of a leaderboard entry (a list of one result), or None when
    the entry's evaluation gets none (`results_file`)."""
    if entry_results_file(entry) is None:
        return None
    data = entry["data"]
    hub = hub_dataset(data["source"])
    assert hub is not None  # entry_results_file checked it
    repo_id, revision = hub
    dataset = {"id": repo_id, "task_id": task_id(data["config"], data["split"])}
    if revision is not None and COMMIT.fullmatch(revision):
        dataset["revision"] = revision
    result: dict = {"dataset": dataset, "value": entry["figures"]["worst_group"]["value"]}
    if entry.get("url"):
        result["source"] = {"url": entry["url"], "name": f"{ENTRY_SOURCE_NAME}: {entry['name']}"}
    result["notes"] = results_notes(entry, revision)
    return [result]


def eval_results_text(document: list[dict]) -> str:
    """The file's bytes: the document as YAML, keys in the specification's order (deterministic)."""
    import yaml

    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=10_000, default_flow_style=False)


__all__ = [
    "EVAL_RESULTS_DIR",
    "HEADLINE",
    "entry_results_file",
    "eval_results",
    "eval_results_text",
    "hub_dataset",
    "report_results_file",
    "results_file",
    "results_notes",
    "task_id",
]
