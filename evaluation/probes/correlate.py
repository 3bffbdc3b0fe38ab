"""Across models: each model's biases beside its Hard-Spurious-ImageNet numbers (read from its
`hsi eval` eval.json), Spearman correlations with bootstrap intervals over models, and one scatter
figure with a panel per bias and a point per model.

Written to OUT/probe_table.csv and .md, OUT/correlations.json and .md, OUT/plots/probe_scatter.png.
A correlation needs at least 3 models with both values; below that the files say so, no number,
and no scatter is drawn (a point or two is a table, which probe_table.md already is).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from builder.core.csv_cells import write_dict_table
from builder.core.owned import OwnedFolder
from evaluation.analysis.report import md_table, write_json
from validation.scores.correlations import rank_correlation

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

    with out.writing(TABLE_CSV) as tmp:
        write_dict_table(tmp, columns, [{k: cell(v) for k, v in row.items()} for row in rows])
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


SCATTER_TARGET = "worst_group_top1"  # the benchmark's headline: what a bias should predict, if anything
SCATTER_FALLBACKS = ("CoR_top1", "CoR@56_top1", "top1")


def scatter_target(rows: list[dict]) -> str | None:
    """The Hard-Spurious number the scatter's y-axis shows: worst-group top-1 when the evaluations
    have it, else the first of CoR, CoR at 56 px and overall top-1 they have."""
    return next((t for t in (SCATTER_TARGET, *SCATTER_FALLBACKS) if any(r.get(t) is not None for r in rows)), None)


def scatter_models(rows: list[dict], bias: str, target: str) -> list[tuple[float, float, str]]:
    return [(r[bias], r[target], r["model"]) for r in rows if r.get(bias) is not None and r.get(target) is not None]


def short_name(spec: str) -> str:
    """A point's label: a checkpoint's file name for "FILE (ARCH)" specs, else the name after the
    library prefix ("timm:resnet50" -> "resnet50"), at most 24 characters."""
    name = spec.split(" (", 1)[0] if " (" in spec else spec.rsplit(":", 1)[-1]
    return name if len(name) <= 24 else name[:23] + "…"


def scatter_panels(rows: list[dict]) -> tuple[str | None, list[str]]:
    """The scatter's y (scatter_target) and its panels: the biases at least MIN_MODELS models have."""
    target = scatter_target(rows)
    return target, [b for b in BIASES if target and len(scatter_models(rows, b, target)) >= MIN_MODELS]


def scatter_figure(rows: list[dict], result: dict | None = None):
    """One figure, a panel per bias, every model a labelled point (bias on x, worst-group top-1 on y),
    each panel titled with its Spearman rho and interval when `result` has one; None when no bias
    has MIN_MODELS models (a point or two is a table, not a plot)."""
    from matplotlib.figure import Figure

    target, biases = scatter_panels(rows)
    if not biases:
        return None
    rhos = {(p["bias"], p["metric"]): p for p in (result or {}).get("pairs", [])}
    columns = min(len(biases), 4)
    panel_rows = -(-len(biases) // columns)
    fig = Figure(figsize=(max(3.2 * columns, 4.8), 2.9 * panel_rows), layout="constrained")
    axes = fig.subplots(panel_rows, columns, squeeze=False, sharey=True).ravel()
    for ax, bias in zip(axes, biases):
        points = scatter_models(rows, bias, target)
        ax.scatter([x for x, _, _ in points], [y for _, y, _ in points], s=22, color="tab:blue", zorder=3)
        named: dict[tuple[float, float], list[str]] = {}
        for x, y, name in points:  # models on the same spot share one label, not a pile of them
            named.setdefault((x, y), []).append(short_name(name))
        for (x, y), names in named.items():
            ax.annotate(", ".join(names), (x, y), xytext=(3, 3), textcoords="offset points", fontsize=6)
        pair = rhos.get((bias, target), {})
        heading = f"{bias} (n={len(points)})"
        if pair.get("rho") is not None:
            heading += f"\nSpearman rho {pair['rho']:.2f} [{pair['low']:.2f}, {pair['high']:.2f}]"
        elif "constant" in pair.get("note", ""):
            heading += "\nno rho: constant across these models"
        ax.set_title(heading, fontsize=8)
        ax.set_xlabel(bias, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[: len(biases) : columns]:
        ax.set_ylabel(target, fontsize=8)
    for ax in axes[len(biases) :]:
        ax.set_visible(False)
    fig.suptitle(f"each bias against {target}, one point per model", fontsize=9)
    return fig


def write_scatter(out: OwnedFolder, rows: list[dict], result: dict | None = None) -> tuple[Path | None, str | None]:
    """OUT/plots/probe_scatter.png (scatter_figure) and None, or, with too few models, no figure (an
    earlier run's is removed: it would describe another zoo) and the reason."""
    fig = scatter_figure(rows, result)
    if fig is None:
        if out.owns(SCATTER_PNG):
            out.remove(SCATTER_PNG)
        target = scatter_target(rows)
        most = max((len(scatter_models(rows, b, target)) for b in BIASES), default=0) if target else 0
        return None, (
            f"no scatter: {most} model(s) with a bias and {target or 'a Hard-Spurious accuracy'} "
            f"(a scatter needs at least {MIN_MODELS}); the values are in {TABLE_MD}"
        )
    with out.writing(SCATTER_PNG) as tmp:
        fig.savefig(tmp, dpi=110)
    return out.root / SCATTER_PNG, None
