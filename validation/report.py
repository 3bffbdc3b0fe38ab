"""The validation report: `validation.json` (every figure, machine-readable) and `validation.md`
(readable, embedded by the card), written next to the dataset, with previews in `previews/`.

The report holds no timestamps or machine paths, so the same dataset gives the same report.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from builder import __version__
from builder.core import markdown
from builder.core.errors import InputError
from builder.core.folders import PREVIEWS_DIR, VALIDATION_REPORT, is_plain_file, own_preview_names, read_json_dict
from builder.core.manifest import (
    COMPOSITES,
    MANIFEST_NAME,
    PARTS,
    Manifest,
    ManifestError,
    format_of,
    write_json_atomic,
)
from builder.core.records import REASONS, VALIDATION_REASONS
from builder.core.taxonomy import sorted_groups
from validation.fill_quality import WORST_FILLS, FillQuality, markdown_section, measure_fill_quality
from validation.integrity import DECODE_ERRORS, IntegrityResult, check_dataset, failure
from validation.scores.report import ScoreReport

JSON_NAME = VALIDATION_REPORT  # named in builder.core.folders, which must know it and cannot import this
MD_NAME = "validation.md"
SCORES_CSV = "scores_per_class.csv"
SCORES_PLOT = "score_distributions.png"
MAX_LISTED = 50  # failures / low-IoU images listed in the readable report (all are in the JSON)


@dataclass
class ValidationReport:
    ok: bool
    json_path: Path
    md_path: Path
    preview_paths: list[Path] = field(default_factory=list)
    payload: dict = field(default_factory=dict)
    integrity: IntegrityResult | None = None


def tool_info() -> dict:
    return {"name": "hard-spurious-imagenet", "version": __version__}


def describe_target(folder: Path) -> dict:
    try:
        manifest = Manifest.read(folder).to_json()
    except (FileNotFoundError, ValueError, ManifestError):
        return {"folder": folder.name, "stage": None}
    return {
        "folder": folder.name,
        "stage": manifest.get("stage"),
        "config": manifest.get("config"),
        "fingerprint": manifest.get("fingerprint"),
        "splits": {s: e.get("num_samples") for s, e in sorted(manifest.get("splits", {}).items())},
    }


def write_scores_outputs(scores: ScoreReport, out_dir: Path) -> dict:
    from validation.scores.plots import plot_distributions, write_class_csv

    csv_path = out_dir / SCORES_CSV
    plot_path = out_dir / PREVIEWS_DIR / SCORES_PLOT
    plot_path.parent.mkdir(parents=True, exist_ok=True)
    write_class_csv(scores.classes, csv_path)
    plot_distributions(scores.classes, plot_path)
    return {**scores.to_json(), "per_class_csv": SCORES_CSV, "plot": f"{PREVIEWS_DIR}/{SCORES_PLOT}"}


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table: the header, its rule, a line per row (cells as they are written)."""
    return markdown.table_lines(header, rows, none="None")


def _group_size_table(group_size: dict[str, int]) -> list[str]:
    """Samples per group (rows, the paper's order first) and size (columns, ascending)."""
    pairs = [name.rsplit("/", 1) for name in group_size]
    groups = sorted_groups(g for g, _ in pairs)
    sizes = sorted({s for _, s in pairs}, key=lambda s: (len(s), s))
    return _table(
        ["group", *(f"{s} px" for s in sizes)], ([g, *(group_size.get(f"{g}/{s}", 0) for s in sizes)] for g in groups)
    )


def _heading(title: str) -> list[str]:
    return ["", f"## {title}", ""]


def _header_section(payload: dict) -> list[str]:
    target = payload["target"]
    if target.get("stage") is None and payload.get("scored"):
        what = f"- Scored: {markdown.inline(payload['scored'])}"
    else:  # a folder's path (from the command line) and the manifest's names: each stays on its line
        stage, config = (markdown.inline(target.get(key), "None") for key in ("stage", "config"))
        what = (
            f"- Folder: {markdown.code(target.get('folder'))} (stage: {stage}, config: {config}, "
            f"fingerprint: {markdown.code(target.get('fingerprint'))})"
        )
    return [
        "# Validation report",
        "",
        what,
        f"- Tool: {payload['tool']['name']} {payload['tool']['version']}",
        f"- Result: **{'PASS' if payload['ok'] else 'FAIL'}**",
    ]


def report_rows(payload: dict) -> list[dict]:
    """Every error row of the report: integrity failures, images left out of the re-detection and
    of the scores, and boxes clipped or dropped to fit their image."""
    scores = payload.get("scores") or {}
    return [
        *((payload.get("integrity") or {}).get("failures") or []),
        *((payload.get("detection") or {}).get("unreadable") or []),
        *(scores.get("unscored") or {}).get("rows", []),
        *(scores.get("box_issues") or {}).get("rows", []),
    ]


def count_rows(rows: list[dict]) -> dict:
    """{total, by_reason}, counted as a manifest counts its errors."""
    by_reason: dict[str, int] = {}
    for row in rows:
        by_reason[row["reason"]] = by_reason.get(row["reason"], 0) + 1
    return {"total": len(rows), "by_reason": dict(sorted(by_reason.items()))}


def _rows_table(rows: list[dict]) -> list[str]:
    """Error rows as a table (the first MAX_LISTED; all are in the JSON)."""
    cells = ([row["reason"], row.get("split"), row.get("shard"), row.get("key"), row["detail"]] for row in rows)
    escaped = [[str(cell or "") for cell in row] for row in cells]  # markdown.table_lines escapes `|`
    lines = _table(["reason", "split", "shard", "key", "detail"], escaped[:MAX_LISTED])
    if len(rows) > MAX_LISTED:
        lines.append(f"\n... and {len(rows) - MAX_LISTED} more in `{JSON_NAME}`.")
    return lines


def _issues_section(issues: dict) -> list[str]:
    """Every error row of the report counted by reason, with what the reason means."""
    rows = (
        [reason, count, REASONS.get(reason, ""), VALIDATION_REASONS[reason][1] if reason in VALIDATION_REASONS else ""]
        for reason, count in issues["by_reason"].items()
    )
    return _heading("Issues") + [
        f"{issues['total']} rows, each with its split, shard and key in `{JSON_NAME}`:",
        "",
        *_table(["reason", "rows", "action", "meaning"], rows),
    ]


def _integrity_section(integrity: dict) -> list[str]:
    """What was checked, the failures (the first MAX_LISTED) and the samples per split."""
    lines = _heading("Integrity") + [
        f"{integrity['shards_checked']} shards and {integrity['samples_checked']} samples checked "
        f"against `{MANIFEST_NAME}`; {integrity['placements_compared']} pasted regions and "
        f"{integrity.get('backgrounds_compared', 0)} backgrounds compared with their parts "
        f"(tolerance {integrity.get('tolerance')} mean grey levels).",
        "",
    ]
    if integrity["failures"]:
        lines += _rows_table(integrity["failures"])
    else:
        lines.append("No failures: every shard, count, key, background and placement checks out.")
    for split, counts in sorted(integrity.get("counts", {}).items()):
        lines += ["", f"Split `{split}`: {counts.get('num_samples')} samples."]
        group_size = counts.get("group_size")
        if group_size:
            lines += [""] + _group_size_table(group_size)
    return lines


def _scores_section(scores: dict) -> list[str]:
    """The class-averaged centre and size scores beside the paper's, and any accuracy correlations."""
    summary = scores["summary"]
    reference = summary.get("paper_reference", {})
    lines = _heading("Centre and size scores (the paper's section 3.3)") + [
        f"Over {summary.get('images')} images of {summary.get('classes')} classes, class-averaged means: "
        f"centre {_fmt(summary.get('centre_class_mean'))}, size {_fmt(summary.get('size_class_mean'))} "
        f"(the paper: {reference.get('centre_class_mean')} and {reference.get('size_class_mean')} over "
        "ImageNet's official val boxes). Per class: "
        f"`{scores['per_class_csv']}`; distributions: `{scores['plot']}`.",
    ]
    issues = scores.get("box_issues")
    if issues:
        counts = ", ".join(f"{reason}: {n}" for reason, n in issues["by_reason"].items())
        lines += [
            "",
            f"Boxes that did not fit their image, clipped or dropped as extract does ({counts}); "
            f"every one is listed in `{JSON_NAME}`.",
        ]
    unscored = scores.get("unscored")
    if unscored:
        lines += ["", f"{len(unscored['rows'])} images are not scored:", ""] + _rows_table(unscored["rows"])
    correlations = scores.get("accuracy_correlations")
    if correlations:
        lines += _correlation_table(correlations)
    return lines


def _correlation_table(correlations: dict) -> list[str]:
    """Spearman and Kendall of the scores with per-class accuracy, with p-values and bootstrap
    intervals; per model when several were given, and the partial Spearman with clean accuracy held
    fixed when it was asked for."""
    partial = "partial_spearman" in correlations["centre"]
    averaged = f", mean over {correlations['averaged_over']} models" if correlations.get("averaged_over") else ""
    level = round(100 * correlations.get("confidence", 0.95))
    header = ["score", "Spearman", "p", "interval", "Kendall tau-b", "p", "interval"]
    if partial:
        header.append("partial Spearman (clean accuracy held fixed)")
    rows = []
    for name in ("centre", "size"):
        row = correlations[name]
        cells = []
        for stat in ("spearman", "kendall_tau_b"):
            interval = row.get(f"{stat}_ci")
            cells += [
                _fmt(row[stat]),
                _fmt(row.get(f"{stat}_p")),
                f"[{_fmt(interval[0])}, {_fmt(interval[1])}]" if interval else "n/a",
            ]
        if partial:
            cells.append(_fmt(row.get("partial_spearman")))
        rows.append([name, *cells])
    for model, result in (correlations.get("models") or {}).items():
        centre, size = result["centre"], result["size"]
        cells = [
            f"{_fmt(centre['spearman'])} / {_fmt(size['spearman'])}",
            "",
            "",
            f"{_fmt(centre['kendall_tau_b'])} / {_fmt(size['kendall_tau_b'])}",
            "",
            "",
        ]
        if partial:
            cells.append(f"{_fmt(centre.get('partial_spearman'))} / {_fmt(size.get('partial_spearman'))}")
        rows.append([f"{model}: centre / size", *cells])
    return [
        "",
        f"Rank correlation with per-class accuracy ({correlations['classes']} classes{averaged}; "
        f"p two-sided, {level}% bootstrap interval over classes):",
        "",
        *_table(header, rows),
    ]


def _detection_section(detection: dict) -> list[str]:
    """The detector, its thresholds and weights, the mean IoU and the images below the threshold."""
    lines = _heading("Box re-detection (Grounding DINO)") + [
        f"Detector `{detection['detector']}` ({detection['source']}), box threshold {detection['box_threshold']}, "
        f"text threshold {detection['text_threshold']}. Weights sha256: "
        + ", ".join(f"`{name}` {digest[:16]}..." for name, digest in sorted(detection["weights_sha256"].items())),
        "",
        f"Mean IoU over {detection['images']} images: {_fmt(detection['mean_iou'])} "
        f"(class-averaged {_fmt(detection['class_mean_iou'])}; the paper reports 0.875). "
        f"{len(detection['below_threshold'])} images below IoU {detection['iou_threshold']}"
        + (":" if detection["below_threshold"] else "."),
    ]
    if detection["below_threshold"]:
        below = detection["below_threshold"][:MAX_LISTED]
        lines += [
            "",
            *_table(["image", "wnid", "mean IoU"], ([r["image_id"], r["wnid"], f"{r['mean_iou']:.3f}"] for r in below)),
        ]
    unreadable = detection.get("unreadable") or []
    if unreadable:
        detector_failed = any(row["reason"] == "backend-failed" for row in unreadable)
        what = "could not be loaded or the detector failed on them" if detector_failed else "could not be loaded"
        lines += ["", f"{len(unreadable)} images {what} and are not re-detected:", ""]
        lines += _rows_table(unreadable)
    return lines


def _previews_section(previews: list[str]) -> list[str]:
    return _heading("Previews") + [f"![{Path(p).stem}]({p})" for p in previews]


def render_markdown(payload: dict) -> str:
    """`validation.md`: the header, then a section per part of the payload that is present."""
    lines = _header_section(payload)
    if payload.get("issues", {}).get("total"):
        lines += _issues_section(payload["issues"])
    if payload.get("integrity"):
        lines += _integrity_section(payload["integrity"])
    if payload.get("scores"):
        lines += _scores_section(payload["scores"])
    if payload.get("detection"):
        lines += _detection_section(payload["detection"])
    if payload.get("fill_quality"):
        lines += markdown_section(payload["fill_quality"])
    if payload.get("previews"):
        lines += _previews_section(payload["previews"])
    return "\n".join(lines) + "\n"


def _write_or_refuse(out_dir: Path, write):
    """`write()`, with a full or read-only disk turned into one clear error (and no report left)."""
    try:
        return write()
    except OSError as exc:
        (out_dir / f".{MD_NAME}.tmp").unlink(missing_ok=True)
        invalidate_report(out_dir)
        raise InputError(
            f"cannot write the report to {out_dir}: {exc.strerror or exc}; free space or pass "
            "--out DIR on writable storage"
        ) from None


def write_report(out_dir: Path, payload: dict) -> tuple[Path, Path]:
    """`validation.md`, then `validation.json` (what release trusts) last, each atomically; a
    failed write (a full or read-only disk) leaves neither a partial file nor the old report."""
    json_path, md_path = out_dir / JSON_NAME, out_dir / MD_NAME

    def write() -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        md_tmp = out_dir / f".{MD_NAME}.tmp"
        md_tmp.write_text(render_markdown(payload), "utf-8")
        md_tmp.replace(md_path)
        write_json_atomic(json_path, payload)

    _write_or_refuse(out_dir, write)
    return json_path, md_path


# The pictures validation draws: only these, and only when the earlier report lists them, are
# removed with that report, so previews/ never keeps a sheet the new report does not vouch for.
PREVIEW_NAMES = frozenset({"contact_sheet.png", "parts_grid.png", SCORES_PLOT, WORST_FILLS})


def listed_previews(out_dir: Path) -> list[Path]:
    """The previews an earlier report in `out_dir` lists that validation itself draws (regular files
    in `previews/`, never a link); nothing when there is no readable report."""
    names = own_preview_names({}, read_json_dict(out_dir / JSON_NAME)) & PREVIEW_NAMES
    return [path for path in (out_dir / PREVIEWS_DIR / name for name in sorted(names)) if is_plain_file(path)]


def invalidate_report(out_dir: Path) -> None:
    """Remove an earlier report before validating, so a run that crashes or is killed never leaves
    a PASS that vouches for what it did not check; then the pictures it listed, which the new run
    draws again if it still can (a sheet it cannot draw must not outlive the report)."""
    stale_previews = listed_previews(out_dir)
    for path in [out_dir / JSON_NAME, out_dir / MD_NAME, *stale_previews]:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise InputError(
                f"cannot remove the earlier {path.relative_to(out_dir)} in {out_dir}: {exc.strerror or exc}; "
                "pass --out DIR on writable storage"
            ) from None


def validate_dataset(
    dataset_dir: Path,
    *,
    parts_dir: Path | None = None,
    previews: bool = True,
    scores: ScoreReport | None | bool | Callable[[set[str] | None], ScoreReport] = None,
    detection: dict | None = None,
    tolerance: float | None = None,
    check_integrity: bool = True,
    report_dir: Path | None = None,
    workers: int = 1,
    scored: str | None = None,
) -> ValidationReport:
    """Validate a composed dataset (or a parts folder) and write the reports (next to it, or in
    `report_dir`). An earlier report there is removed first.

    `detection` is computed by the caller (it needs a detector and source images) and folded in.
    `scores`: a computed ScoreReport; a function of the dataset's source ids (None for a folder of
    parts) giving one; None to compute them from the parts' boxes when parts are at hand (a parts
    folder, or `parts_dir`, restricted to the dataset's own source images); or False to leave them out.
    """
    from validation.integrity import DEFAULT_PLACEMENT_TOLERANCE

    dataset_dir = Path(dataset_dir)
    out_dir = Path(report_dir) if report_dir is not None else dataset_dir
    if (out_dir / PREVIEWS_DIR).is_symlink():  # its sheets would be drawn (and old ones removed) outside
        raise InputError(
            f"{out_dir / PREVIEWS_DIR} is a link: validation draws its sheets only into a real folder; "
            "remove the link, or pass --out DIR"
        )
    invalidate_report(out_dir)
    integrity = None
    if check_integrity:
        tolerance = DEFAULT_PLACEMENT_TOLERANCE if tolerance is None else tolerance
        integrity = check_dataset(dataset_dir, parts_dir, tolerance, workers)
    target = describe_target(dataset_dir) if check_integrity else {"folder": out_dir.name, "stage": None}
    own_sources = (
        set(integrity.source_ids) if integrity is not None and format_of(target.get("stage")) == COMPOSITES else None
    )
    fill = None
    fill_parts = dataset_dir if format_of(target.get("stage")) == PARTS else parts_dir
    if integrity is not None and fill_parts is not None:
        fill = _fill_quality(fill_parts, own_sources, integrity, checked_by_integrity=fill_parts == dataset_dir)
    scores_error = None
    if callable(scores):
        scores = scores(own_sources)
    if scores is None:
        scores, scores_error = _scores_from_parts(
            dataset_dir if format_of(target.get("stage")) == PARTS else parts_dir, own_sources
        )
    if scores is False:
        scores = None
    written_scores = None
    if scores is not None:
        written_scores = _write_or_refuse(out_dir, lambda: write_scores_outputs(scores, out_dir))
    payload: dict = {
        "tool": tool_info(),
        "target": target,
        "integrity": integrity.to_json() if integrity else None,
        "scores": written_scores,
        "detection": detection,
        "scores_error": scores_error,
        "parts_checked": parts_dir is not None,
    }
    if fill is not None:
        payload["fill_quality"] = None  # filled in once the sheet is drawn (or not)
    if scored:
        payload["scored"] = scored
    if integrity is not None:
        # the sha256 of every shard as read, for release to compare with the manifest it ships
        payload["shards"] = dict(sorted(integrity.shard_sha256.items()))
    preview_paths: list[Path] = []
    preview_errors: list[str] = []
    if previews and integrity is not None and format_of(target.get("stage")) is not None:
        preview_paths, preview_errors = make_previews(
            dataset_dir, target["stage"], out_dir / PREVIEWS_DIR, parts_dir, own_sources, fill
        )
    if fill is not None:
        payload["fill_quality"] = fill.to_json()
    if scores is not None:
        preview_paths.append(out_dir / PREVIEWS_DIR / SCORES_PLOT)
    payload["previews"] = [p.relative_to(out_dir).as_posix() for p in preview_paths]
    payload["preview_errors"] = preview_errors
    ok = integrity.ok if integrity is not None else True
    if integrity is not None and integrity.ok and format_of(target.get("stage")) == COMPOSITES:
        # integrity compared every shard's sha256 with the manifest; release compares this record again
        payload["shards"] = Manifest.read(dataset_dir).shard_sha256()
    payload["ok"] = ok
    payload["issues"] = count_rows(report_rows(payload))
    json_path, md_path = write_report(out_dir, payload)
    return ValidationReport(ok, json_path, md_path, preview_paths, payload, integrity)


def _scores_from_parts(parts_dir: Path | None, only: set[str] | None) -> tuple[ScoreReport | None, str | None]:
    """Scores from the parts' boxes (of the source images in `only`, when given), or why they could
    not be read (reported, never fatal here)."""
    from validation.scores.inputs import boxes_from_parts
    from validation.scores.report import compute_scores

    if parts_dir is None:
        return None, None
    try:
        items = boxes_from_parts(parts_dir)
        return compute_scores([i for i in items if only is None or i.image_id in only]), None
    except (OSError, ValueError, KeyError, TypeError, tarfile.TarError) as exc:  # a json that is not an object
        return None, f"{type(exc).__name__}: {exc}"


def _fill_quality(
    parts: Path, own_sources: set[str] | None, integrity: IntegrityResult, checked_by_integrity: bool
) -> FillQuality | None:
    """The parts' fill-score figures; a manifest summary that disagrees with the shards is an
    integrity failure, and so (when integrity did not read these parts itself: a composed dataset's
    --parts) is a part whose fill_scores is bad. None when the parts do not read at all (integrity,
    or the --parts check before it, names why)."""
    try:
        fill = measure_fill_quality(parts, own_sources)
    except (ManifestError, OSError, ValueError) as exc:
        integrity.failures.append(failure("fill-summary", f"the parts' fill scores do not read: {exc}"))
        return None
    integrity.failures.extend(fill.mismatches)
    if not checked_by_integrity:
        integrity.failures.extend(fill.rows)
    return fill


def _worst_fills_title(fill: FillQuality) -> str:
    own = " of the dataset's own source images" if fill.restricted else ""
    splits = ", ".join(sorted(fill.splits))
    return (
        f"Worst fills: the {len(fill.worst)} lowest-scoring of {fill.candidates} parts with fill scores{own} "
        f"(split{'s' if len(fill.splits) > 1 else ''} {splits}), worst first"
    )


def make_previews(
    dataset_dir: Path,
    stage: str,
    previews_dir: Path,
    parts_dir: Path | None,
    own_sources: set[str] | None = None,
    fill: FillQuality | None = None,
) -> tuple[list[Path], list[str]]:
    """The contact sheet (composed datasets), the parts grid (when parts are at hand) and the
    worst fills (when some part has fill scores), and why a sheet could not be drawn (a dataset
    too broken to read; integrity names the cause)."""
    from validation.fill_quality import worst_pixels
    from validation.previews import contact_sheet, parts_grid, worst_fills_sheet

    made, errors = [], []
    jobs = []
    if format_of(stage) == COMPOSITES:
        jobs.append(("contact sheet", lambda: contact_sheet(dataset_dir, previews_dir / "contact_sheet.png")))
    parts = dataset_dir if format_of(stage) == PARTS else parts_dir
    if parts is not None:
        jobs.append(("parts grid", lambda: parts_grid(parts, previews_dir / "parts_grid.png", only=own_sources)))
    if fill is not None and fill.worst and parts is not None:
        jobs.append(
            (
                "worst fills",
                lambda: worst_fills_sheet(
                    worst_pixels(parts, fill), _worst_fills_title(fill), previews_dir / WORST_FILLS
                ),
            )
        )
    for name, draw in jobs:
        try:
            made.append(draw())
        except (*DECODE_ERRORS, KeyError, TypeError, AttributeError, tarfile.TarError) as exc:  # a json not an object
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    if fill is not None and any(path.name == WORST_FILLS for path in made):
        fill.sheet = f"{PREVIEWS_DIR}/{WORST_FILLS}"
    return made, errors
