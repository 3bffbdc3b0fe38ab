"""eval.md's sections for zero-shot models and answers in words, rendered from eval.json's
`zero_shot`, `paired_differences` and `answers` (built by `prompt_sets` and `answer_shares`)."""

from __future__ import annotations

from builder.core import markdown

from .markdown_cells import fmt as _fmt
from .markdown_cells import text as _text


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _grid(rows: list[dict]) -> str:
    sizes = sorted({row["size"] for row in rows})
    groups = list(dict.fromkeys(row["group"] for row in rows))
    cells = {(row["group"], row["size"]): _fmt(row["top1"]) for row in rows}
    return markdown.table(
        ["group", *[f"size {size}" for size in sizes]],
        [[group, *[cells.get((group, size), "") for size in sizes]] for group in groups],
    )


def prompt_set_markdown(report: dict) -> list[str]:
    """The prompt sets: one summary row and one top-1 grid per set, the paired differences from the
    reference, and the templates `no-scale` leaves out, each with why."""
    section = report.get("zero_shot")
    if not section:
        return []
    space = section.get("label_space") or {}
    names = "CLIP's curated ImageNet class names" if section["class_names"] == "clip-curated" else "custom class names"
    out = [
        "## Zero-shot prompt sets",
        "",
        f"Class names: {names}. Label space: {_text(space.get('classes'))} classes "
        f"({_text(section.get('label_space_source'))}). One pass over the images scores every set; the reference, "
        f"`{_text(section['reference'])}`, fills the prediction columns and the tables above.",
        "",
    ]
    rows = []
    for name in section["order"]:
        entry = section["sets"][name]
        metrics = entry["metrics"]
        summary = metrics.get("groups_summary") or {}
        worst = summary.get("worst_group")
        rows.append(
            [
                name,
                entry["templates"],
                _fmt((metrics.get("overall") or {}).get("top1")),
                _fmt((metrics.get("overall") or {}).get("top5")),
                _fmt(summary.get("mean_over_groups")),
                f"{_text(worst['group'])} {_fmt(worst)}" if worst else "n/a",
            ]
        )
    out += [
        markdown.table(["set", "templates", "top-1", "top-5", "mean over groups", "worst group"], rows),
        "",
    ]
    for name in section["order"]:
        cells = section["sets"][name]["metrics"].get("by_group_size")
        if cells:
            out += [f"### Top-1 by group and size: `{_text(name)}`", "", _grid(cells), ""]
    out += paired_difference_markdown(report.get("paired_differences") or [])
    if section.get("removed_for_scale"):
        out += [
            "### Templates `no-scale` leaves out",
            "",
            markdown.table(["template", "why"], [[r["template"], r["why"]] for r in section["removed_for_scale"]]),
            "",
            "Kept, though they might be read as scale:",
            "",
            markdown.table(["template", "why kept"], [[r["template"], r["why"]] for r in section["kept_borderline"]]),
            "",
        ]
    return out


def paired_difference_markdown(comparisons: list[dict]) -> list[str]:
    """One table per set: its top-1 minus the reference's, per group x size, paired by sample."""
    out: list[str] = []
    for comparison in comparisons:
        name, reference = _text(comparison["set"]), _text(comparison["reference"])
        cells = comparison.get("by_group_size") or []
        rows = []
        for group in comparison.get("by_group") or []:  # a group's sizes, then the group over all sizes
            rows += [[c["group"], c["size"], *_values(c)] for c in cells if c["group"] == group["group"]]
            rows.append([group["group"], "all", *_values(group)])
        rows.append(["all", "all", *_values(comparison["overall"])])
        out += [
            f"### `{name}` minus `{reference}`: top-1, paired by sample",
            "",
            "Both sets classified the same images; the interval resamples source images, each with both sets' results.",
            "",
            markdown.table(
                ["group", "size", f"{name} top-1", f"{reference} top-1", "difference"],
                [[g, s, f"{a:.3f}", f"{b:.3f}", _fmt(d)] for g, s, a, b, d in rows],
            ),
            "",
        ]
    return out


def _values(cell: dict) -> list:
    return [cell["set_top1"], cell["reference_top1"], cell["difference"]]


def answer_markdown(report: dict) -> list[str]:
    """Answers in words: the shares that mapped to no class or to several, and a sample of them."""
    section = report.get("answers")
    if not section:
        return []
    vocabulary = section.get("vocabulary") or {}
    prompt = section.get("prompt")
    overall = section["overall"]
    out = [
        "## Answers in words",
        "",
        (f'Each image was asked: "{_text(prompt)}" ' if prompt else "The prompt is not known (answers from a file). ")
        + f"Answers were mapped by exact name over {_text(vocabulary.get('classes'))} classes "
        f"({_text(vocabulary.get('terms'))} names; vocabulary sha256 `{_text(vocabulary.get('sha256'))}`); an answer "
        "naming no class (unmapped) or several (ambiguous) counts as wrong.",
        "",
        markdown.table(
            ["group", "answers", "unmapped", "unmapped share", "ambiguous", "ambiguous share"],
            [
                [
                    row.get("group", "all"),
                    row["answers"],
                    row["unmapped"],
                    _share(row["unmapped_share"]),
                    row["ambiguous"],
                    _share(row["ambiguous_share"]),
                ]
                for row in [*section["by_group"], overall]
            ],
        ),
        "",
    ]
    if section["sample"]:
        out += [
            f"The first {len(section['sample'])} of the {section['sample_of']} unmapped or ambiguous answers, by key:",
            "",
            markdown.table(
                ["key", "group", "status", "answer"],
                [[row["key"], row["group"], row["status"], row["answer"]] for row in section["sample"]],
            ),
            "",
        ]
    return out
