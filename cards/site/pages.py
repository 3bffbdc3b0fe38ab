"""The site's pages: the leaderboard (index.html) and one page per model, as HTML text.

Pages render only checked values (collect, sections, gallery) through markup's escaping helpers.
Every page names the data revision it shows (config, split, fingerprint, and the toolkit version
that measured it) in its header, and the toolkit that built the site in its footer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.core.taxonomy import sorted_groups
from evaluation.model_formats.models import UNKNOWN
from evaluation.ranking.provenance import preprocessing_claim, weights_claim
from evaluation.ranking.ranks import TIES, UNKNOWN_REASON, UNKNOWN_TITLE, by_preprocessing, competition_ranks, order_key
from evaluation.ranking.verification_record import verification_words

from .collect import ModelEval
from .gallery import ClassLabel, GalleryCell, Thumbnail
from .markup import Html, esc, estimate, grid, image, join, link, number, page, section, table, tag, url
from .prompt_sections import prompt_and_answer_sections

# what a leaderboard entry says of the model, shown as text (a paper's address is not a link: the
# site loads and links nothing outside itself)
ENTRY_FIELDS = (("architecture", "architecture"), ("training_data", "training data"), ("paper", "paper"))
ROLE_TEXT = {"true": "true", "predicted": "predicted", "background": "background", "paired": "paired class"}


@dataclass(frozen=True)
class Board:
    """One leaderboard: the models measured on one data revision, and its figures' file names."""

    revision: tuple  # (config, split, fingerprint)
    models: list[ModelEval]  # in leaderboard order
    curves: str | None  # site-relative path of the accuracy-vs-size figure
    heat_maps: str | None
    failed: tuple[dict, ...] = ()  # failed.json records of models that failed on this revision


def revision_line(run: dict, source: str | None = None) -> Html:
    """config, split, fingerprint, the toolkit version that measured it (and where the data was read)."""
    parts = [
        Html("data: config " + tag("code", run["config"] or "none")),
        Html("split " + tag("code", run["split"])),
        Html("fingerprint " + tag("code", run["fingerprint"] or "not recorded")),
        Html("evaluated with hard-spurious-imagenet " + tag("code", run["toolkit"] or "unknown")),
    ]
    if run.get("limit"):
        parts.append(esc(f"first {run['limit']} samples only"))
    if source:
        parts.append(Html("thumbnails from " + tag("code", source)))
    return tag("div", join(parts, " · "), class_="revision")


def sort_key(model: ModelEval):
    """The leaderboard's order (evaluation.ranking.ranks): full runs by worst-group top-1 (best
    first), then top-1, then name; partial (`--limit`) runs after every full one."""
    return (*order_key(model.row), model.slug)


def _model_cell(model: ModelEval) -> Html:
    """The model's name (its entry's, linked to its page), with its spec, architecture and training
    data beneath when the entry gives them."""
    details = [tag("code", model.spec)] if model.name != model.spec else []
    if model.entry:
        described = model.entry["model"]
        details += [esc(described[key]) for key in ("architecture", "training_data") if described.get(key)]
    if model.entry:  # what verification proved of the entry, in a word
        details.append(esc(verification_words(model.verification)[0]))
    name = link(model.name, "models", model.slug, "index.html")
    return Html(name + (tag("div", join(details, " · "), class_="detail") if details else ""))


def _board_table(models: list[ModelEval], groups: list[str]) -> Html:
    """The table of `models` (in leaderboard order), ranked among themselves: ties share a rank."""
    rows = []
    for model, rank in zip(models, competition_ranks([m.row for m in models])):
        metrics = model.metrics
        by_group = {c["group"]: c["top1"] for c in metrics.get("by_group", [])}
        worst = metrics.get("worst_group")
        rows.append(
            [
                "-" if rank is None else rank,
                _model_cell(model),
                model.row["preprocessing"],
                metrics["samples"],
                estimate(metrics["overall"]["top1"]),
                estimate(metrics["clean"]["top1"]) if metrics["clean"] else "n/a",
                estimate(metrics.get("mean_over_groups")),
                Html(tag("b", worst["group"]) + " " + estimate(worst)) if worst else "n/a (no groups)",
                *[estimate(by_group.get(g)) for g in groups],
                f"partial: first {model.run['limit']} samples" if rank is None else "full",
            ]
        )
    header = ["rank", "model", "preprocessing", "samples", "top-1", "clean top-1", "mean over groups", "worst group"]
    return table([*header, *[f"{g} top-1" for g in groups], "run"], rows, class_="leaderboard")


def _board_tables(board: Board) -> list[Html]:
    """The board's models whose preprocessing is known, ranked; below them, those whose preprocessing
    is unknown, ranked apart with the reason (evaluation.ranking.ranks)."""
    groups = sorted_groups(c["group"] for m in board.models for c in m.metrics.get("by_group", []))
    known, unknown = by_preprocessing(board.models, lambda model: model.row)
    parts = [_board_table(known, groups)] if known or not unknown else []
    if unknown:
        parts += [tag("h3", UNKNOWN_TITLE), tag("p", UNKNOWN_REASON, class_="note"), _board_table(unknown, groups)]
    return parts


def published_section(runs: list, reference: str) -> Html:
    """`hsi report --reference NAME`: figures published by others, not re-run here, in a section of
    their own after the leaderboards (never ranked with them); top-1 in percent as published."""
    from evaluation.ranking.published import GROUPS, LABEL, SIZES, percent

    header = ["run", "model", "input", "crop_pct", *(f"{g} {s}" for s in SIZES for g in GROUPS), "clean", "source"]
    rows = [
        [
            run.run,
            tag("code", run.model),
            run.input_size,
            f"{run.crop_pct:g}",
            *(percent(run.top1(g, s)) for s in SIZES for g in GROUPS),
            percent(run.clean.top1 if run.clean else None),
            tag("code", run.source_folder),
        ]
        for run in runs
    ]
    text = (
        f"{LABEL.capitalize()}: the top-1 accuracy (percent, 50,000 images a cell) that the paper's authors "
        f"released in their evaluation logs ({reference}), each model at its own input size and crop_pct, "
        "as the logs record them. These runs used the authors' own build of the set, not the data of the "
        "leaderboards above, so they are not ranked with them; the group and size of each log are inferred "
        "from its order (docs/evaluate.md, reproduce the paper)."
    )
    return section(f"Published, not re-run ({reference})", tag("p", text), table(header, rows, class_="published"))


def index_page(boards: list[Board], generator: str, published: Html | None = None) -> str:
    """The leaderboards, one per data revision, each sorted by worst group, with its figures; then,
    apart, figures published elsewhere (`published`)."""
    body = [
        tag(
            "p",
            "Sorted by worst-group top-1 accuracy (best first). Intervals are the evaluations' 95% bootstrap "
            "intervals over source images; n is the number of samples. Partial runs (hsi eval --limit) are listed "
            "after the full runs, unranked. " + TIES + " Clean top-1 is the model's accuracy on the original photos "
            "of the same source images (hsi eval --clean), where the evaluation has it.",
        )
    ]
    for board in boards:
        config, split, fingerprint = board.revision
        parts = _board_tables(board) if board.models else []
        if board.failed:
            rows = [[tag("code", r["model"]["spec"]), r["stage"], r["error"], r["reason"]] for r in board.failed]
            parts.append(
                Html(
                    tag("h3", "Failed models (not ranked)")
                    + table(["model", "failed while", "error", "reason"], rows, class_="failed")
                )
            )
        if board.curves:
            parts.append(
                tag(
                    "div",
                    Html(
                        tag("h3", "Top-1 accuracy against object size, per group")
                        + image(f"accuracy against size, {config} / {split}", *board.curves.split("/"))
                    ),
                    class_="figure",
                )
            )
        if board.heat_maps:
            parts.append(
                tag(
                    "div",
                    Html(
                        tag("h3", "Top-1 by position and size, per model (n samples per cell)")
                        + image(f"position by size heat maps, {config} / {split}", *board.heat_maps.split("/"))
                    ),
                    class_="figure",
                )
            )
        title = f"{config} / {split} (fingerprint {fingerprint or 'not recorded'})"
        body.append(section(title, *parts, id_=f"board-{len(body)}"))
    if published is not None:
        body.append(published)
    revisions = join(revision_line(board.models[0].run) for board in boards if board.models)
    return page("Hard-Spurious-ImageNet: leaderboard", revisions, join(body), "", generator)


# ---------------------------------------------------------------- a model's page


def _tiers(model: ModelEval) -> dict:
    """{(group, size): tier} as the samples' json names it (the metrics' by_tier counts the same rows)."""
    frame = model.predictions
    if not {"group", "size", "tier"} <= set(frame.columns):
        return {}
    ok = frame[(frame["status"] == "ok") & frame["tier"].notna() & frame["group"].notna() & frame["size"].notna()]
    return {(str(g), int(s)): str(t) for (g, s), t in ok.groupby(["group", "size"])["tier"].first().items()}


def folder_text(folder: Path) -> str:
    """A model folder as `OUT/<model>` (its parent's name and its own), never a path from the root: a
    folder given as `E` or `/E` has no parent name to show, and no leading `/`."""
    return "/".join(name for name in (folder.parent.name, folder.name) if name) or "."


def _preprocessing(run: dict) -> str:
    """What is known of the preprocessing, then the run's own words for it (an unknown one has none)."""
    words = run["preprocessing"] if run["preprocessing_status"] != UNKNOWN else None
    return preprocessing_claim(run) + (f": {words}" if words else "")


def _run_table(model: ModelEval) -> Html:
    run, metrics = model.run, model.metrics
    boot = metrics["bootstrap"]
    errors = metrics["errors"]
    described = model.entry["model"] if model.entry else {}
    weights, digest, note = weights_claim(run)  # what is known of them, never more
    rows = [
        ["model", tag("code", run["spec"])],
        ["leaderboard name", model.name],
        *[[label, described[key]] for key, label in ENTRY_FIELDS if described.get(key)],
        ["verification", verification_words(model.verification)[1]] if model.entry else None,
        ["weights", weights],
        ["weights sha256", Html(tag("code", digest) + esc(f" ({note})" if note else "")) if digest else note],
        ["preprocessing", _preprocessing(run)],
        ["label space", run["label_space"]],
        ["samples", f"{metrics['samples']} from {metrics['sources']} source images"],
        [
            "error rows",
            f"{errors['total']}"
            + (" (" + ", ".join(f"{k}: {v}" for k, v in errors["by_reason"].items()) + ")" if errors["total"] else ""),
        ],
        [
            "intervals",
            f"{boot['level']:.0%} percentile bootstrap over source images, {boot['resamples']} resamples, seed "
            f"{boot['seed']}"
            if boot["level"] is not None
            else "not recorded",
        ],
        ["evaluation folder", folder_text(model.folder)],
    ]
    rows = [row for row in rows if row is not None]
    notes = [*run["notes"], *[n for n in metrics["notes"] if n not in run["notes"]]]
    rows += [["note", note] for note in notes]
    return table(None, rows, class_="run")


def _metric_sections(model: ModelEval) -> list[Html]:
    metrics = model.metrics
    overall = metrics["overall"]
    out = [
        section(
            "Overall",
            table(["top-1", "top-5"], [[estimate(overall["top1"]), estimate(overall["top5"])]]),
            id_="overall",
        )
    ]
    if not metrics["has_groups"]:
        out.append(tag("p", "This config has no group metadata: only plain accuracy is reported.", class_="note"))
        out.append(_clean_section(metrics))
        return out
    tiers = _tiers(model)
    worst = metrics["worst_group"]
    out += [
        section(
            "Top-1 by group and size",
            grid(metrics["by_group_size"], "group", "top1", tiers),
            tag("h3", "Top-5 by group and size"),
            grid(metrics["by_group_size"], "group", "top5"),
            id_="group-size",
        ),
        section(
            "Groups",
            table(
                ["group", "top-1", "top-5"],
                [[c["group"], estimate(c["top1"]), estimate(c["top5"])] for c in metrics["by_group"]],
            ),
            tag(
                "p",
                Html(
                    "Mean over groups: "
                    + estimate(metrics["mean_over_groups"])
                    + "; worst group: "
                    + esc(worst["group"])
                    + " "
                    + estimate(worst)
                    + "."
                ),
            ),
            id_="groups",
        ),
        _clean_section(metrics),
    ]
    if metrics["by_tier"]:
        out.append(
            section(
                "Tiers",
                table(
                    ["tier", "top-1", "top-5"],
                    [[c["tier"], estimate(c["top1"]), estimate(c["top5"])] for c in metrics["by_tier"]],
                ),
                id_="tiers",
            )
        )
    out += [
        section("Top-1 by position and size", grid(metrics["by_position_size"], "position", "top1"), id_="positions"),
        section(
            "Background kinds",
            table(
                ["background", "top-1", "top-5"],
                [[c["background"], estimate(c["top1"]), estimate(c["top5"])] for c in metrics["by_background"]],
            ),
            id_="backgrounds",
        ),
    ]
    gap = metrics["background_gap"]
    out.append(
        section(
            "Background gap (own minus foreign background, same size and position)",
            table(
                ["position", "size", "foreign", "own top-1", "foreign top-1", "gap"],
                [
                    [
                        c["position"],
                        c["size"],
                        c["foreign"],
                        number(c["own_top1"]),
                        number(c["foreign_top1"]),
                        estimate(c["gap"]),
                    ]
                    for c in gap
                ],
            )
            if gap
            else tag(
                "p", "No own and foreign backgrounds at the same size and position: no background gap.", class_="note"
            ),
            id_="background-gap",
        )
    )
    controls = metrics["neutral_controls"]
    out.append(
        section(
            "Neutral controls (neutral minus foreign background, same size and position)",
            table(
                ["position", "size", "control", "foreign", "control top-1", "foreign top-1", "difference"],
                [
                    [
                        c["position"],
                        c["size"],
                        c["control"],
                        c["foreign"],
                        number(c["control_top1"]),
                        number(c["foreign_top1"]),
                        estimate(c["difference"]),
                    ]
                    for c in controls
                ],
            )
            if controls
            else tag("p", "No neutral (gray or noise) backgrounds in this config: no neutral controls.", class_="note"),
            id_="neutral-controls",
        )
    )
    out.append(_background_class_section(metrics["background_class"]))
    return out


def _clean_section(metrics: dict) -> Html:
    """Top-1 on the clean photos with its drop to each group, and top-1 on the backgrounds alone, when
    the evaluation ran those passes (hsi eval --clean, --parts)."""
    clean, background = metrics["clean"], metrics["background_only"]
    title = "Clean photos and backgrounds alone"
    if not clean and not background:
        return section(
            title,
            tag(
                "p",
                "Not measured in this evaluation: hsi eval --clean IMAGENET_ROOT classifies the original photos of the "
                "same source images, and --parts PARTS the inpainted backgrounds alone.",
                class_="note",
            ),
            id_="clean",
        )
    rows, notes = [], []
    if clean:
        rows.append(
            ["clean photos: the original photos of the same source images", clean["images"], estimate(clean["top1"])]
        )
        notes.append(f"The clean photos: {clean['preprocessing']}.")
        if clean["missing"]:
            notes.append(f"{clean['missing']} source photos were not found under the clean root and are left out.")
        if clean["errors"]:
            notes.append(f"{len(clean['errors'])} clean photos could not be decoded and are left out.")
    if background:
        rows.append(
            [
                "backgrounds alone: the inpainted background, object erased, labelled with its photo's class",
                background["images"],
                number(background["top1"]),
            ]
        )
        notes.append(
            "A background the model still names correctly carries its class's context (the spuriosity proxy); "
            "it is counted once, without an interval."
        )
        if background["errors"]:
            notes.append(f"{len(background['errors'])} parts could not be read and are left out.")
    parts = [table(["images", "count", "top-1"], rows), tag("p", " ".join(notes))]
    if clean and clean["drop_by_group"]:
        top1 = {c["group"]: c["top1"] for c in metrics.get("by_group", [])}
        drops = [[c["group"], estimate(top1.get(c["group"])), estimate(c["drop"])] for c in clean["drop_by_group"]]
        parts += [
            tag("h3", "Drop from clean, per group"),
            table(["group", "top-1", "clean top-1 minus the group's (n: photos and composites)"], drops),
        ]
    return section(title, *parts, id_="clean")


def _background_class_section(analysis: dict | None) -> Html:
    title = "Background-class analysis"
    if analysis is None:
        return section(
            title,
            tag("p", "No sample sits on another class's background: no background-class analysis.", class_="note"),
            id_="background-class",
        )
    rows = [
        [
            c.get("group", "all"),
            c.get("size", ""),
            c["samples"],
            c["errors"],
            estimate(c["share_of_predictions"]),
            estimate(c["share_of_errors"]),
            number(c["expected_share_of_errors"]),
            number(c["mean_prob_background_class"]),
        ]
        for c in [*analysis["by_group_size"], analysis["overall"]]
    ]
    header = [
        "group",
        "size",
        "samples",
        "errors",
        "share of predictions naming the background's class",
        "share of errors naming it",
        "expected share of errors (from the controls)",
        "mean probability of the background's class",
    ]
    intro = (
        f"Samples: {analysis['samples']}. Controls: {analysis['control']}. Chance share of errors: "
        f"{number(analysis['chance_share_of_errors'], 4)}."
        + (
            f" {analysis['control_errors']}."
            if analysis["control_errors"] and analysis["control_errors"].startswith("none")
            else ""
        )
    )
    return section(title, tag("p", intro), table(header, rows), id_="background-class")


def _label(label: ClassLabel) -> Html:
    """role (and the background's kind) with the probability on one line, the class's name below."""
    role = ROLE_TEXT[label.role] + (f" ({label.note})" if label.note else "")
    parts = [tag("span", role, class_="role")]
    if label.index is not None:
        parts.append(tag("span", Html("p=" + tag("span", number(label.probability), class_="p")), class_="pr"))
    name = Html(esc(label.name) + (tag("span", label.wnid, class_="wnid") if label.wnid else ""))
    parts.append(tag("span", name, class_="name"))
    return tag("span", join(parts), class_=f"label {label.role}")


def _thumb(thumb: Thumbnail, source: list[str]) -> Html:
    true, predicted = thumb.labels[0], thumb.labels[1]
    alt = f"{thumb.key}: {true.name}, predicted {predicted.name}"
    picture = tag("a", image(alt, *source, width=168, height=168), href=url(*source))
    caption = tag("figcaption", Html(tag("span", thumb.key, class_="key") + join(_label(lab) for lab in thumb.labels)))
    kind = "success" if thumb.correct else "error"
    return tag("figure", Html(picture + caption), class_=f"thumb {kind}", data_key=thumb.key)


def _gallery_section(cells: list[GalleryCell] | None, thumbs: dict[str, list[str]], note: str | None) -> Html:
    title = "Failure galleries"
    if cells is None:
        return section(title, tag("p", note or "", class_="note"), id_="galleries")
    parts: list[Html] = [
        tag(
            "p",
            Html(
                esc(
                    "For each group and size, a seeded sample of the model's errors and successes (hsi report --seed, "
                    "--errors, --successes). Under each image: the true class, the predicted class, the background's "
                    "class (and on a paired config, -10, the class paired with the object's), each with the "
                    "probability the model gave it."
                )
                + tag("span", "", class_="swatch error")
                + "error"
                + tag("span", "", class_="swatch success")
                + "success"
            ),
        )
    ]
    if note:
        parts.append(tag("p", note, class_="note"))
    anchors = []
    for n, cell in enumerate(cells):
        anchor = f"cell-{n}"
        anchors.append(tag("a", f"{cell.title} ({cell.error_count} errors)", href=f"#{anchor}"))
        samples = cell.error_count + cell.success_count
        block = [tag("h3", f"{cell.title}: {cell.error_count} errors in {samples} samples", id=anchor)]
        for kind, chosen, total in (
            ("errors", cell.errors, cell.error_count),
            ("successes", cell.successes, cell.success_count),
        ):
            if not total:
                block.append(tag("p", f"no {kind}"))
                continue
            block.append(tag("p", f"{kind}: {len(chosen)} shown of {total}"))
            if chosen:
                block.append(tag("div", join(_thumb(t, thumbs[t.key]) for t in chosen), class_=f"thumbs {kind}"))
        parts.append(join(block))
    parts.insert(1, tag("nav", join(anchors), class_="cells"))
    return section(title, *parts, id_="galleries")


CONTENTS = (  # a model page's sections, as its table of contents names them
    ("run", "run"),
    ("overall", "overall"),
    ("group-size", "group x size"),
    ("groups", "groups"),
    ("clean", "clean photos and backgrounds"),
    ("tiers", "tiers"),
    ("positions", "positions"),
    ("backgrounds", "backgrounds"),
    ("background-gap", "background gap"),
    ("neutral-controls", "neutral controls"),
    ("background-class", "background class"),
    ("prompt-sets", "prompt sets"),
    ("answers", "answers"),
    ("plots", "plots"),
    ("galleries", "failure galleries"),
)


def _contents(body: str) -> Html:
    """Links to the sections the page holds."""
    return tag(
        "nav", join(tag("a", text, href=f"#{id_}") for id_, text in CONTENTS if f'id="{id_}"' in body), class_="toc"
    )


def model_page(
    model: ModelEval,
    gallery: list[GalleryCell] | None,
    thumbs: dict[str, list[str]],
    gallery_note: str | None,
    source: str | None,
    generator: str,
) -> str:
    """One model's page; `thumbs` maps a sample key to its URL components from this page."""
    body: list[Html] = [section("Run", _run_table(model), id_="run"), *_metric_sections(model)]
    body += prompt_and_answer_sections(model)  # a zero-shot model's prompt sets, a VLM's answers
    if model.plots:
        images = join(image(name, "plots", name) for name, _ in model.plots)
        body.append(section("Plots written by hsi eval", tag("div", images, class_="plots"), id_="plots"))
    body.append(_gallery_section(gallery, thumbs, gallery_note))
    body.insert(0, _contents(join(body)))
    title = f"{model.name} on {model.run['config']} / {model.run['split']}"
    return page(title, revision_line(model.run, source), join(body), "../../", generator)
