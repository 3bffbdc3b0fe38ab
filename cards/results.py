"""The card's "Results" section, rendered from `hsi eval` reports (eval.json), never pasted by hand.

`--results DIR` takes a model folder (holding eval.json) or an `hsi eval --out` folder (one
subfolder per model), read through the one reader of evaluation folders
(evaluation.ranking.eval_reader): every eval.json is checked field by field (one line naming the
file and the field), no link is followed (not the folder, a model folder, `plots/` nor the plot
itself), and a plot must be a PNG. Each report must belong to a config of the release and to the
very build being released (its data fingerprint equals the config's manifest fingerprint);
otherwise the release is refused, so a card never shows numbers measured on other data. A partial
run (`hsi eval --limit`) is left out of the card with a note: it is never shown as a full result,
and never blocks a release.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import InputError, printable
from evaluation.analysis.report import fmt
from evaluation.model_formats.models import APPLIED
from evaluation.ranking.eval_reader import EvaluatedModel, evaluated_models
from evaluation.ranking.provenance import preprocessing_claim, weights_claim

RESULTS_DIR = "results"
RELEASE_PLOT_SUFFIX = "_accuracy_vs_size.png"  # results/<model slug><suffix> in a release
MAIN_PLOT = "plots/accuracy_vs_size.png"


class ResultsError(InputError, ValueError):
    """A results folder that cannot go into the card; the message says why."""


@dataclass(frozen=True)
class ModelResult:
    model: EvaluatedModel
    training: dict | None = None  # {method, seed, ...}: a model trained by `hsi train` (from its predictions)

    @property
    def folder(self) -> Path:
        return self.model.folder

    @property
    def config(self) -> str:
        """The config it was measured on (a report naming none is refused by select_results)."""
        return self.model.run["config"]

    @property
    def spec(self) -> str:
        return self.model.spec

    @property
    def partial(self) -> bool:
        return self.model.run["partial"]

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.config}_{self.folder.name}")


def load_results(dirs: list[Path]) -> list[ModelResult]:
    """Every model of every --results folder, checked, with the `hsi train` run that made it if any."""
    return [
        ModelResult(model, model.training()) for folder in dirs for model in evaluated_models(Path(folder), "--results")
    ]


def select_results(results: list[ModelResult], fingerprints: dict[str, str | None]) -> tuple[list[ModelResult], list]:
    """(the results the card shows, notes on those it leaves out). Each report must belong to a
    released config and its exact build (else the release is refused); a partial run is left out."""
    shown, notes = [], []
    for result in results:
        run = result.model.run
        if result.config not in fingerprints:
            raise ResultsError(
                f"results of {printable(result.spec)} are for config {result.config!r}, "
                f"which is not in this release ({sorted(fingerprints)})"
            )
        if run["fingerprint"] != fingerprints[result.config]:
            raise ResultsError(
                f"results of {printable(result.spec)} were measured on another build of "
                f"{result.config} (fingerprint {printable(str(run['fingerprint']))}, released "
                f"{fingerprints[result.config]}); re-run hsi eval"
            )
        if result.partial:
            limit = f"the first {run['limit']} samples" if run["limit"] else "part of the samples"
            notes.append(
                f"left {printable(result.folder.name)} out of the card's results: a partial evaluation ({limit}, "
                "hsi eval --limit); evaluate without --limit to show it"
            )
            continue
        shown.append(result)
    slugs = [r.slug for r in shown]
    twice = sorted({s for s in slugs if slugs.count(s) > 1})
    if twice:
        raise ResultsError(
            f"two results folders of the same name for one config ({', '.join(twice)}); give each model once"
        )
    return shown, notes


# ---------------------------------------------------------------- the plots


def copy_plots(results: list[ModelResult], staging: Path) -> dict[str, str]:
    """Copy each model's main plot into the release (read by the reader: never through a link, only
    a PNG); release-relative paths by slug."""
    copied = {}
    for result in results:
        if MAIN_PLOT not in result.model.plot_files:
            continue
        data = result.model.plot(MAIN_PLOT)
        target = staging / RESULTS_DIR / f"{result.slug}{RELEASE_PLOT_SUFFIX}"
        target.parent.mkdir(exist_ok=True)
        with open(target, "xb") as handle:  # the staging folder is new: nothing is ever overwritten
            handle.write(data)
        copied[result.slug] = f"{RESULTS_DIR}/{target.name}"
    return copied


# ---------------------------------------------------------------- rendering


def _preprocessing(run: dict) -> str:
    """The card's short words for what was applied; a declared or unknown one said to be so."""
    if run["preprocessing_status"] != APPLIED:
        return preprocessing_claim(run)
    return f"centre crop (crop_pct {run['crop_pct']})" if run["cropped"] else "canvas as is (no crop)"


def _input(run: dict) -> str:
    unsaid = "not recorded" if run["preprocessing_status"] == APPLIED else "not known"
    size = f"{run['input_size'][0]}x{run['input_size'][1]}" if run["input_size"] else f"size {unsaid}"
    return f"{size} {run['interpolation'] or f'interpolation {unsaid}'}"


def _weights(result: ModelResult) -> tuple[str, str]:
    """(weights, sha256) cells: what the report and the run's records say, never an empty cell."""
    model, training = result.model.run, result.training or {}
    checkpoint = model["checkpoint"] or training.get("checkpoint")
    digest = model["checkpoint_sha256"] or training.get("checkpoint_sha256")
    sha = f"`{digest}`" if digest else "not recorded"
    if training:
        trained = f"trained with hsi train ({training['method']}, seed {training['seed']})"
        return (f"{checkpoint}, {trained}" if checkpoint else f"{trained}; its run records no checkpoint file"), sha
    weights, digest, note = weights_claim(model)
    if digest is None:
        return weights, note or "not recorded"
    return weights, f"`{digest}`" + (f" ({note})" if note else "")


def render_results(results: list[ModelResult], plots: dict[str, str], table: Callable) -> str:
    """The markdown of the Results section (`table` is the card's own table renderer)."""
    lines = [
        "Top-1 accuracy with 95% bootstrap intervals over source images, from `hsi eval` reports "
        "(rendered from their eval.json)."
    ]
    for config in sorted({r.config for r in results}):
        rows_of = sorted(
            (r for r in results if r.config == config),
            key=lambda r: -((r.model.metrics.get("worst_group") or {}).get("value") or 0.0),
        )
        groups: list[str] = []
        for r in rows_of:
            groups += [g for g in r.model.metrics.get("groups", []) if g not in groups]
        rows = []
        for r in rows_of:
            metrics = r.model.metrics  # the groups' figures only when the report has groups
            by_group = {g["group"]: g["top1"] for g in metrics.get("by_group", [])}
            worst = metrics.get("worst_group")
            rows.append(
                [
                    f"`{r.spec}`",
                    r.model.run["split"],
                    fmt(metrics["overall"]["top1"]),
                    *[fmt(by_group.get(g)) for g in groups],
                    fmt(metrics.get("mean_over_groups")),
                    f"{worst['group']} {fmt(worst)}" if worst else "n/a",
                ]
            )
        lines.append(
            f"### {config}\n\n" + table(["model", "split", "top-1", *groups, "mean over groups", "worst group"], rows)
        )
        details = []
        for r in rows_of:
            run = r.model.run
            details.append(
                [
                    f"`{r.spec}`",
                    *_weights(r),
                    _preprocessing(run),
                    _input(run),
                    run["label_space_name"],
                    run["toolkit"] or "not recorded",
                ]
            )
        lines.append(table(["model", "weights", "sha256", "preprocessing", "input", "label space", "toolkit"], details))
        for r in rows_of:
            if r.slug in plots:
                alt = re.sub(r"[\[\]\s]+", " ", f"{r.spec} on {config}")
                lines.append(f"![{alt}]({plots[r.slug]})")
    return "\n\n".join(lines)
