"""The card's "Results" section, rendered from `hsi eval` reports (eval.json), never pasted by hand.

`--results DIR` takes a model folder (holding eval.json) or an `hsi eval --out` folder (one
subfolder per model). Each report must belong to a config of the release and to the very build
being released (its data fingerprint equals the config's manifest fingerprint); otherwise the
release is refused, so a card never shows numbers measured on other data.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import InputError
from evaluation.report import fmt

RESULTS_DIR = "results"
RELEASE_PLOT_SUFFIX = "_accuracy_vs_size.png"  # results/<model slug><suffix> in a release
EVAL_JSON = "eval.json"
MAIN_PLOT = "plots/accuracy_vs_size.png"


class ResultsError(InputError, ValueError):
    """A results folder that cannot go into the card; the message says why."""


@dataclass(frozen=True)
class ModelResult:
    folder: Path
    report: dict

    @property
    def config(self) -> str:
        return self.report["data"]["config"]

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.config}_{self.folder.name}")


def load_results(dirs: list[Path]) -> list[ModelResult]:
    found = []
    for folder in dirs:
        folder = Path(folder)
        reports = [folder / EVAL_JSON] if (folder / EVAL_JSON).is_file() else sorted(folder.glob(f"*/{EVAL_JSON}"))
        if not reports:
            raise ResultsError(
                f"--results {folder.name}: no eval.json in it or in its subfolders (write them with hsi eval)"
            )
        for path in reports:
            report = json.loads(path.read_text("utf-8"))
            if report.get("schema") != "hsi-eval/1" or "metrics" not in report:
                raise ResultsError(f"{path.parent.name}/{EVAL_JSON} is not an hsi eval report")
            found.append(ModelResult(path.parent, report))
    return found


def check_results(results: list[ModelResult], fingerprints: dict[str, str | None]) -> None:
    """Each report belongs to a released config and to its exact build."""
    for result in results:
        data = result.report["data"]
        if result.config not in fingerprints:
            raise ResultsError(
                f"results of {result.report['model']['spec']} are for config {result.config!r}, "
                f"which is not in this release ({sorted(fingerprints)})"
            )
        if data.get("fingerprint") != fingerprints[result.config]:
            raise ResultsError(
                f"results of {result.report['model']['spec']} were measured on another build of "
                f"{result.config} (fingerprint {data.get('fingerprint')}, released {fingerprints[result.config]}); "
                "re-run hsi eval"
            )
        if data.get("limit"):
            raise ResultsError(
                f"results of {result.report['model']['spec']} cover only the first {data['limit']} samples (--limit); "
                "a card shows full evaluations only"
            )


def copy_plots(results: list[ModelResult], staging: Path) -> dict[str, str]:
    """Copy each model's main plot into the release; release-relative paths by slug."""
    copied = {}
    for result in results:
        plot = result.folder / MAIN_PLOT
        if plot.is_file():
            target = staging / RESULTS_DIR / f"{result.slug}{RELEASE_PLOT_SUFFIX}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(plot, target)
            copied[result.slug] = f"{RESULTS_DIR}/{target.name}"
    return copied


def _preprocessing(report: dict) -> str:
    pre = report["preprocessing"]
    return f"centre crop (crop_pct {pre['crop_pct']})" if pre.get("cropped") else "canvas as is (no crop)"


def render_results(results: list[ModelResult], plots: dict[str, str], table) -> str:
    """The markdown of the Results section (`table` is the card's own table renderer)."""
    lines = [
        "Top-1 accuracy with 95% bootstrap intervals over source images, from `hsi eval` reports "
        "(rendered from their eval.json)."
    ]
    for config in sorted({r.config for r in results}):
        rows_of = sorted(
            (r for r in results if r.config == config),
            key=lambda r: -(r.report["metrics"].get("groups_summary", {}).get("worst_group", {}).get("value") or 0.0),
        )
        groups: list[str] = []
        for r in rows_of:
            groups += [g for g in r.report["metrics"].get("groups_summary", {}).get("groups", []) if g not in groups]
        rows = []
        for r in rows_of:
            metrics = r.report["metrics"]
            by_group = {g["group"]: g["top1"] for g in metrics.get("by_group", [])}
            summary = metrics.get("groups_summary", {})
            worst = summary.get("worst_group")
            rows.append(
                [
                    f"`{r.report['model']['spec']}`",
                    r.report["data"]["split"],
                    fmt(metrics.get("overall", {}).get("top1")),
                    *[fmt(by_group.get(g)) for g in groups],
                    fmt(summary.get("mean_over_groups")),
                    f"{worst['group']} {fmt(worst)}" if worst else "n/a",
                ]
            )
        lines.append(
            f"### {config}\n\n" + table(["model", "split", "top-1", *groups, "mean over groups", "worst group"], rows)
        )
        details = []
        for r in rows_of:
            model, pre = r.report["model"], r.report["preprocessing"]
            details.append(
                [
                    f"`{model['spec']}`",
                    model.get("checkpoint") or "",
                    f"`{model.get('checkpoint_sha256') or 'n/a'}`",
                    _preprocessing(r.report),
                    f"{pre['input_size'][0]}x{pre['input_size'][1]} {pre['interpolation']}",
                    r.report["label_space"]["name"],
                    r.report["toolkit"]["version"],
                ]
            )
        lines.append(table(["model", "weights", "sha256", "preprocessing", "input", "label space", "toolkit"], details))
        for r in rows_of:
            if r.slug in plots:
                lines.append(f"![{r.report['model']['spec']} on {config}]({plots[r.slug]})")
    return "\n\n".join(lines)
