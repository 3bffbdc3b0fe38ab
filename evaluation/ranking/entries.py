"""Leaderboard entries: one `entry.json` per evaluated model, beside its `predictions.parquet`.

An entry is what a leaderboard lists and what `hsi leaderboard verify` re-scores: who the model is
(a name, its spec, the weights file and its sha256, and what its submitter says of it: architecture,
training data, paper link, each null when not given, never guessed), how it was measured
(preprocessing, label space, the data revision: source, config, split, fingerprint, toolkit
version; the bootstrap settings), the sha256 of the predictions it was scored from, and every
headline figure (`figures`). It is rendered from the eval.json payload and the predictions file
alone, so `hsi eval`, `hsi eval --from`, `hsi eval --predictions` and `hsi.Evaluation.save` write
the same entry for the same predictions.

The schema is versioned (`schema_version`); `read_entry` is the one reader of an entry, which may
come from a stranger (a submission): every field is checked through the untrusted layer, and a
field that is missing, of the wrong kind, out of range or unknown is one line naming the file and
the field.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from builder.core.errors import UsageError, printable
from builder.core.hashing import sha256_file
from builder.core.untrusted import Fields, check_string, read_json, regular_file
from evaluation.model_formats.identity import checked_identity
from evaluation.model_formats.models import DECLARED, PREPROCESSING_STATUSES, UNKNOWN
from evaluation.predicting.predictions import is_utf8

from .hub_results import entry_results_file, eval_results, eval_results_text
from .provenance import PREPROCESSING_KEYS, recorded_preprocessing

ENTRY_JSON = "entry.json"
ENTRY_SCHEMA = "hsi-leaderboard-entry"
ENTRY_SCHEMA_VERSION = 2  # 2: preprocessing.status and .resize (cropped null when not known), model.identity
WHAT = "leaderboard entry"
MAX_TEXT = 300  # a name, an architecture, a training-data line: one line, not an essay
MAX_RESAMPLES = 1_000_000  # what a verification may be asked to redo
SHA256 = re.compile(r"[0-9a-f]{64}")
PAPER = re.compile(r"https?://[^\s<>\"'`]+")  # a link a page can show as a link (no javascript:, no spaces)
# The description a submitter gives: (EntryInfo field, hsi eval flag, models.yaml key).
DESCRIPTION = (
    ("name", "--entry-name", "entry_name"),
    ("architecture", "--architecture", "architecture"),
    ("training_data", "--training-data", "training_data"),
    ("paper", "--paper", "paper"),
    ("url", "--entry-url", "entry_url"),
)
# An entry's preprocessing: what evaluation.ranking.provenance records, less the loader's own words (source).
PREPROCESSING_FIELDS = tuple(key for key in PREPROCESSING_KEYS if key != "source")
PREPROCESSING_FIELDS_V1 = ("description", "cropped", "crop_pct", "input_size", "interpolation", "mean", "std")
# Figures recomputed from the predictions; the others need the model (clean photos).
REPORTED_ONLY = ("clean_top1",)


def check_label(value: object, error) -> str:
    """A label from the run or the data (a spec, a group, a fingerprint): one printable line, short."""
    text = check_string(value, error)
    if len(text) > MAX_TEXT:
        raise error(f"is {len(text)} characters long; at most {MAX_TEXT}")
    if not text.isprintable():
        raise error(f"'{printable(text)[:60]}' holds a line break or a control character; give one line of text")
    return text


def check_text(value: object, error) -> str:
    """A one-line description (a name, an architecture, training data): a label that is not empty."""
    text = check_label(value, error)
    if not text.strip():
        raise error("is empty")
    return text


def check_file_name(value: object, error) -> str:
    """The name of a file beside the entry: never a path (no separator, not `.` or `..`)."""
    text = check_text(value, error)
    if "/" in text or "\\" in text or text in (".", ".."):
        raise error(f"'{printable(text)[:60]}' is a path; an entry names a file beside it")
    return text


def check_link(value: object, error, example: str = "https://arxiv.org/abs/2505.03569") -> str:
    """An http(s) address a page can show as a link (a paper's, or where an entry is published)."""
    text = check_text(value, error)
    if not PAPER.fullmatch(text):
        raise error(f"'{printable(text)[:60]}' is not an http(s) link; give its address, e.g. {example}")
    return text


def check_paper(value: object, error) -> str:
    """A paper link: an http(s) address (https://arxiv.org/abs/..., https://openreview.net/...)."""
    return check_link(value, error)


def check_entry_url(value: object, error) -> str:
    """Where an entry is published: an http(s) address."""
    return check_link(value, error, "https://huggingface.co/ORG/MODEL/blob/main/entry.json")


@dataclass(frozen=True)
class EntryInfo:
    """What a submitter says of a model; None where nothing was said. `name` defaults to the spec."""

    name: str | None = None
    architecture: str | None = None
    training_data: str | None = None
    paper: str | None = None
    url: str | None = None  # where the entry is published: the `source` of the Hub's results file

    def over(self, kept: EntryInfo) -> EntryInfo:
        """This description, field by field, over `kept` (what an earlier entry said)."""
        return EntryInfo(
            **{
                f.name: getattr(self, f.name) if getattr(self, f.name) is not None else getattr(kept, f.name)
                for f in fields(self)
            }
        )

    @classmethod
    def checked(cls, where: str = "", *, by_key: bool = False, **values: Any) -> EntryInfo:
        """From flags (or, `by_key`, keyword arguments and models.yaml keys), each value checked: a
        UsageError naming the flag or key, `where` first."""
        checked = {}
        for name, flag, key in DESCRIPTION:
            value = values.get(name)
            if value is not None:
                named = key if by_key else flag
                check = {"paper": check_paper, "url": check_entry_url}.get(name, check_text)
                checked[name] = check(value, lambda problem, named=named: UsageError(f"{where}{named}: {problem}"))
        return cls(**checked)


def one_line(text: str) -> str:
    """A label from the run or the data as an entry holds it: printable, at most MAX_TEXT characters
    (names in someone's data may hold anything; an entry's reader takes one line)."""
    return printable(str(text))[:MAX_TEXT]


def label(value: object) -> str | None:
    return None if value is None else one_line(str(value))


def info_of(entry: dict) -> EntryInfo:
    """The description of a read entry."""
    model = entry["model"]
    return EntryInfo(entry["name"], model["architecture"], model["training_data"], model["paper"], entry.get("url"))


def carried_info(path: Path, model: dict) -> EntryInfo:
    """The description of the entry at `path` when it is an entry of the same model (`model`: the
    run's spec and checkpoint sha256), kept when the reports are written again; else none. The
    entry is read (and checked) either way, so a broken one is refused before anything is written."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return EntryInfo()
    entry = read_entry(path)
    same = (entry["model"]["spec"], entry["model"]["weights"]["sha256"], entry["model"]["identity"]) == (
        one_line(model["spec"]),
        model.get("checkpoint_sha256"),
        model.get("identity"),
    )
    return info_of(entry) if same else EntryInfo()


def _estimate(estimate: dict | None) -> dict | None:
    if not estimate:
        return None
    return {key: estimate.get(key) for key in ("value", "low", "high", "n", "sources")}


def background_gap_summary(cells: list[dict]) -> dict | None:
    """The background gap's cells (own minus foreign background, same size and position) in three
    numbers: how many cells, the plain mean of their gaps, and the largest gap with its interval."""
    gaps = [cell for cell in cells if cell["gap"].get("value") is not None]
    if not gaps:
        return None
    largest = max(gaps, key=lambda cell: (cell["gap"]["value"], -cell["size"], cell["position"], cell["foreign"]))
    return {
        "cells": len(gaps),
        "mean": round(sum(cell["gap"]["value"] for cell in gaps) / len(gaps), 6),
        "largest": {
            "position": one_line(largest["position"]),
            "size": int(largest["size"]),
            "foreign": one_line(largest["foreign"]),
            **_estimate(largest["gap"]),  # type: ignore[dict-item]
        },
    }


def headline_figures(metrics: dict, clean: dict | None = None) -> dict:
    """Every headline figure of an evaluation from its metrics (and its clean-photo section)."""
    overall = metrics.get("overall") or {}
    has_groups = bool(metrics.get("has_groups"))
    summary = metrics.get("groups_summary") or {}
    worst = summary.get("worst_group")
    background = metrics.get("background_class") if has_groups else None
    return {
        "samples": int(metrics["samples"]),
        "sources": int(metrics["sources"]),
        "error_rows": int(metrics["errors"]["total"]),
        "top1": _estimate(overall.get("top1")),
        "top5": _estimate(overall.get("top5")),
        "by_group": [{"group": one_line(row["group"]), "top1": _estimate(row["top1"])} for row in metrics["by_group"]]
        if has_groups
        else None,
        "mean_over_groups": _estimate(summary.get("mean_over_groups")),
        "worst_group": {"group": one_line(worst["group"]), **_estimate(worst)} if worst else None,  # type: ignore[dict-item]
        "background_gap": background_gap_summary(metrics.get("background_gap") or []) if has_groups else None,
        "background_class": {
            "errors": int(background["overall"]["errors"]),
            "share_of_errors": _estimate(background["overall"]["share_of_errors"]),
            "expected_share_of_errors": background["overall"]["expected_share_of_errors"],
            "chance_share_of_errors": background["chance_share_of_errors"],
        }
        if background
        else None,
        "clean_top1": _estimate((clean or {}).get("top1")),
    }


def build_entry(report: dict, predictions: Path, info: EntryInfo) -> dict:
    """The entry of the evaluation `report` (an eval.json payload) scored from `predictions`."""
    model, data, metrics = report["model"], report["data"], report["metrics"]
    pre = recorded_preprocessing(report["preprocessing"], model["spec"])
    boot = metrics["bootstrap"]
    return {
        "schema": ENTRY_SCHEMA,
        "schema_version": ENTRY_SCHEMA_VERSION,
        "name": info.name if info.name is not None else one_line(model["spec"]),
        "url": info.url,
        "model": {
            "spec": one_line(model["spec"]),
            "weights": {
                "file": one_line(model["checkpoint"]) if model.get("checkpoint") else None,
                "sha256": model.get("checkpoint_sha256"),
            },
            "identity": model.get("identity"),  # an in-memory model's; None for a spec (its weights say it)
            "architecture": info.architecture,
            "training_data": info.training_data,
            "paper": info.paper,
        },
        "preprocessing": {key: pre[key] for key in PREPROCESSING_FIELDS},
        "label_space": {key: report["label_space"][key] for key in ("name", "classes", "description")},
        "data": {
            "source": one_line(data["source"]),
            "config": label(data.get("config")),
            "split": one_line(data["split"]),
            "fingerprint": label(data.get("fingerprint")),
            "num_samples": data.get("num_samples"),
            "limit": data.get("limit"),
            "partial": bool(data.get("partial")),
            "verified": label(data.get("verified")),
            "toolkit_version": label((report.get("toolkit") or {}).get("version")),
        },
        "predictions": {"file": one_line(Path(predictions).name), "sha256": sha256_file(Path(predictions))},
        "bootstrap": {"resamples": boot["resamples"], "seed": boot["seed"], "level": boot["level"]},
        "figures": headline_figures(metrics, report.get("clean")),
    }


def entry_text(entry: dict) -> str:
    return json.dumps(entry, indent=2, sort_keys=True, allow_nan=False) + "\n"


def checked_entry(report: dict, predictions: Path, info: EntryInfo) -> dict:
    """The entry of `report`, refused (one line) when its reader would refuse it."""
    entry = build_entry(report, predictions, info)
    check_entry(json.loads(entry_text(entry)), ENTRY_JSON)
    return entry


def write_entry(folder, report: dict, predictions: Path, info: EntryInfo) -> dict:
    """entry.json of `report` into `folder` (a ModelFolder or a PlainFolder: through its writes), and
    beside it the Hub's evaluation-results file of the same figures when the data came from the Hub
    (evaluation.ranking.hub_results: `.eval_results/<benchmark>.yaml`, for the model's owner to copy)."""
    entry = checked_entry(report, predictions, info)  # never write an entry the reader would refuse
    folder.write_text(ENTRY_JSON, entry_text(entry))
    results = eval_results(entry)
    path = entry_results_file(entry)
    if results is not None and path is not None:
        folder.write_text(path, eval_results_text(results))
    return entry


# --- reading ---------------------------------------------------------------------------------------


def _nullable(fields: Fields, key: str) -> bool:
    """Whether `key` holds a value (a key present as null is fine; a missing key is refused)."""
    fields.raw(key)  # missing: one line naming the field
    return fields.data[key] is not None


def _text(fields: Fields, key: str, *, nullable: bool = True, check=check_text) -> str | None:
    if nullable and not _nullable(fields, key):
        return None
    return check(fields.raw(key), lambda problem: fields.error(problem, key))


def _checked_estimate(fields: Fields, key: str, *, low: float = 0.0, high: float = 1.0) -> None:
    """A {value, low, high, n, sources} estimate, or null."""
    if not _nullable(fields, key):
        return
    _estimate_fields(fields.object(key).only(("value", "low", "high", "n", "sources")), low=low, high=high)


def _estimate_fields(estimate: Fields, *, low: float, high: float) -> None:
    for name in ("value", "low", "high"):
        if _nullable(estimate, name):
            estimate.number(name, low=low, high=high)
    if (estimate.data["low"] is None) != (estimate.data["high"] is None):
        raise estimate.error("low and high come together (both numbers, or both null)")
    estimate.integer("n", low=0)
    estimate.integer("sources", low=0)


def _check_model(model: Fields, version: int) -> None:
    keys = ("spec", "weights", "architecture", "training_data", "paper")
    model.only((*keys, "identity") if version >= 2 else keys)
    _text(model, "spec", nullable=False, check=check_label)
    if version >= 2 and _nullable(model, "identity"):
        checked_identity(model)
    weights = model.object("weights").only(("file", "sha256"))
    _text(weights, "file", check=check_label)
    if _nullable(weights, "sha256"):
        weights.string("sha256", pattern=SHA256)
    _text(model, "architecture")
    _text(model, "training_data")
    _text(model, "paper", check=check_paper)


def _numbers(fields: Fields, key: str, count: int, *, low: float | None = None) -> None:
    if not _nullable(fields, key):
        return
    values = fields.list(key)
    if len(values) != count:
        raise fields.error(f"holds {len(values)} values; expected {count}", key)
    for n, value in enumerate(values):
        item = Fields({f"{key}[{n}]": value}, fields.source, fields.where)
        if key == "input_size":
            item.integer(f"{key}[{n}]", low=1)
        else:
            item.number(f"{key}[{n}]", low=low)


def _check_preprocessing(pre: Fields, version: int) -> None:
    """The preprocessing an entry claims: in version 1 always a boolean crop; from version 2 its
    status, and nothing but the description when it is unknown."""
    pre.only(PREPROCESSING_FIELDS if version >= 2 else PREPROCESSING_FIELDS_V1)
    pre.string("description")
    status = pre.string("status", choices=PREPROCESSING_STATUSES) if version >= 2 else None
    if status == UNKNOWN:
        claimed = [key for key in PREPROCESSING_FIELDS if key not in ("status", "description") and _nullable(pre, key)]
        if claimed:
            raise pre.error(f"claims {claimed[0]} of a preprocessing whose status is unknown; an unknown one is null")
        return
    cropped = pre.boolean("cropped") if status != DECLARED or _nullable(pre, "cropped") else None
    if cropped or _nullable(pre, "crop_pct"):
        pre.number("crop_pct", low=0, high=1)
    if version >= 2 and _nullable(pre, "resize"):
        pre.integer("resize", low=1)
    _numbers(pre, "input_size", 2)
    if _nullable(pre, "interpolation"):
        pre.string("interpolation")
    _numbers(pre, "mean", 3)
    _numbers(pre, "std", 3, low=0)


def _check_data(data: Fields) -> None:
    data.only(
        ("source", "config", "split", "fingerprint", "num_samples", "limit", "partial", "verified", "toolkit_version")
    )
    _text(data, "source", nullable=False, check=check_label)
    for key in ("config", "fingerprint", "verified", "toolkit_version"):
        _text(data, key, check=check_label)
    _text(data, "split", nullable=False, check=check_label)
    if _nullable(data, "num_samples"):
        data.integer("num_samples", low=0)
    if _nullable(data, "limit"):
        data.integer("limit", low=1)
    data.boolean("partial")


def _check_bootstrap(boot: Fields) -> None:
    boot.only(("resamples", "seed", "level"))
    boot.integer("resamples", low=1, high=MAX_RESAMPLES)
    boot.integer("seed", low=0, high=2**63 - 1)
    level = boot.number("level")
    if not 0 < level < 1:
        raise boot.error(f"{level} is not a confidence level between 0 and 1", "level")


def _check_figures(figures: Fields) -> None:
    figures.only(
        (
            "samples",
            "sources",
            "error_rows",
            "top1",
            "top5",
            "by_group",
            "mean_over_groups",
            "worst_group",
            "background_gap",
            "background_class",
            "clean_top1",
        )
    )
    for key in ("samples", "sources", "error_rows"):
        figures.integer(key, low=0)
    for key in ("top1", "top5", "mean_over_groups", "clean_top1"):
        _checked_estimate(figures, key)
    if _nullable(figures, "by_group"):
        seen = set()
        for row in figures.objects("by_group"):
            row.only(("group", "top1"))
            group = _text(row, "group", nullable=False, check=check_label)
            if group in seen:
                raise row.error(f"group '{printable(str(group))}' is listed twice", "group")
            seen.add(group)
            _checked_estimate(row, "top1")
    if _nullable(figures, "worst_group"):
        worst = figures.object("worst_group").only(("group", "value", "low", "high", "n", "sources"))
        _text(worst, "group", nullable=False, check=check_label)
        _estimate_fields(worst, low=0.0, high=1.0)
    if _nullable(figures, "background_gap"):
        gap = figures.object("background_gap").only(("cells", "mean", "largest"))
        gap.integer("cells", low=1)
        gap.number("mean", low=-1, high=1)
        largest = gap.object("largest").only(("position", "size", "foreign", "value", "low", "high", "n", "sources"))
        _text(largest, "position", nullable=False, check=check_label)
        largest.integer("size", low=1)
        _text(largest, "foreign", nullable=False, check=check_label)
        _estimate_fields(largest, low=-1.0, high=1.0)
    if _nullable(figures, "background_class"):
        background = figures.object("background_class").only(
            ("errors", "share_of_errors", "expected_share_of_errors", "chance_share_of_errors")
        )
        background.integer("errors", low=0)
        _checked_estimate(background, "share_of_errors")
        if _nullable(background, "expected_share_of_errors"):
            background.number("expected_share_of_errors", low=0, high=1)
        background.number("chance_share_of_errors", low=0, high=1)


def read_entry(path: Path) -> dict:
    """An entry.json, every field checked: the entry as a dict, or UntrustedInput in one line naming
    the file and the field (`entry.json: figures.top1.value: 1.5 is above the largest allowed value 1`)."""
    path = Path(path)
    return check_entry(read_json(path, WHAT), path)


def check_entry(entry: object, source: Path | str) -> dict:
    """An entry's parsed JSON, every field checked (UntrustedInput naming `source` and the field)."""
    top = Fields(entry, source)
    if not is_utf8(entry):
        raise top.error("holds text that is not UTF-8 (an escaped lone surrogate)")
    version = top.integer("schema_version", low=1)
    if version > ENTRY_SCHEMA_VERSION:
        raise top.error(
            f"{version} is newer than this toolkit reads ({ENTRY_SCHEMA_VERSION}): upgrade hard-spurious-imagenet",
            "schema_version",
        )
    top.string("schema", choices=(ENTRY_SCHEMA,))
    top.only(
        (
            "schema",
            "schema_version",
            "name",
            "url",
            "model",
            "preprocessing",
            "label_space",
            "data",
            "predictions",
            "bootstrap",
            "figures",
        )
    )
    _text(top, "name", nullable=False)
    if top.has("url"):  # entries written before the field existed have none
        _text(top, "url", check=check_entry_url)
    _check_model(top.object("model"), version)
    _check_preprocessing(top.object("preprocessing"), version)
    space = top.object("label_space").only(("name", "classes", "description"))
    space.string("name")
    space.integer("classes", low=1, high=1000)
    space.string("description")
    _check_data(top.object("data"))
    predictions = top.object("predictions").only(("file", "sha256"))
    _text(predictions, "file", nullable=False, check=check_file_name)
    predictions.string("sha256", pattern=SHA256)
    _check_bootstrap(top.object("bootstrap"))
    _check_figures(top.object("figures"))
    checked = dict(top.data)
    checked["model"] = {"identity": None, **checked["model"]}  # version 1: no in-memory identity recorded
    # read alike whatever its version: the preprocessing with its status (provenance's one rule)
    pre = recorded_preprocessing(checked["preprocessing"], checked["model"]["spec"])
    checked["preprocessing"] = {key: pre[key] for key in PREPROCESSING_FIELDS}
    return checked


def entry_path(path: Path) -> Path:
    """ENTRY as given to `hsi leaderboard verify`: an entry.json, or the folder holding one."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        path = path / ENTRY_JSON
    return regular_file(path, WHAT)


def same_number(a: object, b: object, tolerance: float = 1e-6) -> bool:
    """Figures are rounded to 6 decimals: two that agree within the rounding step are the same."""
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return math.isclose(a, b, rel_tol=0.0, abs_tol=tolerance)


__all__ = [
    "ENTRY_JSON",
    "ENTRY_SCHEMA",
    "ENTRY_SCHEMA_VERSION",
    "EntryInfo",
    "REPORTED_ONLY",
    "build_entry",
    "carried_info",
    "entry_path",
    "headline_figures",
    "read_entry",
    "write_entry",
]
