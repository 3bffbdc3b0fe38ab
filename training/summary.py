"""`hsi train report`: per method, mean ± std over seeds of the test split's mean, worst-group, group
and tier accuracy; B minus A on the Hard tier (or the whole test split, said so), paired by seed, with
a 95% t interval and an exact McNemar test pooled over seeds. Reads only the runs' files, each as
someone else's input; writes through an OwnedFolder."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from pydantic import ConfigDict, Field

from builder.core.markdown import inline, table
from builder.core.templates import render
from builder.core.untrusted import StrictModel, UntrustedInput, parse_model, read_model, read_parquet, regular_file
from evaluation.predicting.predictions import METADATA_KEY, predictions_schema
from training.folder import RunFolder, run_folder
from training.groups import group_accuracies
from training.loop import TrainError
from training.run import PREDICTIONS_NAME, SCORES_NAME, RunScores

SUMMARY_JSON, SUMMARY_MD, SUMMARY_PLOT = "train_summary.json", "train_summary.md", "train_summary.png"
RESULTS_DIR = "results"  # one hsi eval report per method and seed: `hsi release --results OUT/results`
SEED_FOLDER = re.compile(r"seed-(\d{1,9})")


def read_scores(path: Path) -> dict:
    return read_model(RunScores, path, "scores.json").model_dump()


class _Part(StrictModel):
    model_config = ConfigDict(extra="ignore")


class _Spec(_Part):
    spec: str


class _Data(_Part):
    config: str
    split: str


class _Classes(_Part):
    classes: int = Field(ge=1)


class PredictionsIdentity(_Part):
    """What makes a predictions table's `hsi` metadata one of ours (evaluation's readers check the rest)."""

    model: _Spec
    data: _Data
    label_space: _Classes


def read_test_predictions(path: Path):
    """A run's test `predictions.parquet` as a DataFrame of its ok rows sorted by key: a parquet table
    of the predictions schema with the `hsi` metadata, one row per key, `correct` as the prediction
    says; anything else is one line naming the file."""
    table = read_parquet(path, "predictions table")
    for field in predictions_schema():
        if field.name not in table.schema.names:
            raise UntrustedInput(f"{path}: predictions table has no column {field.name!r}")
        if not table.schema.field(field.name).type.equals(field.type):
            raise UntrustedInput(
                f"{path}: column {field.name!r} is {table.schema.field(field.name).type}, not {field.type}"
            )
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise UntrustedInput(f"{path}: not an hsi predictions table (no {METADATA_KEY.decode()!r} metadata)")
    try:
        metadata = json.loads(raw)
    except (ValueError, RecursionError):
        raise UntrustedInput(f"{path}: its {METADATA_KEY.decode()!r} metadata is not JSON") from None
    parse_model(PredictionsIdentity, metadata, f"{path} metadata")
    frame = table.to_pandas()
    frame = frame[frame["status"] == "ok"].sort_values("key", kind="stable").reset_index(drop=True)
    if frame["key"].isna().any() or frame["correct"].isna().any():
        raise UntrustedInput(f"{path}: an ok row has no key or no correct value")
    duplicated = frame["key"][frame["key"].duplicated()]
    if len(duplicated):
        raise UntrustedInput(f"{path}: sample {inline(duplicated.iloc[0])!r} has more than one row")
    said = frame["correct"].astype(bool).to_numpy()
    derived = (frame["pred_class"] == frame["label_class"]).fillna(False).astype(bool).to_numpy()
    if (said != derived).any():
        key = frame["key"][said != derived].iloc[0]
        raise UntrustedInput(
            f"{path}: sample {inline(key)!r} says correct={bool(said[said != derived][0])} "
            "against its pred_class and label_class: pass the table hsi train wrote, unedited"
        )
    frame["correct"] = said
    return frame


def _mean_std(values: Sequence[float | None]) -> dict | None:
    """Mean, sample std and count; None when there is no value (worst group on data without groups)."""
    if any(v is None for v in values) or not values:
        return None
    array = np.asarray(values, dtype=float)
    std = float(array.std(ddof=1)) if len(array) > 1 else 0.0
    return {"mean": float(array.mean()), "std": std, "seeds": len(array)}


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
    if not folder.is_dir():
        return []
    seeds = [p for p in folder.iterdir() if SEED_FOLDER.fullmatch(p.name) and (p / SCORES_NAME).exists()]
    return sorted(seeds, key=lambda p: int(p.name[5:]))


def method_folders(paths: Iterable[Path]) -> list[Path]:
    found = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise TrainError(f"--report {path}: no such folder (pass OUT or OUT/<method> of hsi train runs)")
        if seed_runs(path):
            found.append(path)
        else:
            found.extend(sorted(p for p in path.iterdir() if p.is_dir() and seed_runs(p)))
    return found


def tier_accuracies(frame) -> dict[str, float]:
    tiers = frame["tier"].dropna()
    return group_accuracies(list(tiers), list(frame.loc[tiers.index, "correct"])) if len(tiers) else {}


def paired_comparison(runs_a: Sequence[Path], runs_b: Sequence[Path], names: tuple[str, str]) -> dict:
    """B minus A on the Hard tier (or every test image when the config has no tiers), paired by seed."""
    from scipy import stats

    by_seed_a = {p.name: p for p in runs_a}
    pairs = [(by_seed_a[p.name], p) for p in runs_b if p.name in by_seed_a]
    if not pairs:
        raise TrainError(
            f"--compare: {names[0]} and {names[1]} share no seed to compare; train both with the same seeds"
        )
    diffs, b_only, a_only, subset = [], 0, 0, "Hard tier"
    for run_a, run_b in pairs:
        fa, fb = (read_test_predictions(run / PREDICTIONS_NAME) for run in (run_a, run_b))
        if list(fa["key"]) != list(fb["key"]):
            raise TrainError(f"{run_a} and {run_b} scored different test images; compare runs of one config")
        keep = (fa["tier"] == "Hard").to_numpy()
        if not keep.any():
            # no tiers at all, or tiers without a Hard one (the -10 subset's own/paired groups)
            why = "the config has no tiers" if fa["tier"].dropna().empty else "no test image is in the Hard tier"
            keep, subset = np.ones(len(fa), bool), f"all test images ({why})"
        ca, cb = fa["correct"].to_numpy()[keep], fb["correct"].to_numpy()[keep]
        diffs.append(float(cb.mean() - ca.mean()))
        b_only += int((cb & ~ca).sum())
        a_only += int((ca & ~cb).sum())
    diffs_array = np.asarray(diffs)
    mean = float(diffs_array.mean())
    low: float | None = None
    high: float | None = None
    if len(diffs) > 1:
        half = float(stats.t.ppf(0.975, len(diffs) - 1) * diffs_array.std(ddof=1) / np.sqrt(len(diffs)))
        low, high = mean - half, mean + half
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
    """The summary as Markdown; every table through builder.core.markdown, so a group or tier name
    holding `|` or a newline (someone else's data) stays in its cell."""
    methods = [
        {
            "name": inline(s["method"]),
            "groups": table(("group", "accuracy"), [(g, _pct(v)) for g, v in s["groups"].items()]),
            "tiers": s.get("tiers") and table(("tier", "accuracy"), [(t, _pct(v)) for t, v in s["tiers"].items()]),
        }
        for s in summaries
    ]
    c = comparison
    if c:
        low, high = c["interval_95"]
        c = {
            **c,
            "a_heading": inline(c["a"]),
            "b_heading": inline(c["b"]),
            "difference": f"{100 * c['difference']:.1f}",
            "interval": "n/a (one seed)" if low is None else f"[{100 * low:.1f}, {100 * high:.1f}]",
            "p": f"{c['mcnemar_exact_p']:.3g}",
        }
    overview = [(s["method"], len(s["seeds"]), _pct(s["mean"]), _pct(s["worst_group"])) for s in summaries]
    return render(
        "training",
        "train_summary.md.j2",
        overview=table(("method", "seeds", "mean", "worst group"), overview),
        methods=methods,
        comparison=c,
        results=RESULTS_DIR,
    )


def plot_summary(summaries: list[dict], path: Path) -> None:
    from evaluation.analysis.plots import headless_pyplot

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


def write_eval_reports(runs: dict[str, list[Path]], folder: RunFolder) -> set[str]:
    """Each seed's test predictions analysed as `hsi eval --from` does (eval.json, eval.md, plots) under
    `results/<method>-seed-<s>/`. The analysis writes into a fresh staging folder of its own inside
    `--out`; each file it made is then written through the owned folder (recorded, never over a
    user's file, never through a link). Returns the files written, relative to the folder."""
    from evaluation.analysis.bootstrap import BootstrapSettings
    from evaluation.orchestration.pipeline import analyse

    written: set[str] = set()
    for method, seeds in runs.items():
        for run in seeds:
            target = f"{RESULTS_DIR}/{method}-{run.name}"
            with tempfile.TemporaryDirectory(prefix=".staging-", dir=folder.path) as staging:
                stage = Path(staging)
                source = regular_file(run / PREDICTIONS_NAME, "predictions table")
                (stage / PREDICTIONS_NAME).write_bytes(source.read_bytes())  # the report's own input
                analyse(stage / PREDICTIONS_NAME, stage, BootstrapSettings())
                for made in sorted(p for p in stage.rglob("*") if p.is_file() and not p.is_symlink()):
                    relative = f"{target}/{made.relative_to(stage).as_posix()}"
                    folder.write_bytes(relative, made.read_bytes())
                    written.add(folder.relative(relative))
    return written


def write_summary(paths: Sequence[Path], out: Path, compare: tuple[str, str] | None = None) -> str:
    folders = method_folders(paths)
    if not folders:
        raise TrainError(f"no finished runs (seed-*/{SCORES_NAME}) under {[str(p) for p in paths]}")
    summaries: list[dict] = []
    runs: dict[str, list[Path]] = {}
    for folder in folders:
        seeds = seed_runs(folder)
        results = [read_scores(p / SCORES_NAME) for p in seeds]
        methods = sorted({r["method"] for r in results})
        if len(methods) > 1:
            raise TrainError(f"{folder} holds runs of several methods ({', '.join(methods)}): pass OUT/<method>")
        if methods[0] in runs:
            raise TrainError(
                f"two folders hold runs of {methods[0]} ({runs[methods[0]][0].parent} and {folder}): pass one of them"
            )
        summaries.append(
            summarise_method(results, [tier_accuracies(read_test_predictions(p / PREDICTIONS_NAME)) for p in seeds])
        )
        runs[summaries[-1]["method"]] = seeds
    comparison = None
    if compare is None and len(runs) >= 2 and "erm" in runs:
        compare = ("erm", next(m for m in runs if m != "erm"))
    if compare:
        missing = [m for m in compare if m not in runs]
        if missing:
            raise TrainError(f"--compare {' '.join(compare)}: no runs of {missing}; found {sorted(runs)}")
        comparison = paired_comparison(runs[compare[0]], runs[compare[1]], compare)
    markdown = render_markdown(summaries, comparison)
    with run_folder(Path(out)) as target:
        target.write_text(SUMMARY_JSON, json.dumps({"methods": summaries, "comparison": comparison}, indent=2) + "\n")
        with target.writing(SUMMARY_PLOT) as tmp:
            plot_summary(summaries, tmp)
        written = write_eval_reports(runs, target)
        # reports of an earlier --report into this folder for runs no longer summarised (ours only)
        if target.owned is not None:
            target.owned.remove_listed(f"{RESULTS_DIR}/", keep=written)
        target.write_text(SUMMARY_MD, markdown)
    return markdown
