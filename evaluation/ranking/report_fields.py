"""The fields of an eval.json, each with its one rule: what every reader of an evaluation folder
reads of it, checked by `eval_reader.checked_report` when the folder is read.

An eval.json may come from a stranger (a results folder handed to `hsi release --results` or `hsi
report`), so every value a reader uses is read here through `Fields`: the leaderboard's row and
skip check, the site's pages (tiers, positions, gaps, controls, the background-class analysis, the
clean photos and the backgrounds alone), the card's results section. A wrong type or a value out
of its range is one line naming the file and the field, and the readers render only from the
plain dicts returned (`checked_run`, `checked_metrics`), never from a value that was not checked.
Fields `hsi eval` has always written but older or hand-made reports may lack (`data.source`,
`metrics.samples`, the preprocessing's input size) are checked when present.
"""

from __future__ import annotations

import re
from pathlib import Path

from builder.core.errors import HsiError
from builder.core.names import check_config_name, check_path_component
from builder.core.untrusted import Fields, check_integer, check_string
from evaluation.model_formats.identity import checked_identity
from evaluation.model_formats.models import APPLIED, PREPROCESSING_STATUSES, UNKNOWN

from .provenance import preprocessing_status, recorded_preprocessing

SHA256 = re.compile(r"[0-9a-f]{64}")


def estimate(
    fields: Fields, key: str, required: bool = False, *, low: float | None = None, high: float | None = None
) -> dict | None:
    """{value, low, high, n} (each may be None; low and high come together), or None when the
    estimate is absent and not `required`; `low` and `high` bound its three numbers."""
    if not required and not fields.has(key):
        return None
    cell = fields.object(key)
    checked = {
        "value": cell.number("value", None, low=low, high=high),
        "low": cell.number("low", None, low=low, high=high),
        "high": cell.number("high", None, low=low, high=high),
        "n": cell.integer("n", None, low=0),
    }
    if (checked["low"] is None) != (checked["high"] is None):
        raise cell.error("low and high come together (both numbers, or both null)")
    return checked


def _cells(
    metrics: Fields, key: str, labels: dict[str, str], estimates: tuple[str, ...], numbers=(), required=False
) -> list[dict]:
    """The rows of a list section: each label field as its kind ("text" or "size"), each estimate,
    each plain number (a rate without interval). `required`: the section and each row's estimates."""
    rows = []
    for cell in metrics.objects(key) if required else metrics.objects(key, []):
        row: dict = {}
        for name, kind in labels.items():
            row[name] = cell.integer(name, low=0) if kind == "size" else cell.string(name)
        for name in estimates:
            row[name] = estimate(cell, name, required=required and name == estimates[0])
        for name in numbers:
            row[name] = cell.number(name, None)
        rows.append(row)
    return rows


def _background_class_cell(cell: Fields) -> dict:
    return {
        "samples": cell.integer("samples", low=0),
        "errors": cell.integer("errors", low=0),
        "share_of_predictions": estimate(cell, "share_of_predictions"),
        "share_of_errors": estimate(cell, "share_of_errors"),
        "expected_share_of_errors": cell.number("expected_share_of_errors", None),
        "mean_prob_background_class": cell.number("mean_prob_background_class", None),
    }


def _background_class(metrics: Fields) -> dict | None:
    if not metrics.has("background_class"):
        return None
    section = metrics.object("background_class")
    return {
        "samples": section.string("samples"),
        "control": section.string("control"),
        "control_errors": section.string("control_errors", None),
        "chance_share_of_errors": section.number("chance_share_of_errors", None),
        "overall": _background_class_cell(section.object("overall")),
        "by_group_size": [
            {"group": cell.string("group"), "size": cell.integer("size", low=0), **_background_class_cell(cell)}
            for cell in section.objects("by_group_size", [])
        ],
    }


def _file_name(section: Fields) -> str:
    """The file beside eval.json a section names (its per-class table): a name, never a path."""
    name = section.string("file")
    try:
        check_path_component(name, "file")
    except HsiError as exc:
        raise section.error(str(exc), "file") from None
    return name


def _error_rows(section: Fields) -> list[dict]:
    return [{"key": row.string("key"), "detail": row.string("detail")} for row in section.objects("errors", [])]


def _clean(top: Fields) -> dict | None:
    """The clean-photo section (`hsi eval --clean`): top-1 on the original photos of the same
    source images and its drop to each group, accuracies in [0, 1] and drops in [-1, 1]."""
    if not top.has("clean"):
        return None
    section = top.object("clean")
    return {
        "images": section.integer("images", low=0),
        "top1": estimate(section, "top1", required=True, low=0, high=1),
        "drop_by_group": [
            {"group": row.string("group"), "drop": estimate(row, "drop", required=True, low=-1, high=1)}
            for row in section.objects("drop_by_group")
        ],
        "missing": section.integer("missing", 0, low=0),
        "errors": _error_rows(section),
        "file": _file_name(section),
        "preprocessing": section.string("preprocessing"),
    }


def _background_only(top: Fields) -> dict | None:
    """The backgrounds-alone section (`hsi eval --parts`): top-1 on the inpainted backgrounds with
    the object erased (no interval: the pass counts each background once)."""
    if not top.has("background_only"):
        return None
    section = top.object("background_only")
    return {
        "images": section.integer("images", low=0),
        "top1": section.number("top1", low=0, high=1),
        "classes": section.integer("classes", None, low=0),
        "errors": _error_rows(section),
        "file": _file_name(section),
    }


def checked_model_only(report: dict, where: Path) -> dict:
    """{clean, background_only}: the sections only the model could compute, each checked (None when
    the evaluation has none)."""
    top = Fields(report, where)
    return {"clean": _clean(top), "background_only": _background_only(top)}


def checked_metrics(report: dict, where: Path) -> dict:
    """The metrics of an eval.json, checked field by field (UntrustedInput otherwise), with the
    model-only sections (`checked_model_only`)."""
    metrics = Fields(report, where).object("metrics")
    errors = metrics.object("errors", None)
    by_reason = errors.object("by_reason", None)
    bootstrap = metrics.object("bootstrap", None)
    overall = metrics.object("overall", None)
    top1_required = metrics.has("overall")  # an overall section states its top-1
    checked: dict = {
        "samples": metrics.integer("samples", None, low=0),
        "sources": metrics.integer("sources", None, low=0),
        "errors": {
            "total": errors.integer("total", 0, low=0),
            "by_reason": {str(k): by_reason.integer(k, low=0) for k in sorted(by_reason.data)},
        },
        "bootstrap": {
            "level": bootstrap.number("level", None, low=0, high=1),
            "resamples": bootstrap.integer("resamples", None, low=0),
            "seed": bootstrap.integer("seed", None),
        },
        "overall": {"top1": estimate(overall, "top1", required=top1_required), "top5": estimate(overall, "top5")},
        "has_groups": metrics.boolean("has_groups", False),
        "notes": [
            check_string(note, lambda problem, n=n: metrics.error(problem, f"notes[{n}]"))
            for n, note in enumerate(metrics.list("notes", []))
        ],
        **checked_model_only(report, where),
    }
    if not checked["has_groups"]:
        return checked
    summary = metrics.object("groups_summary")
    top = ("top1", "top5")
    checked.update(
        groups=[
            check_string(g, lambda problem, n=n: summary.error(problem, f"groups[{n}]"))
            for n, g in enumerate(summary.list("groups", []))
        ],
        mean_over_groups=estimate(summary, "mean_over_groups", required=True),
        worst_group={
            "group": summary.object("worst_group").string("group"),
            **(estimate(summary, "worst_group", required=True) or {}),
        },
        by_group=_cells(metrics, "by_group", {"group": "text"}, top, required=True),
        by_group_size=_cells(metrics, "by_group_size", {"group": "text", "size": "size"}, top),
        by_size=_cells(metrics, "by_size", {"size": "size"}, top),
        by_tier=_cells(metrics, "by_tier", {"tier": "text"}, top),
        by_position_size=_cells(metrics, "by_position_size", {"position": "text", "size": "size"}, top),
        by_background=_cells(metrics, "by_background", {"background": "text"}, top),
        background_gap=_cells(
            metrics,
            "background_gap",
            {"position": "text", "size": "size", "foreign": "text"},
            ("gap",),
            ("own_top1", "foreign_top1"),
        ),
        neutral_controls=_cells(
            metrics,
            "neutral_controls",
            {"position": "text", "size": "size", "control": "text", "foreign": "text"},
            ("difference",),
            ("control_top1", "foreign_top1"),
        ),
        background_class=_background_class(metrics),
    )
    return checked


def _config(data: Fields) -> str | None:
    """The data's config: a name the toolkit's manifests allow (it names folders of a release)."""
    config = data.string("config", None)
    if config is not None:
        try:
            check_config_name(config)
        except HsiError as exc:
            raise data.error(str(exc), "config") from None
    return config


def _input_size(pre: Fields) -> list[int] | None:
    if not pre.has("input_size"):
        return None
    size = pre.list("input_size")
    if len(size) != 2:
        raise pre.error(f"expected [height, width], got {len(size)} values", "input_size")
    for n, side in enumerate(size):
        check_integer(side, lambda problem, n=n: pre.error(problem, f"input_size[{n}]"), low=1)
    return list(size)


def _preprocessing(pre: Fields, spec: str) -> dict:
    """The preprocessing as a page shows it: its status (evaluation.ranking.provenance's rule) and
    the fields it claims; an unknown one claims none (an older file's `cropped: false` included)."""
    recorded_status = pre.string("status", None, choices=PREPROCESSING_STATUSES)
    status = preprocessing_status({"status": recorded_status}, spec)
    if status == UNKNOWN:  # nothing but its status and its words
        recorded = recorded_preprocessing({"status": recorded_status, "description": pre.string("description")}, spec)
        return {"preprocessing": recorded["description"], "preprocessing_status": status} | dict.fromkeys(
            ("cropped", "crop_pct", "input_size", "interpolation")
        )
    cropped = pre.raw("cropped", None)
    if status == APPLIED or cropped is not None:  # a declaration may leave the crop undeclared
        cropped = pre.boolean("cropped", False)
    return {
        "preprocessing": pre.string("description", None),
        "preprocessing_status": status,
        "cropped": cropped,
        "crop_pct": pre.number("crop_pct", None, low=0, high=1),
        "input_size": _input_size(pre),
        "interpolation": pre.string("interpolation", None),
    }


def is_partial(report: dict) -> bool:
    """A `--limit` run over fewer samples than the split holds (older reports say only `limit`: any
    `--limit` run)."""
    data = report["data"]
    partial = data.get("partial")
    return bool(partial) if partial is not None else data.get("limit") is not None


def checked_run(report: dict, where: Path) -> dict:
    """What an eval.json says about the run besides its metrics: the model and its weights, the
    preprocessing, the label space, the data revision, the toolkit that measured it, and the
    report's notes (each checked)."""
    top = Fields(report, where)
    model, pre, space = top.object("model"), top.object("preprocessing"), top.object("label_space")
    data = top.object("data")
    data.boolean("partial", False)  # checked here, read by is_partial
    spec = model.string("spec")
    return {
        "spec": spec,
        "checkpoint": model.string("checkpoint", None),
        "checkpoint_sha256": model.string("checkpoint_sha256", None, pattern=SHA256),
        "identity": checked_identity(model),  # an in-memory model's class and weights, else None
        **_preprocessing(pre, spec),
        "label_space": space.string("description", None) or space.string("name"),
        "label_space_name": space.string("name"),
        "classes": space.integer("classes", None, low=1),
        "source": data.string("source", None),
        "config": _config(data),
        "split": data.string("split"),
        "fingerprint": data.string("fingerprint", None),
        "limit": data.integer("limit", None, low=1),
        "partial": is_partial(report),
        "toolkit": top.object("toolkit", None).string("version", None),
        "notes": [
            check_string(note, lambda problem, n=n: top.error(problem, f"notes[{n}]"))
            for n, note in enumerate(top.list("notes", []))
        ],
    }


__all__ = ["checked_metrics", "checked_model_only", "checked_run", "estimate", "is_partial"]
