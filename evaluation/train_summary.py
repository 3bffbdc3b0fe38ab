"""Seeds summarised: per method, mean +- std over seeds of the test split's mean accuracy, worst
group, every group and every tier; a paired comparison of two methods on the Hard tier (on
configs without tiers, on the whole test split, said so): the mean over seeds of the per-seed
accuracy difference with a 95% t interval, and an exact McNemar test (scipy's binomial test on the
discordant images, pooled over seeds) on per-image correctness. Read from the runs' files only.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from .groups import group_accuracies
from .predictions import read_predictions
from .train import TrainError
from .train_run import SCORES_NAME

SUMMARY_JSON, SUMMARY_MD, SUMMARY_PLOT = "train_summary.json", "train_summary.md", "train_summary.png"
RESULTS_DIR = "results"  # one hsi eval report per method and seed: `hsi release --results OUT/results`


def _mean_std(values: Sequence[float | None]) -> dict | None:
    """Mean, sample std and count; None when there is no value (worst group on data without groups)."""
    if any(v is None for v in values) or not values:
        return None
    array = np.asarray(values, dtype=float)
    return {
        "mean": float(array.mean()),
        "std": float(array.std(ddof=1)) if len(array) > 1 else 0.0,
        "seeds": len(array),
    }


def summarise_method(results: Sequence[dict], tiers: Sequence[dict] | None = None) -> dict:
    """results: the runs' scores.json dicts (one method); tiers: per seed, tier -> accuracy."""
    groups = sorted({g for r in results for g in r["test"]["groups"]})
    summary = {
        "method": results[0]["method"],
        "seeds": [r["seed"] for r in results],
        "mean": _mean_std([r["test"]["mean"] for r in results]),
        "worst_group": _mean_std([r["test"]["worst_group"] for r in results]),
        "groups": {g: _mean_std([r["test"]["groups"][g] for r in results if g in r["test"]["groups"]]) for g in groups},
    }
    if tiers:
        names = sorted({t for per_seed in tiers for t in per_seed})
        summary["tiers"] = {t: _mean_std([s[t] for s in tiers if t in s]) for t in names}
    return summary


def method_line(summary: dict) -> str:
    """One line per method, read by scripts: `ERM  mean 71.2 ± 1.3  worst 35.0 ± 4.1` (percent)."""
    return f"{summary['method'].upper():<4} mean {_pct(summary['mean'])}  worst {_pct(summary['worst_group'])}"


def seed_runs(folder: Path) -> list[Path]:
    """The finished seed folders under OUT/<method> (or a single seed folder)."""
    folder = Path(folder)
    if (folder / SCORES_NAME).exists():
        return [folder]
    return sorted((p for p in folder.glob("seed-*") if (p / SCORES_NAME).exists()), key=lambda p: int(p.name[5:]))


def method_folders(paths: Iterable[Path]) -> list[Path]:
    found = []
    for path in map(Path, paths):
        if seed_runs(path):
            found.append(path)
        else:
            found.extend(sorted(p for p in path.iterdir() if p.is_dir() and seed_runs(p)))
    return found


def _frame(run: Path):
    frame, _ = read_predictions(run / "predictions.parquet")
    return frame[frame["status"] == "ok"].sort_values("key").reset_index(drop=True)


def tier_accuracies(frame) -> dict[str, float]:
    tiers = frame["tier"].dropna()
    return group_accuracies(list(tiers), list(frame.loc[tiers.index, "correct"])) if len(tiers) else {}


def paired_comparison(runs_a: Sequence[Path], runs_b: Sequence[Path], names: tuple[str, str]) -> dict:
    """B minus A on the Hard tier (or every test image when the config has no tiers), paired by seed."""
    from scipy import stats

    by_seed_a = {p.name: p for p in runs_a}
    pairs = [(by_seed_a[p.name], p) for p in runs_b if p.name in by_seed_a]
    if not pairs:
        raise ValueError(f"{names[0]} and {names[1]} share no seed to compare")
    diffs, b_only, a_only, subset = [], 0, 0, "Hard tier"
    for run_a, run_b in pairs:
        fa, fb = _frame(run_a), _frame(run_b)
        if list(fa["key"]) != list(fb["key"]):
            raise ValueError(f"{run_a} and {run_b} scored different test images; compare runs of one config")
        keep = (fa["tier"] == "Hard").to_numpy()
        if not keep.any():
            keep, subset = np.ones(len(fa), bool), "all test images (the config has no tiers)"
        ca, cb = fa["correct"].to_numpy()[keep], fb["correct"].to_numpy()[keep]
        diffs.append(float(cb.mean() - ca.mean()))
        b_only += int((cb & ~ca).sum())
        a_only += int((ca & ~cb).sum())
    diffs_array = np.asarray(diffs)
    mean = float(diffs_array.mean())
    if len(diffs) > 1:
        half = float(stats.t.ppf(0.975, len(diffs) - 1) * diffs_array.std(ddof=1) / np.sqrt(len(diffs)))
        low, high = mean - half, mean + half
    else:
        low = high = None
    discordant = a_only + b_only
    p_value = float(stats.binomtest(b_only, discordant, 0.5).pvalue) if discordant else 1.0
    return {
        "a": names[0],
        "b": names[1],
        "subset": subset,
        "seeds": len(pairs),
        "difference": mean,
        "interval_95": [low, high],
        "per_seed": diffs,
        "b_right_a_wrong": b_only,
        "a_right_b_wrong": a_only,
        "mcnemar_exact_p": p_value,
    }


def _pct(stat: dict | None) -> str:
    return "n/a (no group metadata)" if stat is None else f"{100 * stat['mean']:.1f} ± {100 * stat['std']:.1f}"


def render_markdown(summaries: list[dict], comparison: dict | None) -> str:
    lines = ["# Training baselines", "", "| method | seeds | mean | worst group |", "|---|---|---|---|"]
    for s in summaries:
        lines.append(f"| {s['method']} | {len(s['seeds'])} | {_pct(s['mean'])} | {_pct(s['worst_group'])} |")
    for s in summaries:
        lines += [
            "",
            f"## {s['method']}: per group (test, % mean ± std over seeds)",
            "",
            "| group | accuracy |",
            "|---|---|",
        ]
        lines += [f"| {g} | {_pct(v)} |" for g, v in s["groups"].items()]
        if s.get("tiers"):
            lines += ["", "| tier | accuracy |", "|---|---|"] + [f"| {t} | {_pct(v)} |" for t, v in s["tiers"].items()]
    if comparison:
        c = comparison
        interval = (
            "n/a (one seed)"
            if c["interval_95"][0] is None
            else f"[{100 * c['interval_95'][0]:.1f}, {100 * c['interval_95'][1]:.1f}]"
        )
        lines += [
            "",
            f"## {c['b']} minus {c['a']} on the {c['subset']}",
            "",
            f"- mean difference over {c['seeds']} seeds: {100 * c['difference']:.1f} points, 95% interval {interval}",
            f"- per-image correctness (exact McNemar, pooled over seeds): {c['b']} right and {c['a']} wrong "
            f"on {c['b_right_a_wrong']}, the reverse on {c['a_right_b_wrong']}, p = {c['mcnemar_exact_p']:.3g}",
        ]
    lines += [
        "",
        "![mean and worst-group accuracy](train_summary.png)",
        "",
        f"Per-seed evaluation reports (eval.json, eval.md, plots) are in `{RESULTS_DIR}/<method>-seed-<s>/`; "
        f"`hsi release ... --results {RESULTS_DIR}` puts them into a card.",
        "",
    ]
    return "\n".join(lines)


def plot_summary(summaries: list[dict], path: Path) -> None:
    from .plots import headless_pyplot

    plt = headless_pyplot()
    fig, ax = plt.subplots(figsize=(1.8 + 1.4 * len(summaries), 3.2))
    x = np.arange(len(summaries))
    for offset, key, label in ((-0.18, "mean", "mean"), (0.18, "worst_group", "worst group")):
        ax.bar(
            x + offset,
            [100 * s[key]["mean"] if s[key] else 0.0 for s in summaries],
            0.36,
            yerr=[100 * s[key]["std"] if s[key] else 0.0 for s in summaries],
            capsize=3,
            label=label,
        )
    ax.set_xticks(x, [s["method"] for s in summaries])
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_eval_reports(runs: dict[str, list[Path]], folder: Path) -> list[Path]:
    """Each seed's test predictions analysed as `hsi eval --from` does: eval.json, eval.md, plots."""
    from .bootstrap import BootstrapSettings
    from .pipeline import analyse

    written = []
    for method, seeds in runs.items():
        for run in seeds:
            target = folder / f"{method}-{run.name}"
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run / "predictions.parquet", target / "predictions.parquet")  # the report's own input
            analyse(target / "predictions.parquet", target, BootstrapSettings())
            written.append(target)
    return written


def write_summary(paths: Sequence[Path], out: Path, compare: tuple[str, str] | None = None) -> str:
    folders = method_folders(paths)
    if not folders:
        raise TrainError(f"no finished runs (seed-*/{SCORES_NAME}) under {[str(p) for p in paths]}")
    summaries, runs = [], {}
    for folder in folders:
        seeds = seed_runs(folder)
        results = [json.loads((p / SCORES_NAME).read_text()) for p in seeds]
        summaries.append(summarise_method(results, [tier_accuracies(_frame(p)) for p in seeds]))
        runs[summaries[-1]["method"]] = seeds
    comparison = None
    if compare is None and len(runs) >= 2 and "erm" in runs:
        compare = ("erm", next(m for m in runs if m != "erm"))
    if compare:
        missing = [m for m in compare if m not in runs]
        if missing:
            raise TrainError(f"--compare {' '.join(compare)}: no runs of {missing}; found {sorted(runs)}")
        comparison = paired_comparison(runs[compare[0]], runs[compare[1]], compare)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_JSON).write_text(json.dumps({"methods": summaries, "comparison": comparison}, indent=2) + "\n")
    plot_summary(summaries, out / SUMMARY_PLOT)
    write_eval_reports(runs, out / RESULTS_DIR)
    markdown = render_markdown(summaries, comparison)
    (out / SUMMARY_MD).write_text(markdown)
    return markdown
