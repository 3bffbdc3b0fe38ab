"""Metrics from predictions only: accuracies per group x size, tier, position x size and background
kind, the group summary (mean and worst), the background gap, the neutral-background controls and
the background-class error analysis, each with a bootstrap interval over source images.

Definitions (all on rows with status "ok"):
- top-1 / top-5: the label's class is the first / among the first five scored classes.
- background gap (ImageNet-9's BG-gap, Mixed-Same minus Mixed-Rand): accuracy on the own
  background minus accuracy on a foreign one (random or paired) at the same size and position.
- neutral control: accuracy on a gray or noise background minus accuracy on a foreign one, same
  size and position.
- donor fill terciles, on samples whose background comes from another class (random or paired, the
  R groups) and carries a fill score (`background_fill_score`): the terciles of that score over
  those samples (low: at most the 1/3 quantile, mid: up to the 2/3 quantile, high: above it; a
  background's composites share its score, so ties keep them in one tercile and a tercile can be
  small or empty), with top-1 per tercile for all of them and per R group. If accuracy rises with
  the fill score, poor inpainting, not only the foreign background, costs accuracy.
- background-class analysis, on samples whose background comes from another class: the share of
  all predictions and of errors that name the background's class; beside it the share expected
  if errors were spread like the model's errors on the controls (neutral backgrounds when the
  config has them, else own backgrounds): the mean, over the foreign-background errors, of the
  fraction of control errors that predicted that error's background class; and chance, 1/(K-1).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .bootstrap import BootstrapSettings, Estimate, difference, interval, over_cells, ratio

FOREIGN_BACKGROUNDS = ("random", "paired")
NEUTRAL_BACKGROUNDS = ("gray", "noise")
GROUP_ORDER = ("CeO", "CoO", "CeR", "CoR")
TIER_ORDER = ("Easy", "Medium", "Hard")


def group_sort_key(group: str) -> tuple[int, str]:
    return (GROUP_ORDER.index(group), group) if group in GROUP_ORDER else (len(GROUP_ORDER), str(group))


def _per_source(frame: pd.DataFrame, values: pd.Series, index: pd.Index | None = None) -> tuple[np.ndarray, np.ndarray]:
    grouped = values.astype(float).groupby(frame["_unit"], sort=True)
    correct, counted = grouped.sum(), grouped.count()
    if index is not None:
        correct, counted = correct.reindex(index, fill_value=0.0), counted.reindex(index, fill_value=0.0)
    return correct.to_numpy(), counted.to_numpy()


def rate(name: str, frame: pd.DataFrame, column: str, settings: BootstrapSettings) -> Estimate:
    correct, counted = _per_source(frame, frame[column])
    return interval(name, [correct, counted], ratio, settings, len(frame))


def rate_difference(name: str, a: pd.DataFrame, b: pd.DataFrame, column: str, settings: BootstrapSettings) -> Estimate:
    """rate(a) - rate(b), paired over the sources present in both."""
    shared = pd.Index(sorted(set(a["_unit"]) & set(b["_unit"])))
    a, b = a[a["_unit"].isin(shared)], b[b["_unit"].isin(shared)]
    arrays = [*_per_source(a, a[column], shared), *_per_source(b, b[column], shared)]
    return interval(name, arrays, difference, settings, len(a) + len(b))


def cells_statistic(
    name: str, frame: pd.DataFrame, by: str, column: str, reduce, settings: BootstrapSettings
) -> Estimate:
    units = pd.Index(sorted(frame["_unit"].unique()))
    arrays = []
    for _, cell in sorted(frame.groupby(by), key=lambda item: str(item[0])):
        arrays.extend(_per_source(cell, cell[column], units))
    return interval(name, arrays, over_cells(reduce), settings, len(frame))


def _accuracies(prefix: str, frame: pd.DataFrame, settings: BootstrapSettings) -> dict:
    # top-5 resamples the very source images top-1 does (one generator for both), so two columns that
    # agree on every sample get the same interval; top-1's generator is the one it always had
    draws = f"{prefix}:top1"
    return {
        "top1": rate(draws, frame, "correct", settings).to_json(),
        "top5": rate(draws, frame, "correct_top5", settings).to_json(),
    }


def _table(frame: pd.DataFrame, keys: Sequence[str], settings: BootstrapSettings, name: str) -> list[dict]:
    rows = []
    present = frame.dropna(subset=list(keys))
    for values, cell in present.groupby(list(keys), sort=True):
        values = values if isinstance(values, tuple) else (values,)
        label = "/".join(str(v) for v in values)
        row = {k: (int(v) if k == "size" else v) for k, v in zip(keys, values)}
        rows.append({**row, **_accuracies(f"{name}:{label}", cell, settings)})
    order = {"group": group_sort_key, "tier": lambda t: TIER_ORDER.index(t) if t in TIER_ORDER else 9}
    return sorted(rows, key=lambda r: tuple(order.get(k, lambda v: v)(r[k]) for k in keys))


def prepare(predictions: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The rows that count (status ok) with the bootstrap unit column `_unit`."""
    notes = []
    ok = predictions[predictions["status"] == "ok"].copy()
    if "source_id" in ok and ok["source_id"].notna().all():
        ok["_unit"] = ok["source_id"]
    else:
        ok["_unit"] = ok["key"]
        notes.append("samples carry no source image id: the bootstrap resamples samples, not source images")
    ok["correct"] = ok["correct"].astype(bool)
    ok["correct_top5"] = ok["correct_top5"].astype(bool)
    return ok, notes


def error_summary(predictions: pd.DataFrame) -> dict:
    bad = predictions[predictions["status"] != "ok"]
    return {
        "total": int(len(bad)),
        "by_reason": {str(k): int(v) for k, v in bad["status"].value_counts().sort_index().items()},
        "rows": [
            {"key": _text(r.key), "shard": _text(r.shard), "reason": r.status, "detail": _text(r.detail)}
            for r in bad.itertuples()
        ][:100],
    }


def _text(value) -> str | None:
    return None if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


def has_group_metadata(frame: pd.DataFrame) -> bool:
    return bool(len(frame) and "group" in frame and frame["group"].notna().all() and frame["size"].notna().all())


def background_gaps(frame: pd.DataFrame, settings: BootstrapSettings) -> list[dict]:
    rows = []
    for (position, size), cell in frame.groupby(["position", "size"], sort=True):
        own = cell[cell["background"] == "original"]
        for kind in FOREIGN_BACKGROUNDS:
            foreign = cell[cell["background"] == kind]
            if len(own) and len(foreign):
                gap = rate_difference(f"gap:{position}/{size}/{kind}", own, foreign, "correct", settings)
                rows.append(
                    {
                        "position": position,
                        "size": int(size),
                        "foreign": kind,
                        "own_top1": float(own["correct"].mean()),
                        "foreign_top1": float(foreign["correct"].mean()),
                        "gap": gap.to_json(),
                    }
                )
    return rows


def neutral_controls(frame: pd.DataFrame, settings: BootstrapSettings) -> list[dict]:
    rows = []
    for (position, size), cell in frame.groupby(["position", "size"], sort=True):
        for control in NEUTRAL_BACKGROUNDS:
            neutral = cell[cell["background"] == control]
            for kind in FOREIGN_BACKGROUNDS:
                foreign = cell[cell["background"] == kind]
                if len(neutral) and len(foreign):
                    diff = rate_difference(
                        f"neutral:{position}/{size}/{control}/{kind}", neutral, foreign, "correct", settings
                    )
                    rows.append(
                        {
                            "position": position,
                            "size": int(size),
                            "control": control,
                            "foreign": kind,
                            "control_top1": float(neutral["correct"].mean()),
                            "foreign_top1": float(foreign["correct"].mean()),
                            "difference": diff.to_json(),
                        }
                    )
    return rows


def _control_error_distribution(frame: pd.DataFrame) -> tuple[str, pd.Series | None]:
    neutral = frame[frame["background"].isin(NEUTRAL_BACKGROUNDS)]
    control, rows = (
        ("neutral backgrounds (" + "/".join(sorted(neutral["background"].unique())) + ")", neutral)
        if len(neutral)
        else ("own backgrounds", frame[frame["background"] == "original"])
    )
    errors = rows[~rows["correct"]]
    if not len(errors):
        return control, None
    return control, errors["pred_class"].value_counts(normalize=True)


def _background_class_cell(
    name: str, cell: pd.DataFrame, expected_of: pd.Series | None, settings: BootstrapSettings
) -> dict:
    names_background = cell["pred_class"] == cell["background_class_index"]
    errors = ~cell["correct"]
    share_all = interval(f"{name}:all", list(_per_source(cell, names_background)), ratio, settings, len(cell))
    error_rows = cell[errors]
    share_errors = (
        interval(
            f"{name}:errors",
            list(_per_source(error_rows, names_background[errors])),
            ratio,
            settings,
            int(errors.sum()),
        )
        if len(error_rows)
        else Estimate(None, None, None, 0, 0)
    )
    expected = None
    if expected_of is not None and len(error_rows):
        expected = float(error_rows["background_class_index"].map(expected_of).fillna(0.0).mean())
    return {
        "samples": int(len(cell)),
        "errors": int(errors.sum()),
        "share_of_predictions": share_all.to_json(),
        "share_of_errors": share_errors.to_json(),
        "expected_share_of_errors": None if expected is None else round(expected, 6),
        "mean_prob_background_class": None
        if cell["prob_background_class"].isna().all()
        else round(float(cell["prob_background_class"].mean()), 6),
    }


def background_class_analysis(frame: pd.DataFrame, label_space_size: int, settings: BootstrapSettings) -> dict | None:
    foreign = frame[
        frame["background"].isin(FOREIGN_BACKGROUNDS)
        & frame["background_class_index"].notna()
        & (frame["background_class_index"] != frame["label_class"])
    ]
    if not len(foreign):
        return None
    control, expected_of = _control_error_distribution(frame)
    result = {
        "samples": "backgrounds from another class (" + "/".join(sorted(foreign["background"].unique())) + ")",
        "control": control,
        "control_errors": None if expected_of is None else "errors on the control backgrounds",
        "chance_share_of_errors": round(1.0 / max(label_space_size - 1, 1), 6),
        "overall": _background_class_cell("bgclass:all", foreign, expected_of, settings),
        "by_group_size": [],
    }
    if expected_of is None:
        result["control_errors"] = "none: the model made no errors on the controls, so no expected share"
    for (group, size), cell in sorted(
        foreign.groupby(["group", "size"]), key=lambda item: (group_sort_key(item[0][0]), item[0][1])
    ):
        result["by_group_size"].append(
            {
                "group": group,
                "size": int(size),
                **_background_class_cell(f"bgclass:{group}/{size}", cell, expected_of, settings),
            }
        )
    return result


FILL_COLUMN = "background_fill_score"
FILL_TERCILES = ("low", "mid", "high")


def _fill_cell(name: str, cell: pd.DataFrame, settings: BootstrapSettings) -> dict:
    scores = cell[FILL_COLUMN]
    return {
        "score_min": None if not len(cell) else round(float(scores.min()), 4),
        "score_max": None if not len(cell) else round(float(scores.max()), 4),
        "samples": int(len(cell)),
        "sources": int(cell["_unit"].nunique()),
        "top1": rate(f"{name}:top1", cell, "correct", settings).to_json(),
    }


def fill_terciles(frame: pd.DataFrame, settings: BootstrapSettings) -> dict:
    """Top-1 of the foreign-background (R) samples by tercile of their donor's fill score, over all
    of them and per R group; `note` says why there is no table (no R sample, none scored)."""
    foreign = frame[frame["background"].isin(FOREIGN_BACKGROUNDS)]
    scores = (
        pd.to_numeric(foreign[FILL_COLUMN], errors="coerce")
        if FILL_COLUMN in foreign
        else pd.Series(np.nan, index=foreign.index)
    )
    scored = foreign[scores.notna()].assign(**{FILL_COLUMN: scores[scores.notna()].astype(float)})
    result: dict = {
        "samples": int(len(scored)),
        "unscored": int(len(foreign) - len(scored)),
        "edges": None,
        "rows": [],
        "by_group": [],
        "note": None,
    }
    if not len(foreign):
        result["note"] = "no sample has a random or paired background: no donor fill terciles"
        return result
    if not len(scored):
        result["note"] = (
            f"none of the {len(foreign)} random- or paired-background samples carries a background fill score "
            "(composed from parts without fill scores, or before they were recorded): no donor fill terciles"
        )
        return result
    low, high = (float(q) for q in np.quantile(scored[FILL_COLUMN].to_numpy(), [1 / 3, 2 / 3]))
    result["edges"] = [round(low, 4), round(high, 4)]
    values = scored[FILL_COLUMN]
    tercile = pd.Series(np.where(values <= low, "low", np.where(values <= high, "mid", "high")), index=scored.index)
    for name in FILL_TERCILES:
        result["rows"].append({"tercile": name, **_fill_cell(f"fill:all/{name}", scored[tercile == name], settings)})
    for group in sorted(scored["group"].dropna().unique(), key=group_sort_key):
        in_group = scored["group"] == group
        for name in FILL_TERCILES:
            cell = scored[in_group & (tercile == name)]
            result["by_group"].append(
                {"group": group, "tercile": name, **_fill_cell(f"fill:{group}/{name}", cell, settings)}
            )
    if result["unscored"]:
        result["note"] = (
            f"{result['unscored']} random- or paired-background samples carry no fill score and are left out"
        )
    return result


def compute_metrics(
    predictions: pd.DataFrame, *, label_space_size: int, settings: BootstrapSettings = BootstrapSettings()
) -> dict:
    """Every number of eval.json's `metrics` from a predictions table."""
    frame, notes = prepare(predictions)
    result: dict = {
        "samples": int(len(frame)),
        "sources": int(frame["_unit"].nunique()),
        "label_space_size": int(label_space_size),  # K: chance top-1 is 1/K (the plots draw it)
        "errors": error_summary(predictions),
        "bootstrap": settings.to_json(),
    }
    if not len(frame):
        result.update(has_groups=False, notes=notes + ["no sample could be evaluated"])
        return result
    result["overall"] = _accuracies("overall", frame, settings)
    result["has_groups"] = has_group_metadata(frame)
    if not result["has_groups"]:
        result["notes"] = notes + ["this config carries no group metadata (group, size): plain accuracy only"]
        return result
    result["by_group_size"] = _table(frame, ["group", "size"], settings, "group_size")
    result["by_group"] = _table(frame, ["group"], settings, "group")
    result["by_size"] = _table(frame, ["size"], settings, "size")
    result["by_tier"] = _table(frame, ["tier"], settings, "tier")
    result["by_position_size"] = _table(frame, ["position", "size"], settings, "position_size")
    result["by_background"] = _table(frame, ["background"], settings, "background")
    groups = sorted(frame["group"].unique(), key=group_sort_key)
    rates = {g: float(frame.loc[frame["group"] == g, "correct"].mean()) for g in groups}
    worst = min(groups, key=lambda g: (rates[g], group_sort_key(g)))
    result["groups_summary"] = {
        "groups": groups,
        "mean_over_groups": cells_statistic("groups:mean", frame, "group", "correct", np.mean, settings).to_json(),
        "worst_group": {
            "group": worst,
            **cells_statistic("groups:min", frame, "group", "correct", np.min, settings).to_json(),
        },
    }
    result["background_gap"] = background_gaps(frame, settings)
    result["neutral_controls"] = neutral_controls(frame, settings)
    result["background_class"] = background_class_analysis(frame, label_space_size, settings)
    result["fill_terciles"] = fill_terciles(frame, settings)
    result["notes"] = notes
    return result


def clean_drop(clean: pd.DataFrame, composites: pd.DataFrame, settings: BootstrapSettings) -> dict:
    """Accuracy on the original photos of the same sources, and its drop to each group."""
    frame, _ = prepare(composites)
    clean = clean.copy()
    clean["_unit"] = clean["source_id"]
    clean["correct"] = clean["correct"].astype(bool)
    result = {
        "images": int(len(clean)),
        "top1": rate("clean:top1", clean, "correct", settings).to_json(),
        "drop_by_group": [],
    }
    if has_group_metadata(frame):
        for group in sorted(frame["group"].unique(), key=group_sort_key):
            cell = frame[frame["group"] == group]
            result["drop_by_group"].append(
                {
                    "group": group,
                    "drop": rate_difference(f"clean-drop:{group}", clean, cell, "correct", settings).to_json(),
                }
            )
    return result
