"""leaderboard.csv / leaderboard.md: one row per evaluated model on the same data, sorted by worst
group (best first), built from each model's eval.json; and the check that skips a model already
evaluated on the same data revision with the same settings."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .report import EVAL_JSON, fmt, md_table

LEADERBOARD_CSV, LEADERBOARD_MD = "leaderboard.csv", "leaderboard.md"


def run_identity(report: dict) -> dict:
    """What makes two evaluations the same: data revision, model and weights, preprocessing, label space."""
    data = report["data"]
    return {
        "data": {k: data.get(k) for k in ("source", "config", "split", "fingerprint", "limit")},
        "model": {k: report["model"].get(k) for k in ("spec", "checkpoint_sha256")},
        "preprocessing": {k: v for k, v in report["preprocessing"].items() if k != "description"},
        "label_space": report["label_space"].get("name"),
    }


def already_evaluated(folder: Path, identity: dict) -> bool:
    path = folder / EVAL_JSON
    if not path.is_file():
        return False
    try:
        return run_identity(json.loads(path.read_text("utf-8"))) == identity
    except (ValueError, KeyError):
        return False


def leaderboard_row(report: dict, folder_name: str) -> dict:
    metrics = report["metrics"]
    row = {
        "model": report["model"]["spec"],
        "folder": folder_name,
        "checkpoint_sha256": report["model"].get("checkpoint_sha256") or "",
        "preprocessing": "crop_pct " + str(report["preprocessing"]["crop_pct"])
        if report["preprocessing"].get("cropped")
        else "canvas as is",
        "samples": metrics["samples"],
        "top1": metrics.get("overall", {}).get("top1", {}).get("value"),
    }
    if metrics.get("has_groups"):
        summary = metrics["groups_summary"]
        worst = summary["worst_group"]
        row.update(
            worst_group=worst["group"],
            worst_group_top1=worst["value"],
            worst_group_low=worst["low"],
            worst_group_high=worst["high"],
            mean_over_groups=summary["mean_over_groups"]["value"],
        )
        for group in metrics["by_group"]:
            row[f"{group['group']}_top1"] = group["top1"]["value"]
    return row


def collect(out_dir: Path, data_identity: dict) -> list[tuple[dict, dict]]:
    """(row, report) of every model folder under out_dir evaluated on the same data."""
    found = []
    for path in sorted(Path(out_dir).glob(f"*/{EVAL_JSON}")):
        report = json.loads(path.read_text("utf-8"))
        if run_identity(report)["data"] == data_identity:
            found.append((leaderboard_row(report, path.parent.name), report))
    return found


def _sort_key(row: dict):
    worst = row.get("worst_group_top1")
    return (-(worst if worst is not None else row.get("top1") or 0.0), -(row.get("top1") or 0.0), row["model"])


def write_leaderboard(out_dir: Path, data_identity: dict) -> tuple[Path, Path, list[dict]]:
    entries = sorted(collect(out_dir, data_identity), key=lambda item: _sort_key(item[0]))
    rows = [row for row, _ in entries]
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    csv_path, md_path = Path(out_dir) / LEADERBOARD_CSV, Path(out_dir) / LEADERBOARD_MD
    with open(csv_path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"# Leaderboard: {data_identity['config']} / {data_identity['split']} ({data_identity['source']})",
        "",
        "Sorted by worst-group top-1 (best first); intervals are 95% bootstrap intervals over source images.",
        "",
    ]
    table_rows = []
    for rank, (row, report) in enumerate(entries, 1):
        metrics = report["metrics"]
        if metrics.get("has_groups"):
            worst = metrics["groups_summary"]["worst_group"]
            worst_text, mean_text = f"{worst['group']} {fmt(worst)}", fmt(metrics["groups_summary"]["mean_over_groups"])
        else:
            worst_text = mean_text = "n/a (no groups)"
        table_rows.append(
            [
                rank,
                f"`{row['model']}`",
                row["preprocessing"],
                fmt(metrics.get("overall", {}).get("top1")),
                mean_text,
                worst_text,
                (row["checkpoint_sha256"] or "")[:12],
            ]
        )
    lines.append(
        md_table(
            ["rank", "model", "preprocessing", "top-1", "mean over groups", "worst group", "checkpoint sha256"],
            table_rows,
        )
    )
    md_path.write_text("\n".join(lines) + "\n", "utf-8")
    return csv_path, md_path, rows
