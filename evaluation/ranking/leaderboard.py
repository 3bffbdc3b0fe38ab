"""leaderboard.csv / leaderboard.md: one row per evaluated model on the same data, sorted by worst
group (best first), rebuilt from every model folder's eval.json in the output folder; and the check
that skips a model already evaluated on the same data revision with the same settings.

Each row names the model by its entry (entry.json's `name`, `--entry-name`; else its spec), shows
its preprocessing (applied, declared or unknown) and its clean-photo top-1 when the evaluation has
one. Ranks follow evaluation.ranking.ranks: ties share a rank (1, 2, 2, 4), and the entries whose
preprocessing is unknown are ranked apart, in their own section below the others.

Every model folder is read through the one reader of evaluation folders (eval_reader) before any
model runs, so a broken report in another model's folder is one line naming the file and the
field, not a traceback after the whole run. A partial run (`--limit`) has its own folder and its own
row, marked as partial and listed after the full runs, never in their place.

A model of a sweep that failed (could not be loaded, crashed, ran out of memory) leaves `failed.json`
in its model folder (its spec, the data revision, the stage and the one-line reason): the
leaderboard lists it after the evaluated models, with `status` `failed` and its `error` in the CSV
and under "Failed models" in the Markdown. A later run that evaluates (or skips) the model removes
its `failed.json`.
"""

from __future__ import annotations

from pathlib import Path

from builder.core.csv_cells import dict_table_text
from builder.core.markdown import code, inline
from builder.core.owned import OwnedFolder
from builder.core.untrusted import Fields, read_json
from evaluation.analysis.report import EVAL_JSON, fmt, md_table
from evaluation.model_formats.models import DECLARED

from .eval_reader import EvaluatedModel, checked_report, model_folders
from .provenance import preprocessing_status
from .ranks import (
    TIES,
    UNKNOWN_REASON,
    UNKNOWN_STATUS,
    UNKNOWN_TITLE,
    by_preprocessing,
    competition_ranks,
    order_key,
)
from .report_fields import is_partial

LEADERBOARD_CSV, LEADERBOARD_MD = "leaderboard.csv", "leaderboard.md"
FAILED_JSON = "failed.json"  # a model folder's record of a failed evaluation
FAILURE_SCHEMA, FAILURE_SCHEMA_VERSION = "hsi-eval-failure", 1
FAILURE_STAGES = ("load", "evaluate", "write")  # loading the model, predicting and its passes, its files
DATA_KEYS = ("source", "config", "split", "fingerprint")  # one leaderboard per data revision


def run_identity(report: dict) -> dict:
    """What makes two evaluations the same: data revision, model and weights, preprocessing, label space."""
    data = report["data"]
    return {
        "data": {k: data.get(k) for k in (*DATA_KEYS, "limit")},
        "model": {k: report["model"].get(k) for k in ("spec", "checkpoint_sha256", "identity")},
        # what was applied; the words, the status and the resize a crop implies change no number
        "preprocessing": {
            k: v for k, v in report["preprocessing"].items() if k not in ("description", "status", "resize")
        },
        "label_space": report["label_space"].get("name"),
    }


def data_identity(report: dict) -> dict:
    """The data revision a report was measured on: the rows of one leaderboard share it."""
    return {k: report["data"].get(k) for k in DATA_KEYS}


def model_reports(root: Path) -> list[tuple[str, dict]]:
    """(folder name, checked eval.json) of every model folder under `root`, in name order, read by the
    one reader of evaluation folders (eval_reader: a linked model folder is refused, never followed)."""
    return [(model.folder.name, model.report) for model in model_folders(root)]


def failure_record(spec: str, data: dict, stage: str, error: str, reason: str) -> dict:
    """The failed.json of a model that failed at `stage` on the data revision `data` (DATA_KEYS and limit)."""
    return {
        "schema": FAILURE_SCHEMA,
        "schema_version": FAILURE_SCHEMA_VERSION,
        "model": {"spec": spec},
        "data": {key: data.get(key) for key in (*DATA_KEYS, "limit")},
        "stage": stage,
        "error": error,
        "reason": reason,
    }


def checked_failure(path: Path) -> dict:
    """A failed.json, checked for every field the leaderboard reads (one line naming the file and
    the field otherwise)."""
    record = read_json(path, FAILED_JSON)
    top = Fields(record, path)
    top.string("schema", choices=(FAILURE_SCHEMA,))
    top.integer("schema_version", low=1, high=FAILURE_SCHEMA_VERSION)
    top.object("model").string("spec")
    data = top.object("data")
    data.string("source")
    data.string("config", None)
    data.string("split")
    data.string("fingerprint", None)
    data.integer("limit", None, low=1)
    top.string("stage", choices=FAILURE_STAGES)
    top.string("error")
    top.string("reason")
    return record


def model_failures(root: Path) -> list[tuple[str, dict]]:
    """(folder name, checked failed.json) of every model folder under `root` holding one, in name
    order; a linked model folder is never read (model_folders refuses it)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.iterdir()):
        record = folder / FAILED_JSON
        if not folder.is_symlink() and folder.is_dir() and (record.exists() or record.is_symlink()):
            found.append((folder.name, checked_failure(record)))
    return found


def already_evaluated(folder: Path, identity: dict) -> bool:
    path = folder / EVAL_JSON
    if not path.is_file():
        return False
    return run_identity(checked_report(path)) == identity


def preprocessing_text(pre: dict, status: str) -> str:
    """A result's preprocessing as a leaderboard shows it: the crop (or the canvas as it is), said to
    be declared when the predictions' maker declared it, or "unknown"."""
    if status == UNKNOWN_STATUS:
        return "unknown"
    shown = "crop_pct " + str(pre["crop_pct"]) if pre.get("cropped") else "canvas as is"
    return f"declared: {shown}" if status == DECLARED else shown


def leaderboard_row(report: dict, folder_name: str, name: str | None = None) -> dict:
    """The row of a checked eval.json (its model folder `folder_name`, its entry's `name`, else its spec)."""
    metrics = report["metrics"]
    spec = report["model"]["spec"]
    status = preprocessing_status(report["preprocessing"], spec)
    row = {
        "name": name if name is not None else spec,
        "model": spec,
        "folder": folder_name,
        "checkpoint_sha256": report["model"].get("checkpoint_sha256") or "",
        "preprocessing": preprocessing_text(report["preprocessing"], status),
        "preprocessing_status": status,
        "samples": metrics.get("samples"),  # older or hand-made reports may not count them
        "limit": report["data"].get("limit") or "",
        "partial": "true" if is_partial(report) else "false",
        "top1": metrics.get("overall", {}).get("top1", {}).get("value"),
        "clean_top1": ((report.get("clean") or {}).get("top1") or {}).get("value"),
    }
    if metrics.get("has_groups"):
        summary = metrics["groups_summary"]
        worst = summary["worst_group"]
        row.update(
            worst_group=worst["group"],
            worst_group_top1=worst.get("value"),  # checked_report lets value be absent (null)
            worst_group_low=worst.get("low"),
            worst_group_high=worst.get("high"),
            mean_over_groups=summary["mean_over_groups"].get("value"),
        )
        for group in metrics["by_group"]:
            row[f"{group['group']}_top1"] = group["top1"].get("value")
    return row


def leaderboard_models(root: Path) -> list[tuple[EvaluatedModel, dict | None]]:
    """Every model folder under `root` with its entry.json (None without one), both checked: the
    leaderboard names each model by its entry."""
    return [(model, model.read_entry()) for model in model_folders(root)]


def collect(root: Path, identity: dict) -> list[tuple[dict, dict]]:
    """(row, report) of every model folder under `root` evaluated on the data revision `identity`."""
    return [
        (leaderboard_row(model.report, model.folder.name, entry["name"] if entry else None), model.report)
        for model, entry in leaderboard_models(root)
        if data_identity(model.report) == identity
    ]


def _csv_text(columns: list[str], rows: list[dict]) -> str:
    return dict_table_text(columns, rows)  # a model or group name never reaches a spreadsheet as a formula


def _model_text(row: dict) -> str:
    """The model's name, with its spec when the entry names it otherwise."""
    return code(row["model"]) if row["name"] == row["model"] else f"{inline(row['name'])} ({code(row['model'])})"


def _table(entries: list[tuple[dict, dict]], any_partial: bool) -> str:
    """The Markdown table of (row, report) pairs in leaderboard order, ranked among themselves."""
    table_rows = []
    for (row, report), rank in zip(entries, competition_ranks([row for row, _ in entries])):
        metrics = report["metrics"]
        if metrics.get("has_groups"):
            worst = metrics["groups_summary"]["worst_group"]
            worst_text, mean_text = f"{worst['group']} {fmt(worst)}", fmt(metrics["groups_summary"]["mean_over_groups"])
        else:
            worst_text = mean_text = "n/a (no groups)"
        cells = [
            "-" if rank is None else rank,
            _model_text(row),
            row["preprocessing"],
            fmt(metrics.get("overall", {}).get("top1")),
            fmt((report.get("clean") or {}).get("top1")),
            mean_text,
            worst_text,
            (row["checkpoint_sha256"] or "")[:12],
        ]
        if any_partial:
            cells.append(f"partial: first {row['limit']} samples" if rank is None else "full")
        table_rows.append(cells)
    header = ["rank", "model", "preprocessing", "top-1", "clean top-1", "mean over groups", "worst group"]
    return md_table([*header, "checkpoint sha256", *(["run"] if any_partial else [])], table_rows)


def write_leaderboard(owned: OwnedFolder, identity: dict) -> tuple[Path, Path, list[dict]]:
    """leaderboard.csv and leaderboard.md of the data revision `identity`, from every model folder's
    eval.json (and entry.json) in `owned` (not only the models of this run), written through `owned`:
    the entries whose preprocessing is known ranked first, those whose preprocessing is unknown
    ranked apart below them (evaluation.ranking.ranks), then the failed models."""
    known, unknown = by_preprocessing(
        sorted(collect(owned.root, identity), key=lambda item: order_key(item[0])), lambda item: item[0]
    )
    failures = [
        (name, record)
        for name, record in model_failures(owned.root)
        if {key: record["data"].get(key) for key in DATA_KEYS} == identity
    ]
    rows = []
    for part in (known, unknown):
        ranks = competition_ranks([row for row, _ in part])
        rows += [{"rank": rank or "", **row, "status": "ok", "error": ""} for (row, _), rank in zip(part, ranks)]
    rows += [
        {"model": record["model"]["spec"], "folder": name, "status": "failed", "error": record["reason"]}
        for name, record in sorted(failures, key=lambda item: (item[1]["model"]["spec"], item[0]))
    ]
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    csv_path = owned.write_text(LEADERBOARD_CSV, _csv_text(columns, rows))
    any_partial = any(row.get("partial") == "true" for row in rows)
    lines = [
        # names from the data or the command line: one heading line whatever they hold
        f"# Leaderboard: {inline(identity['config'])} / {inline(identity['split'])} ({inline(identity['source'])})",
        "",
        "Sorted by worst-group top-1 (best first); intervals are 95% bootstrap intervals over source images. " + TIES,
        "",
    ]
    if any_partial:
        lines += ["Partial runs (`--limit`) cover only their first samples: listed after the full runs, unranked.", ""]
    if known or not unknown:
        lines.append(_table(known, any_partial))
    if unknown:
        lines += ["", f"## {UNKNOWN_TITLE}", "", UNKNOWN_REASON, "", _table(unknown, any_partial)]
    if failures:
        lines += [
            "",
            "## Failed models",
            "",
            f"{len(failures)} model(s) could not be evaluated; each folder's `{FAILED_JSON}` holds the reason. Run the "
            "same command again to retry them (the evaluated models are skipped).",
            "",
            md_table(
                ["model", "folder", "stage", "reason"],
                [[code(r["model"]["spec"]), name, r["stage"], r["reason"]] for name, r in failures],
            ),
        ]
    md_path = owned.write_text(LEADERBOARD_MD, "\n".join(lines) + "\n")
    return csv_path, md_path, rows
