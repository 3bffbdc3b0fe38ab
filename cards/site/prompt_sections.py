"""A zero-shot model's prompt sets and a vision-language model's answers on its page, rendered only
from what the evaluation folder's reader checked (evaluation.ranking.prompt_fields): a table per
prompt set, the paired differences from the reference, the templates `no-scale` leaves out; the
shares of unmapped and ambiguous answers and a sample of them. A model without them gets no section.
"""

from __future__ import annotations

from .collect import ModelEval
from .markup import Html, esc, estimate, grid, join, number, section, table, tag


def _difference_grid(comparison: dict) -> Html:
    """Group x size of one set minus the reference, the groups' and the overall row last."""
    cells = [{**c, "top1": c["difference"]} for c in comparison["by_group_size"]]
    rows = [
        [c["group"], number(c["set_top1"]), number(c["reference_top1"]), estimate(c["difference"])]
        for c in comparison["by_group"]
    ]
    overall = comparison["overall"]
    rows.append(
        ["all", number(overall["set_top1"]), number(overall["reference_top1"]), estimate(overall["difference"])]
    )
    name, reference = comparison["set"], comparison["reference"]
    return join(
        [
            tag("h3", Html(tag("code", name) + " minus " + tag("code", reference) + ": top-1, paired by sample")),
            grid(cells, "group", "top1") if cells else Html(""),
            table(["group", f"{name} top-1", f"{reference} top-1", "difference"], rows),
        ]
    )


def prompt_set_section(prompt_sets: dict | None) -> Html:
    if prompt_sets is None:
        return Html("")
    names = (
        "CLIP's curated ImageNet class names" if prompt_sets["class_names"] == "clip-curated" else "custom class names"
    )
    intro = tag(
        "p",
        Html(
            f"Class names: {esc(names)}. Label space: {esc(prompt_sets['classes'])} classes "
            f"({esc(prompt_sets['label_space_source'] or 'not recorded')}). One pass over the images scores every set; "
            + "the reference, "
            + tag("code", prompt_sets["reference"])
            + ", fills the prediction columns and every section above. Differences resample source images, each "
            "with both sets' results."
        ),
    )
    summary = table(
        ["set", "templates", "top-1", "top-5", "mean over groups", "worst group"],
        [
            [
                tag("code", name),
                block["templates"],
                estimate(block["top1"]),
                estimate(block["top5"]),
                estimate(block["mean_over_groups"]),
                Html(esc(block["worst_group"]["group"]) + " " + estimate(block["worst_group"]))
                if block["worst_group"]
                else "n/a",
            ]
            for name, block in prompt_sets["sets"].items()
        ],
    )
    grids = [
        join(
            [
                tag("h3", Html("Top-1 by group and size: " + tag("code", name))),
                grid(block["by_group_size"], "group", "top1"),
            ]
        )
        for name, block in prompt_sets["sets"].items()
        if block["by_group_size"]
    ]
    parts = [intro, summary, *grids, *(_difference_grid(c) for c in prompt_sets["differences"])]
    if prompt_sets["removed"]:
        parts += [
            tag("h3", Html("Templates " + tag("code", "no-scale") + " leaves out")),
            table(["template", "why"], [[tag("code", t), why] for t, why in prompt_sets["removed"]]),
            table(["kept template", "why"], [[tag("code", t), why] for t, why in prompt_sets["kept"]]),
        ]
    return section("Zero-shot prompt sets", *parts, id_="prompt-sets")


def answer_section(answers: dict | None) -> Html:
    if answers is None:
        return Html("")
    prompt = (
        f'Each image was asked: "{answers["prompt"]}" '
        if answers["prompt"]
        else "The prompt is not known (answers from a file). "
    )
    parts = [
        tag(
            "p",
            prompt + f"Answers mapped by exact name over {answers['classes']} classes ({answers['terms']} names); one "
            "naming no class (unmapped) or several (ambiguous) counts as wrong.",
        ),
        table(
            ["group", "answers", "unmapped", "unmapped share", "ambiguous", "ambiguous share"],
            [
                [
                    r["group"],
                    r["answers"],
                    r["unmapped"],
                    number(r["unmapped_share"]),
                    r["ambiguous"],
                    number(r["ambiguous_share"]),
                ]
                for r in answers["rows"]
            ],
        ),
    ]
    if answers["sample"]:
        parts += [
            tag(
                "h3",
                f"The first {len(answers['sample'])} of {answers['sample_of']} unmapped or ambiguous answers, by key",
            ),
            table(
                ["key", "group", "status", "answer"],
                [
                    [tag("code", r["key"]), r["group"] or "", r["status"], r["answer"] or "(no answer)"]
                    for r in answers["sample"]
                ],
            ),
        ]
    return section("Answers in words", *parts, id_="answers")


def prompt_and_answer_sections(model: ModelEval) -> list[Html]:
    """The page's sections for a zero-shot model's prompt sets and a VLM's answers (none for others)."""
    return [part for part in (prompt_set_section(model.prompt_sets), answer_section(model.answers)) if part]
