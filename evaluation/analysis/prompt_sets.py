"""A zero-shot model's prompt sets, compared from its predictions alone: one metrics block per set
(`compute_metrics` on that set's prediction columns) and, for every set besides the reference
(the first), its top-1 minus the reference's per group x size, with a bootstrap interval paired by
sample: both sets classified the same images, so the resampled source images carry both sets'
results (`metrics.rate_difference` over per-source sums, `bootstrap.interval`).

Two sets that predict alike differ by exactly 0 in every resample, so their interval has zero width.
"""

from __future__ import annotations

import pandas as pd

from evaluation.zero_shot.record import SET_COLUMNS, record_set_names, set_column
from evaluation.zero_shot.templates import KEPT_BORDERLINE, REMOVED_FOR_SCALE

from .bootstrap import BootstrapSettings
from .metrics import compute_metrics, group_sort_key, has_group_metadata, prepare, rate_difference

NO_SCALE = "no-scale"


def set_frame(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """The predictions as prompt set `name` made them: its columns in the plain ones' place, and
    correct / correct_top5 derived from them (null on error rows)."""
    chosen = frame.copy()
    for column in SET_COLUMNS:
        chosen[column] = frame[set_column(column, name)]
    ok = chosen["status"] == "ok"
    label = chosen["label_class"]
    chosen["correct"] = (chosen["pred_class"] == label).where(ok, None)
    hits = [top is not None and label_class in list(top) for label_class, top in zip(label, chosen["top5_class"])]
    chosen["correct_top5"] = pd.Series(hits, index=chosen.index).where(ok, None)
    return chosen


def _difference_cell(name: str, cell_a: pd.DataFrame, cell_b: pd.DataFrame, settings: BootstrapSettings) -> dict:
    difference = rate_difference(name, cell_a, cell_b, "correct", settings).to_json()
    difference["n"] = int(len(cell_a))  # the samples both sets classified, each counted once
    return {
        "set_top1": float(cell_a["correct"].mean()),
        "reference_top1": float(cell_b["correct"].mean()),
        "difference": difference,
    }


def paired_difference(
    name: str, reference: str, frame: pd.DataFrame, base: pd.DataFrame, settings: BootstrapSettings
) -> dict:
    """Top-1 of set `name` (`frame`, prepared) minus the reference's (`base`, the same rows):
    overall, per group and per group x size."""
    label = f"prompts:{name}-{reference}"
    result = {
        "set": name,
        "reference": reference,
        "overall": _difference_cell(f"{label}:overall", frame, base, settings),
    }
    if not has_group_metadata(frame):
        return result
    for keys, section in ((["group"], "by_group"), (["group", "size"], "by_group_size")):
        rows = []
        for values, cell in frame.groupby(keys, sort=True):
            values = values if isinstance(values, tuple) else (values,)
            other = base.loc[cell.index]
            row = {k: (int(v) if k == "size" else v) for k, v in zip(keys, values)}
            where = "/".join(str(v) for v in values)
            rows.append({**row, **_difference_cell(f"{label}:{where}", cell, other, settings)})
        result[section] = sorted(rows, key=lambda r: (group_sort_key(r["group"]), r.get("size", 0)))
    return result


def prompt_set_sections(frame: pd.DataFrame, metadata: dict, settings: BootstrapSettings) -> dict:
    """eval.json's `zero_shot` (the record and one metrics block per set) and `paired_differences`
    (each set minus the reference) for a predictions table of prompt sets; {} for any other."""
    record = metadata.get("zero_shot")
    if not record:
        return {}
    names = record_set_names(record)
    size = metadata["label_space"]["classes"]
    frames = {name: set_frame(frame, name) for name in names}
    sets = {
        entry["name"]: {
            "templates": len(entry.get("templates") or ()),
            "sha256": entry["sha256"],
            "cache_key": entry.get("cache_key"),
            "metrics": compute_metrics(frames[entry["name"]], label_space_size=size, settings=settings),
        }
        for entry in record["sets"]
    }
    section = {
        "class_names": record["class_names"],
        "label_space": record.get("label_space"),
        "label_space_source": record.get("label_space_source"),
        "kind": record.get("kind"),
        "reference": names[0],
        "order": list(names),
        "sets": sets,
        "repeated_names": record.get("repeated_names") or {},
    }
    if NO_SCALE in names:
        section["removed_for_scale"] = [{"template": t, "why": why} for t, why in REMOVED_FOR_SCALE]
        section["kept_borderline"] = [{"template": t, "why": why} for t, why in KEPT_BORDERLINE]
    prepared = {name: prepare(frames[name])[0] for name in names}
    differences = [
        paired_difference(name, names[0], prepared[name], prepared[names[0]], settings) for name in names[1:]
    ]
    return {"zero_shot": section, "paired_differences": differences}


def prompt_identity(report: dict) -> list | None:
    """The prompt sets an eval.json was measured with, as `record.run_prompt_identity` gives them
    for a run about to start: each set's name and cache key, in order; None without prompt sets."""
    section = report.get("zero_shot")
    if not isinstance(section, dict) or not isinstance(section.get("sets"), dict):
        return None
    order = section.get("order") if isinstance(section.get("order"), list) else []
    sets = section["sets"]
    return [
        [name, (sets.get(name) or {}).get("cache_key") or (sets.get(name) or {}).get("sha256")]
        for name in order
        if isinstance(name, str) and isinstance(sets.get(name), dict)
    ]


__all__ = ["prompt_set_sections", "paired_difference", "set_frame", "prompt_identity"]
