"""leaderboard.csv / leaderboard.md: one row per evaluated model on the same data, sorted by worst
group (best first), rebuilt from every model folder's eval.json in the output folder; and the check
that skips a model already evaluated on the same data revision with the same settings.

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

from .eval_reader import checked_report, model_folders
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


def leaderboard_row(report: dict, folder_name: str) -> dict:
    metrics = report["metrics"]
    row = {
        "model": report["model"]["spec"],
        "folder": folder_name,
        "checkpoint_sha256": report["model"].get("checkpoint_sha256") or "",
        "preprocessing": "crop_pct " + str(report["preprocessing"]["crop_pct"])
        if report["preprocessing"].get("cropped")
        else "canvas as is",
        "samples": metrics.get("samples"),  # older or hand-made reports may not count them
        "limit": report["data"].get("limit") or "",
        "partial": "true" if is_partial(report) else "false",
        "top1": metrics.get("overall", {}).get("top1", {}).get("value"),
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


def collect(root: Path, identity: dict) -> list[tuple[dict, dict]]:
    """(row, report) of every model folder under `root` evaluated on the data revision `identity`."""
    return [
        (leaderboard_row(report, name), report)
        for name, report in model_reports(root)
        if data_identity(report) == identity
    ]


def _sort_key(row: dict):
    worst = row.get("worst_group_top1")
    return (
        row["partial"] == "true",  # partial runs after every full one
        -(worst if worst is not None else row.get("top1") or 0.0),
        -(row.get("top1") or 0.0),
        row["model"],
    )


def _csv_text(columns: list[str], rows: list[dict]) -> str:
    return dict_table_text(columns, rows)  # a model or group name never reaches a spreadsheet as a formula


def write_leaderboard(owned: OwnedFolder, identity: dict) -> tuple[Path, Path, list[dict]]:
    """leaderboard.csv and leaderboard.md of the data revision `identity`, from every model folder's
    eval.json in `owned` (not only the models of this run), written through `owned`."""
    entries = sorted(collect(owned.root, identity), key=lambda item: _sort_key(item[0]))
    failures = [
        (name, record)
        for name, record in model_failures(owned.root)
        if {key: record["data"].get(key) for key in DATA_KEYS} == identity
    ]
    rows = [{**row, "status": "ok", "error": ""} for row, _ in entries]
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
        "Sorted by worst-group top-1 (best first); intervals are 95% bootstrap intervals over source images.",
        "",
    ]
    if any_partial:
        lines += ["Partial runs (`--limit`) cover only their first samples: listed after the full runs, unranked.", ""]
    table_rows = []
    rank = 0
    for row, report in entries:
        metrics = report["metrics"]
        if metrics.get("has_groups"):
            worst = metrics["groups_summary"]["worst_group"]
            worst_text, mean_text = f"{worst['group']} {fmt(worst)}", fmt(metrics["groups_summary"]["mean_over_groups"])
        else:
            worst_text = mean_text = "n/a (no groups)"
        partial = row["partial"] == "true"
        rank += not partial
        cells = [
            "-" if partial else rank,
            code(row["model"]),
            row["preprocessing"],
            fmt(metrics.get("overall", {}).get("top1")),
            mean_text,
            worst_text,
            (row["checkpoint_sha256"] or "")[:12],
        ]
        if any_partial:
            cells.append(f"partial: first {row['limit']} samples" if partial else "full")
        table_rows.append(cells)
    header = ["rank", "model", "preprocessing", "top-1", "mean over groups", "worst group", "checkpoint sha256"]
    lines.append(md_table(header + (["run"] if any_partial else []), table_rows))
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
