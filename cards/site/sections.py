"""The metrics sections of an eval.json that the model pages render, each field checked.

`checked_report` (evaluation.ranking.leaderboard) checks what the leaderboard reads; a page renders far
more (tiers, positions, gaps, controls, the background-class analysis), and an eval.json may come
from a stranger. Every value a page shows is read here through `Fields`, so a wrong type is one
line naming the file and the field, and the pages render only from the plain dict returned.
"""

from __future__ import annotations

from pathlib import Path

from builder.core.untrusted import Fields, check_string


def estimate(fields: Fields, key: str) -> dict | None:
    """{value, low, high, n} (each may be None), or None when the estimate is absent."""
    if not fields.has(key):
        return None
    cell = fields.object(key)
    return {
        "value": cell.number("value", None),
        "low": cell.number("low", None),
        "high": cell.number("high", None),
        "n": cell.integer("n", None, low=0),
    }


def _cells(metrics: Fields, key: str, labels: dict[str, str], estimates: tuple[str, ...], numbers=()) -> list[dict]:
    """The rows of a list section: each label field as its kind ("text" or "size"), each estimate,
    each plain number (a rate without interval)."""
    rows = []
    for cell in metrics.objects(key, []):
        row: dict = {}
        for name, kind in labels.items():
            row[name] = cell.integer(name, low=0) if kind == "size" else cell.string(name)
        for name in estimates:
            row[name] = estimate(cell, name)
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


def checked_metrics(report: dict, where: Path) -> dict:
    """The metrics a model page shows, checked field by field (UntrustedInput otherwise)."""
    metrics = Fields(report, where).object("metrics")
    errors = metrics.object("errors", None)
    by_reason = errors.object("by_reason", None)
    bootstrap = metrics.object("bootstrap", None)
    overall = metrics.object("overall", None)
    checked: dict = {
        "samples": metrics.integer("samples", low=0),
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
        "overall": {"top1": estimate(overall, "top1"), "top5": estimate(overall, "top5")},
        "has_groups": metrics.boolean("has_groups", False),
        "notes": [
            check_string(note, lambda problem, n=n: metrics.error(problem, f"notes[{n}]"))
            for n, note in enumerate(metrics.list("notes", []))
        ],
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
        mean_over_groups=estimate(summary, "mean_over_groups"),
        worst_group={
            "group": summary.object("worst_group").string("group"),
            **(estimate(summary, "worst_group") or {}),
        },
        by_group=_cells(metrics, "by_group", {"group": "text"}, top),
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


def checked_run(report: dict, where: Path) -> dict:
    """What a model page says about the run besides its metrics: the weights, the preprocessing, the
    label space, the toolkit that measured it, and the report's notes (each checked)."""
    top = Fields(report, where)
    model, pre, space = top.object("model"), top.object("preprocessing"), top.object("label_space")
    data = top.object("data")
    return {
        "spec": model.string("spec"),
        "checkpoint": model.string("checkpoint", None),
        "checkpoint_sha256": model.string("checkpoint_sha256", None),
        "preprocessing": pre.string("description", None),
        "cropped": pre.boolean("cropped", False),
        "label_space": space.string("description", None) or space.string("name"),
        "classes": space.integer("classes", None, low=1),
        "source": data.string("source"),
        "config": data.string("config", None),
        "split": data.string("split"),
        "fingerprint": data.string("fingerprint", None),
        "limit": data.integer("limit", None, low=1),
        "toolkit": top.object("toolkit", None).string("version", None),
        "notes": [
            check_string(note, lambda problem, n=n: top.error(problem, f"notes[{n}]"))
            for n, note in enumerate(top.list("notes", []))
        ],
    }
