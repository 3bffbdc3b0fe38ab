"""Across models: each model's biases beside its Hard-Spurious-ImageNet numbers (read from its
`hsi eval` eval.json), Spearman correlations with bootstrap intervals over models, scatter plots.

Written to OUT/probe_table.csv and .md, OUT/correlations.json and .md, OUT/plots/probe_scatter.png.
A correlation needs at least 3 models with both values; below that the files say so, no number.
"""

from __future__ import annotations

import csv
import zlib
from pathlib import Path

import numpy as np

from builder.core.owned import OwnedFolder
from validation.scores.correlations import rank_correlation

from ..report import md_table, write_json
from .schema import BIASES, bias_values, eval_values

MIN_MODELS = 3
TABLE_CSV, TABLE_MD = "probe_table.csv", "probe_table.md"
CORRELATIONS_JSON, CORRELATIONS_MD = "correlations.json", "correlations.md"
SCATTER_PNG = "plots/probe_scatter.png"
FILES = (TABLE_CSV, TABLE_MD, CORRELATIONS_JSON, CORRELATIONS_MD, SCATTER_PNG)


def table_rows(entries: list[tuple[str, dict, dict]]) -> list[dict]:
    """One row per (model spec, probes report, eval report)."""
    return [{"model": spec, **bias_values(probes), **eval_values(report)} for spec, probes, report in entries]


def _numeric_columns(rows: list[dict], exclude: tuple[str, ...]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [
            c
            for c, v in row.items()
            if c not in columns and c not in exclude and isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
    return columns


def spearman(x: np.ndarray, y: np.ndarray, resamples: int, seed: int, name: str, level: float = 0.95) -> dict:
    """Spearman's rho, its p-value and a percentile bootstrap interval over models, by validation's
    one bootstrap helper (`rank_correlation`: undefined resamples left out and counted)."""
    result: dict = {"n": int(len(x)), "rho": None, "p": None, "low": None, "high": None, "undefined_resamples": None}
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        result["note"] = "undefined: one of the two is constant across these models"
        return result
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    found = rank_correlation(x, y, "spearman", resamples=resamples, level=level, rng=rng)
    result.update(
        rho=found.value, p=found.p_value, low=found.low, high=found.high, undefined_resamples=found.undefined_resamples
    )
    return result


def correlations(rows: list[dict], resamples: int = 1000, seed: int = 0) -> dict:
    """Every bias against every Hard-Spurious number, over the models that have both."""
    biases = [b for b in BIASES if any(row.get(b) is not None for row in rows)]
    targets = _numeric_columns(rows, exclude=BIASES)
    result: dict = {
        "models": len(rows),
        "min_models": MIN_MODELS,
        "resamples": resamples,
        "seed": seed,
        "method": "Spearman rank correlation (scipy.stats.spearmanr); 95% percentile bootstrap "
        "over models (scipy.stats.bootstrap, paired)",
        "pairs": [],
    }
    if len(rows) < MIN_MODELS:
        result["note"] = (
            f"{len(rows)} model(s): a rank correlation needs at least {MIN_MODELS} models, so none is reported"
        )
        return result
    for bias in biases:
        for target in targets:
            kept = [(r[bias], r[target]) for r in rows if r.get(bias) is not None and r.get(target) is not None]
            pair = {"bias": bias, "metric": target}
            if len(kept) < MIN_MODELS:
                pair.update(n=len(kept), note=f"only {len(kept)} model(s) have both values (at least {MIN_MODELS})")
            else:
                x, y = (np.asarray(v, dtype=float) for v in zip(*kept))
                pair.update(spearman(x, y, resamples, seed, f"{bias}:{target}"))
            result["pairs"].append(pair)
    return result


def write_table(out: OwnedFolder, rows: list[dict]) -> tuple[Path, Path]:
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]

    def cell(value):
        return "" if value is None else (f"{value:.4f}" if isinstance(value, float) else value)

    with out.writing(TABLE_CSV) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows([{k: cell(v) for k, v in row.items()} for row in rows])
    lines = [
        "# Biases and Hard-Spurious-ImageNet accuracy per model",
        "",
        md_table(columns, [[cell(row.get(c)) for c in columns] for row in rows]),
    ]
    return out.root / TABLE_CSV, out.write_text(TABLE_MD, "\n".join(lines) + "\n")


def write_correlations(out: OwnedFolder, result: dict) -> Path:
    with out.writing(CORRELATIONS_JSON) as tmp:
        write_json(tmp, result)
    lines = ["# Do the biases predict Hard-Spurious-ImageNet accuracy?", "", result["method"] + ".", ""]
    if result.get("note"):
        lines.append(f"**{result['note']}.**")
    else:

        def num(v):
            return "n/a" if v is None else f"{v:.3f}"

        rows = [
            [
                p["bias"],
                p["metric"],
                p["n"],
                num(p.get("rho")),
                f"[{num(p.get('low'))}, {num(p.get('high'))}]",
                num(p.get("p")),
                p.get("note", ""),
            ]
            for p in result["pairs"]
        ]
        lines.append(md_table(["bias", "metric", "models", "Spearman rho", "95% interval", "p", "note"], rows))
    return out.write_text(CORRELATIONS_MD, "\n".join(lines) + "\n")


def write_scatter(out: OwnedFolder, rows: list[dict]) -> Path | None:
    """Each bias (rows of panels) against the main Hard-Spurious numbers (columns)."""
    from ..plots import headless_pyplot

    biases = [b for b in BIASES if any(r.get(b) is not None for r in rows)]
    wanted = ("worst_group_top1", "CoR_top1", "CoR@56_top1", "background_class_share", "clean_top1", "top1")
    targets = [t for t in wanted if any(r.get(t) is not None for r in rows)]
    if not biases or not targets:
        return None
    plt = headless_pyplot()
    fig, axes = plt.subplots(len(biases), len(targets), figsize=(3 * len(targets), 2.6 * len(biases)), squeeze=False)
    for i, bias in enumerate(biases):
        for j, target in enumerate(targets):
            ax = axes[i][j]
            points = [
                (r[bias], r[target], r["model"]) for r in rows if r.get(bias) is not None and r.get(target) is not None
            ]
            for x, y, name in points:
                ax.scatter([x], [y], s=18)
                ax.annotate(name.split(":")[-1][:18], (x, y), fontsize=6)
            ax.set_xlabel(bias, fontsize=8)
            ax.set_ylabel(target, fontsize=8)
    fig.tight_layout()
    try:
        with out.writing(SCATTER_PNG) as tmp:
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
    return out.root / SCATTER_PNG
