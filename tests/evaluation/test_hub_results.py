"""`.eval_results/<benchmark>.yaml` (evaluation.ranking.hub_results), field by field against the Hub's
specification (huggingface/hub-docs docs/hub/eval-results.md and eval_results.yaml): a list of
results, each `dataset` (`id`, `task_id`, optional `revision`, a commit hash), `value`, and the
optional `source` (`url` required, then `name`, `user`, `org`) pointing to the entry when it says
where it is published, and `notes`; no `verifyToken` (only the Hub's jobs issue one), and its figures
those of entry.json."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import yaml
from release_factory import make_composed_dataset

from builder.core.errors import UsageError
from cards.hub_benchmark import EVAL_YAML, read_eval_yaml
from cards.release import build_release
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.ranking.hub_results import eval_results, eval_results_text, hub_dataset, report_results_file, task_id

COMMIT = "5503434ddd753f426f4b38109466949a1217c2bb"
SPEC_RESULT_KEYS = {"dataset", "value", "verifyToken", "date", "source", "notes"}
SPEC_DATASET_KEYS = {"id", "task_id", "revision"}
SPEC_SOURCE_KEYS = {"url", "name", "user", "org"}


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    import hsi

    root = tmp_path_factory.mktemp("hub_results")
    release = build_release(
        root / "rel" / "hard-spurious-imagenet",
        [make_composed_dataset(root / "composed", splits={"test": 12}, shard_size=4)],
        version="v1.0.0",
    )
    keys = [f"test_{i:06d}" for i in range(12)]
    predictions = root / "predictions.csv"
    pd.DataFrame({"key": keys, "pred_class": [i * 7 % 1000 if i % 3 else 5 for i in range(12)]}).to_csv(
        predictions, index=False
    )
    out = hsi.score(predictions, release, bootstrap=BootstrapSettings(resamples=50)).save(root / "eval")
    return release, json.loads((out / "entry.json").read_text()), json.loads((out / "eval.json").read_text())


def on_hub(entry: dict, source: str) -> dict:
    moved = copy.deepcopy(entry)
    moved["data"]["source"] = source
    return moved


def test_a_local_evaluation_gets_no_results_file(scored):
    release, entry, report = scored
    assert eval_results(entry) is None and report_results_file(report) is None
    assert not (release.parent.parent / "eval" / ".eval_results").exists()


def test_the_result_is_the_specifications_fields_with_the_entrys_figures(scored):
    release, entry, _ = scored
    [result] = eval_results(on_hub(entry, f"hf://datasets/lab/hsi@{COMMIT}"))
    assert set(result) <= SPEC_RESULT_KEYS and {"dataset", "value"} <= set(result)
    assert "verifyToken" not in result and "source" not in result
    assert set(result["dataset"]) <= SPEC_DATASET_KEYS
    assert result["dataset"] == {"id": "lab/hsi", "task_id": "hard-spurious-imagenet/test", "revision": COMMIT}
    figures = entry["figures"]
    assert result["value"] == figures["worst_group"]["value"]
    notes = result["notes"]
    assert isinstance(notes, str) and "\n" not in notes
    assert f"worst-group top-1 (group {figures['worst_group']['group']})" in notes
    assert f"mean over groups {figures['mean_over_groups']['value']:.4f}" in notes
    for row in figures["by_group"]:
        assert f"{row['group']} {row['top1']['value']:.4f}" in notes
    # the task it names is one the release's eval.yaml defines
    tasks = read_eval_yaml(release / EVAL_YAML)["tasks"]
    assert result["dataset"]["task_id"] in {t["id"] for t in tasks}
    assert task_id(entry["data"]["config"], entry["data"]["split"]) == result["dataset"]["task_id"]
    text = eval_results_text([result])
    assert yaml.safe_load(text) == [result] and text == eval_results_text(yaml.safe_load(text))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("hf://datasets/lab/hsi", ("lab/hsi", None)),
        ("hf://datasets/lab/hsi@v1.0.0", ("lab/hsi", "v1.0.0")),
        ("hf://datasets/lab/hsi@refs%2Fpr%2F1/data", ("lab/hsi", "refs/pr/1")),
        ("hsi-release", None),
        ("hf://models/lab/hsi", None),
        ("https://example.org/x", None),
    ],
)
def test_only_a_hub_dataset_source_names_a_benchmark(source, expected):
    assert hub_dataset(source) == expected


def test_the_source_points_to_the_entry_only_where_it_says_it_is_published(scored, tmp_path):
    import hsi

    release, entry, _ = scored
    url = "https://huggingface.co/lab/resnet/blob/main/entry.json"
    [result] = eval_results(on_hub(entry | {"url": url}, "hf://datasets/lab/hsi"))
    assert list(result) == ["dataset", "value", "source", "notes"]  # the specification's order
    assert set(result["source"]) <= SPEC_SOURCE_KEYS and result["source"]["url"] == url
    assert result["source"]["name"] == f"hard-spurious-imagenet leaderboard entry: {entry['name']}"
    # an entry that says nothing of where it is published gets no source (its url is required)
    assert entry["url"] is None and "source" not in eval_results(on_hub(entry, "hf://datasets/lab/hsi"))[0]
    # an older entry, written before `url` existed, still reads
    from evaluation.ranking.entries import check_entry, entry_text

    older = {key: value for key, value in entry.items() if key != "url"}
    assert "url" not in check_entry(json.loads(entry_text(older)), "entry.json")
    csv = tmp_path / "predictions.csv"
    pd.DataFrame({"key": [f"test_{i:06d}" for i in range(12)], "pred_class": [5] * 12}).to_csv(csv, index=False)
    evaluation = hsi.score(csv, release, bootstrap=BootstrapSettings(resamples=20))
    with pytest.raises(
        UsageError, match="Evaluation.save: entry_url: 'ftp://lab/entry.json' is not an http\\(s\\) link; give its"
    ):
        evaluation.save(tmp_path / "x", entry_url="ftp://lab/entry.json")
    assert not (tmp_path / "x").exists()


def test_partial_or_limited_evaluations_get_no_results_file(scored):
    _, entry, _ = scored
    for change in ({"partial": True}, {"limit": 5}, {"config": None}):
        moved = on_hub(entry, "hf://datasets/lab/hsi")
        moved["data"].update(change)
        assert eval_results(moved) is None
    ungrouped = on_hub(entry, "hf://datasets/lab/hsi")
    ungrouped["figures"]["worst_group"] = None
    assert eval_results(ungrouped) is None
