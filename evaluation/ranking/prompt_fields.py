"""The zero-shot and answers sections of an eval.json, each field with its rule: what `hsi report`
shows of a zero-shot model's prompt sets (`zero_shot`, `paired_differences`, written by
evaluation.analysis.prompt_sets) and of a vision-language model's answers (`answers`, written by
evaluation.analysis.answer_shares). Read by `eval_reader` with the rest of the report, so a wrong
type is one line naming the file and the field before anything is written; a report without them
gives None.
"""

from __future__ import annotations

from pathlib import Path

from builder.core.untrusted import Fields, check_string

from .report_fields import estimate

SAMPLE_SHOWN = 20  # of the unmapped answers eval.json lists (it keeps at most that many)


def _set_block(fields: Fields) -> dict:
    metrics = fields.object("metrics")
    overall = metrics.object("overall", None)
    summary = metrics.object("groups_summary", None)
    worst = summary.object("worst_group", None)
    return {
        "templates": fields.integer("templates", low=0),
        "sha256": fields.string("sha256"),
        "top1": estimate(overall, "top1"),
        "top5": estimate(overall, "top5"),
        "mean_over_groups": estimate(summary, "mean_over_groups"),
        "worst_group": {"group": worst.string("group"), **(estimate(summary, "worst_group") or {})}
        if worst.data
        else None,
        "by_group_size": [
            {"group": cell.string("group"), "size": cell.integer("size", low=0), "top1": estimate(cell, "top1")}
            for cell in metrics.objects("by_group_size", [])
        ],
    }


def _difference(fields: Fields, labels: dict[str, str]) -> dict:
    row: dict = {
        name: (fields.integer(name, low=0) if kind == "size" else fields.string(name)) for name, kind in labels.items()
    }
    return {
        **row,
        "set_top1": fields.number("set_top1", None, low=0, high=1),
        "reference_top1": fields.number("reference_top1", None, low=0, high=1),
        "difference": estimate(fields, "difference"),
    }


def checked_prompt_sets(report: dict, where: Path) -> dict | None:
    """The prompt sets and their paired differences a page shows, or None without them."""
    top = Fields(report, where)
    if not top.has("zero_shot"):
        return None
    section_ = top.object("zero_shot")
    order = [
        check_string(name, lambda problem, n=n: section_.error(problem, f"order[{n}]"))
        for n, name in enumerate(section_.list("order"))
    ]
    if not order:
        raise section_.error("names no prompt set", "order")
    sets = section_.object("sets")
    space = section_.object("label_space", None)
    return {
        "class_names": section_.string("class_names"),
        "classes": space.integer("classes", None, low=1),
        "label_space_source": section_.string("label_space_source", None),
        "reference": section_.string("reference"),
        "order": order,
        "sets": {name: _set_block(sets.object(name)) for name in order},
        "removed": [
            (entry.string("template"), entry.string("why")) for entry in section_.objects("removed_for_scale", [])
        ],
        "kept": [(entry.string("template"), entry.string("why")) for entry in section_.objects("kept_borderline", [])],
        "differences": [
            {
                "set": comparison.string("set"),
                "reference": comparison.string("reference"),
                "overall": _difference(comparison.object("overall"), {}),
                "by_group": [_difference(c, {"group": "text"}) for c in comparison.objects("by_group", [])],
                "by_group_size": [
                    _difference(c, {"group": "text", "size": "size"}) for c in comparison.objects("by_group_size", [])
                ],
            }
            for comparison in top.objects("paired_differences", [])
        ],
    }


def _shares(fields: Fields, label: bool) -> dict:
    return {
        "group": fields.string("group") if label else "all",
        "answers": fields.integer("answers", low=0),
        "unmapped": fields.integer("unmapped", low=0),
        "ambiguous": fields.integer("ambiguous", low=0),
        "unmapped_share": fields.number("unmapped_share", None, low=0, high=1),
        "ambiguous_share": fields.number("ambiguous_share", None, low=0, high=1),
    }


def checked_answers(report: dict, where: Path) -> dict | None:
    """The answers in words a page shows, or None for a model that answered in classes."""
    top = Fields(report, where)
    if not top.has("answers"):
        return None
    answers = top.object("answers")
    vocabulary = answers.object("vocabulary", None)
    return {
        "prompt": answers.string("prompt", None),
        "classes": vocabulary.integer("classes", None, low=0),
        "terms": vocabulary.integer("terms", None, low=0),
        "rows": [
            *(_shares(g, True) for g in answers.objects("by_group", [])),
            _shares(answers.object("overall"), False),
        ],
        "sample": [
            {
                "key": entry.string("key"),
                "group": entry.string("group", None),
                "status": entry.string("status", choices=("unmapped", "ambiguous")),
                "answer": entry.string("answer", None),
            }
            for entry in answers.objects("sample", [])[:SAMPLE_SHOWN]
        ],
        "sample_of": answers.integer("sample_of", 0, low=0),
    }


def checked_prompt_fields(report: dict, where: Path) -> tuple[dict | None, dict | None]:
    """(prompt sets, answers) of an eval.json, each None when the report has none."""
    return checked_prompt_sets(report, where), checked_answers(report, where)
