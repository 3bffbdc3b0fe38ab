"""Several models: probe each, find its `hsi eval` report (evaluating it on the fly through
evaluation.pipeline when a source is given and the report is missing), and relate the two."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import UsageError

from ..models import LoadedModel, model_slug
from ..pipeline import RunSettings, evaluate_model, load_existing
from ..report import EVAL_JSON
from . import correlate
from .pipeline import ProbeSettings, ValCache, probe_model


class MissingEvaluation(UsageError):
    """A model has no eval.json and no source was given to evaluate it on the fly."""


@dataclass(frozen=True)
class EvalLink:
    eval_dir: Path
    source: str | None = None  # evaluate missing models on this release / dataset folder / hf:// address
    run: RunSettings | None = None


def eval_report(loaded: LoadedModel, link: EvalLink, announce: Callable[[str], None]) -> dict:
    """The model's eval.json: read from EVAL_DIR/<model>/, or produced there by evaluate_model."""
    folder = Path(link.eval_dir) / model_slug(loaded.spec)
    path = folder / EVAL_JSON
    if link.source is not None:
        # evaluate_model itself reuses an evaluation of the same data revision and weights
        return evaluate_model(loaded, link.source, link.eval_dir, link.run or RunSettings(), announce=announce).report
    if not path.is_file():
        flags = f"--model {loaded.spec}" if " " not in loaded.spec else "the same --model/--models flags"
        raise MissingEvaluation(
            f"{loaded.spec} has no {EVAL_JSON} in {folder}; run `hsi eval SOURCE` with {flags} and "
            f"--out {link.eval_dir} first, or pass --eval-source SOURCE to evaluate it on the fly"
        )
    report = load_existing(folder)
    expected = loaded.describe()
    for key in ("spec", "checkpoint_sha256"):
        if report["model"].get(key) != expected[key]:
            raise MissingEvaluation(
                f"{path} evaluates {report['model'].get(key)!r} as its {key}, not "
                f"{expected[key]!r}: re-run `hsi eval` for this model or pass --eval-source"
            )
    return report


def probe_zoo(
    models: list[LoadedModel],
    settings: ProbeSettings,
    out_dir: Path,
    link: EvalLink | None,
    resamples: int = 1000,
    seed: int = 0,
    overwrite: bool = False,
    announce: Callable[[str], None] = print,
) -> dict:
    """Probe every model; with an eval link, write the table, correlations and scatter plots."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = ValCache(settings, announce)
    if link is not None and link.source is None:  # refuse before the first probe, not after an hour of them
        for loaded in models:
            if not (Path(link.eval_dir) / model_slug(loaded.spec) / EVAL_JSON).is_file():
                eval_report(loaded, link, announce)
    probed = [(loaded, *probe_model(loaded, settings, out_dir, cache, overwrite, announce)) for loaded in models]
    summary: dict = {"models": [{"spec": loaded.spec, "folder": folder.name} for loaded, folder, _ in probed]}
    if link is None:
        return summary
    entries = [(loaded.spec, report, eval_report(loaded, link, announce)) for loaded, _, report in probed]
    rows = correlate.table_rows(entries)
    summary["table"] = [str(p) for p in correlate.write_table(out_dir, rows)]
    result = correlate.correlations(rows, resamples, seed)
    summary["correlations"] = str(correlate.write_correlations(out_dir, result))
    summary["correlation_note"] = result.get("note")
    scatter = correlate.write_scatter(out_dir, rows)
    summary["scatter"] = str(scatter) if scatter else None
    return summary
