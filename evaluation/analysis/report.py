"""eval.json (every number) and eval.md (the tables a person reads), from predictions' metadata and
the metrics; both are rendered from the same dict, so they never disagree."""

from __future__ import annotations

import json
from pathlib import Path

from builder.core import markdown
from evaluation.model_formats.identity import identity_words
from evaluation.model_formats.models import APPLIED, DECLARED, UNKNOWN

from .markdown_cells import fmt, text
from .zero_shot_report import answer_markdown, prompt_set_markdown

EVAL_JSON, EVAL_MD = "eval.json", "eval.md"
REPORT_SCHEMA = "hsi-eval/1"


def build_report(metadata: dict, metrics: dict, extras: dict | None = None) -> dict:
    report = {
        "schema": REPORT_SCHEMA,
        **{k: metadata.get(k) for k in ("model", "preprocessing", "label_space", "data", "run", "toolkit")},
        "notes": list(metadata.get("notes") or []) + list(metrics.get("notes") or []),
        "metrics": metrics,
    }
    report.update(extras or {})
    return report


def _plain(value):
    """numpy scalars (pandas hands them out) as Python values."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def write_json(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, allow_nan=False, default=_plain) + "\n", "utf-8")
    tmp.replace(path)


def comparison_rows(rows: list[dict], labels: list[str], rates: list[str], difference: str) -> list[list]:
    """Table rows of paired cells (same position and size): the labels, the two top-1 rates and
    their difference with its interval."""
    return [
        [r["position"], r["size"], *(r[k] for k in labels), *(f"{r[k]:.3f}" for k in rates), fmt(r[difference])]
        for r in rows
    ]


def md_table(header: list[str], rows: list[list]) -> str:
    return markdown.table(header, rows)


def _grid(rows: list[dict], row_key: str, column_key: str, metric: str = "top1") -> str:
    columns = sorted({r[column_key] for r in rows})
    order = []
    for r in rows:
        if r[row_key] not in order:
            order.append(r[row_key])
    cells = {(r[row_key], r[column_key]): fmt(r[metric]) for r in rows}
    return md_table(
        [row_key, *[f"{column_key} {c}" for c in columns]],
        [[name, *[cells.get((name, c), "") for c in columns]] for name in order],
    )


CROP_COST = "The crop cuts the canvas border, and with it part of every corner object."


def preprocessing_line(pre: dict) -> str:
    """What eval.md says of the preprocessing: only what its `status` allows (the section as
    evaluation.ranking.provenance records it): applied by the toolkit, declared by whoever made the
    predictions, or unknown."""
    status = pre.get("status", APPLIED)
    if status == UNKNOWN:
        return (
            "**Preprocessing: unknown** (the predictions were made elsewhere and nobody declared how): whether the "
            "images were centre-cropped is not known, and a crop cuts part of every corner object; declare it with "
            "`hsi eval --preprocessing` or `hsi.score(..., preprocessing=...)`."
        )
    if status == DECLARED:
        if pre.get("cropped"):
            crop, cost = f"centre-cropped (crop_pct {text(pre['crop_pct'])})", f" {CROP_COST}"
        else:
            crop, cost = ("not centre-cropped" if pre.get("cropped") is False else "crop not declared"), ""
        return f"**Preprocessing as declared, not checked: {crop}**: {text(pre['description'])}.{cost}"
    if pre.get("cropped"):
        return (
            f"**Preprocessing: centre-cropped on purpose** (crop_pct {text(pre['crop_pct'])}): "
            f"{text(pre['description'])}. {CROP_COST}"
        )
    return f"**Preprocessing: the 224 canvas as it is, not centre-cropped**: {text(pre['description'])}."


def render_markdown(report: dict) -> str:
    model, data, metrics = report["model"], report["data"], report["metrics"]
    boot = metrics["bootstrap"]
    out = [f"# Evaluation of `{text(model['spec'])}` on {text(data['config'])} / {text(data['split'])}", ""]
    out.append(
        f"- model: `{text(model['spec'])}`"
        + (f", checkpoint `{text(model['checkpoint'])}`" if model.get("checkpoint") else "")
        + (f" (sha256 `{text(model['checkpoint_sha256'])}`)" if model.get("checkpoint_sha256") else "")
    )
    if model.get("identity"):  # an in-memory model: what is known of it, and no more
        out.append(f"- weights: {text(identity_words(model['identity']))}")
    out.append(
        f"- data: {text(data['source'])}, config {text(data['config'])}, split {text(data['split'])}, fingerprint "
        f"`{text(data.get('fingerprint'))}`"
        + (f", first {text(data['limit'])} samples only" if data.get("limit") else "")
    )
    out.append(f"- label space: {text(report['label_space']['description'])}")
    out.append(f"- {preprocessing_line(report['preprocessing'])}")
    out.append(
        f"- samples evaluated: {metrics['samples']} from {metrics['sources']} source images; "
        f"errors: {metrics['errors']['total']}"
        + (f" ({text(metrics['errors']['by_reason'])})" if metrics["errors"]["total"] else "")
    )
    out.append(
        f"- intervals: {boot['level']:.0%} percentile bootstrap over source images, {boot['resamples']} resamples, "
        f"seed {boot['seed']}"
    )
    for note in report.get("notes") or []:
        out.append(f"- note: {text(note)}")
    out.append("")
    if "overall" in metrics:
        out += [
            "## Overall",
            "",
            md_table(["top-1", "top-5"], [[fmt(metrics["overall"]["top1"]), fmt(metrics["overall"]["top5"])]]),
            "",
        ]
    if not metrics.get("has_groups"):
        out += ["This config has no group metadata: only plain accuracy is reported.", ""]
        return "\n".join(out) + _extras_markdown(report)
    summary = metrics["groups_summary"]
    out += [
        "## Groups",
        "",
        md_table(
            ["group", "top-1", "top-5"], [[r["group"], fmt(r["top1"]), fmt(r["top5"])] for r in metrics["by_group"]]
        ),
        "",
        f"Mean over groups: {fmt(summary['mean_over_groups'])}; worst group: {text(summary['worst_group']['group'])} "
        f"{fmt(summary['worst_group'])}.",
        "",
        "## Top-1 by group and size",
        "",
        _grid(metrics["by_group_size"], "group", "size"),
        "",
        "## Top-5 by group and size",
        "",
        _grid(metrics["by_group_size"], "group", "size", "top5"),
        "",
    ]
    if metrics["by_tier"]:
        out += [
            "## Tiers",
            "",
            md_table(
                ["tier", "top-1", "top-5"], [[r["tier"], fmt(r["top1"]), fmt(r["top5"])] for r in metrics["by_tier"]]
            ),
            "",
        ]
    out += [
        "## Top-1 by position and size",
        "",
        _grid(metrics["by_position_size"], "position", "size"),
        "",
        "## Background kinds",
        "",
        md_table(
            ["background", "top-1", "top-5"],
            [[r["background"], fmt(r["top1"]), fmt(r["top5"])] for r in metrics["by_background"]],
        ),
        "",
    ]
    if metrics["background_gap"]:
        out += [
            "## Background gap (own minus foreign background, same size and position)",
            "",
            md_table(
                ["position", "size", "foreign", "own top-1", "foreign top-1", "gap"],
                comparison_rows(metrics["background_gap"], ["foreign"], ["own_top1", "foreign_top1"], "gap"),
            ),
            "",
        ]
    if metrics["neutral_controls"]:
        out += [
            "## Neutral controls (neutral minus foreign background, same size and position)",
            "",
            md_table(
                ["position", "size", "control", "foreign", "control top-1", "foreign top-1", "difference"],
                comparison_rows(
                    metrics["neutral_controls"], ["control", "foreign"], ["control_top1", "foreign_top1"], "difference"
                ),
            ),
            "",
        ]
    else:
        out += ["No neutral (gray or noise) backgrounds in this config: no neutral controls.", ""]
    bg = metrics.get("background_class")
    if bg:
        expected = "expected share of errors (from the controls)"
        out += [
            "## Background-class analysis",
            "",
            f"Samples: {text(bg['samples'])}. Controls: {text(bg['control'])}. Chance share of errors: "
            f"{bg['chance_share_of_errors']:.4f}. "
            f"{'' if bg['control_errors'] == 'errors on the control backgrounds' else text(bg['control_errors'])}",
            "",
            md_table(
                ["group", "size", "samples", "errors", "share of predictions", "share of errors", expected],
                [
                    [
                        r.get("group", "all"),
                        r.get("size", ""),
                        r["samples"],
                        r["errors"],
                        fmt(r["share_of_predictions"]),
                        fmt(r["share_of_errors"]),
                        "n/a" if r["expected_share_of_errors"] is None else f"{r['expected_share_of_errors']:.3f}",
                    ]
                    for r in [*bg["by_group_size"], bg["overall"]]
                ],
            ),
            "",
        ]
    out += fill_tercile_markdown(metrics.get("fill_terciles"))
    return "\n".join(out) + _extras_markdown(report)


def fill_tercile_markdown(section: dict | None) -> list[str]:
    """The R groups' top-1 by tercile of the donor background's fill score (or the line saying why not)."""
    if section is None:  # a report written before fill scores were recorded
        return []
    out = ["## Foreign backgrounds by donor fill score (terciles)", ""]
    if not section["rows"]:
        return out + [text(section["note"]), ""]

    def span(row: dict) -> str:
        return "" if row["score_min"] is None else f"{row['score_min']:.3f}-{row['score_max']:.3f}"

    low, high = section["edges"]
    out += [
        f"Random- and paired-background samples ({section['samples']}) by the fill score of their background "
        f"(`background_fill_score`; low <= {low:.3f} < mid <= {high:.3f} < high). If top-1 rises with the fill "
        "score, inpainting artefacts, not only the foreign background, cost accuracy.",
        "",
        md_table(
            ["group", "tercile", "fill score range", "samples", "top-1"],
            [
                [r.get("group", "all R"), r["tercile"], span(r), r["samples"], fmt(r["top1"])]
                for r in [*section["rows"], *section["by_group"]]
            ],
        ),
        "",
    ]
    if section.get("note"):
        out += [text(section["note"]), ""]
    return out


def _extras_markdown(report: dict) -> str:
    out = [*prompt_set_markdown(report), *answer_markdown(report)]
    clean = report.get("clean")
    if clean:
        out += [
            "## Clean photos",
            "",
            f"Top-1 on the {text(clean['images'])} original photos of the same source images: {fmt(clean['top1'])} "
            f"({text(clean['preprocessing'])}); per class in `{text(clean['file'])}`.",
            "",
        ]
        if clean["drop_by_group"]:
            out += [
                md_table(["group", "drop from clean"], [[r["group"], fmt(r["drop"])] for r in clean["drop_by_group"]]),
                "",
            ]
        if clean.get("missing"):
            out += [f"{text(clean['missing'])} source images were not found under the clean root and are left out.", ""]
        if clean.get("errors"):
            out += [
                f"{len(clean['errors'])} clean photos could not be decoded: "
                + ", ".join(f"{text(e['key'])} ({text(e['detail'])})" for e in clean["errors"][:10]),
                "",
            ]
    background = report.get("background_only")
    if background:
        out += [
            "## Backgrounds alone (object erased): the spuriosity proxy",
            "",
            f"Top-1 on {text(background['images'])} inpainted backgrounds: {background['top1']:.3f}; "
            f"per-class accuracy in `{text(background['file'])}` (feed it to `hsi validate --scores --accuracy`).",
            "",
        ]
    if report.get("carried_over"):
        out += [f"Carried over: {text(report['carried_over'])}.", ""]
    plots = report.get("plots") or []
    if plots:
        out += ["## Plots", ""] + [f"![{text(Path(p).stem)}]({text(p)})" for p in plots] + [""]
    errors = report["metrics"]["errors"]
    if errors["total"]:
        out += [
            "## Error rows",
            "",
            md_table(
                ["key", "shard", "reason", "detail"],
                [[r["key"], r["shard"], r["reason"], r["detail"]] for r in errors["rows"]],
            ),
            "",
        ]
    return ("\n" + "\n".join(out)) if out else ""


def write_report(folder: Path, report: dict) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / EVAL_JSON, folder / EVAL_MD
    write_json(json_path, report)
    md_path.write_text(render_markdown(report) + "\n", "utf-8")
    return json_path, md_path
