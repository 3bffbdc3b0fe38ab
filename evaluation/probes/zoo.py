"""Several models: probe each, find its `hsi eval` report (evaluating it on the fly through
evaluation.orchestration.pipeline when a source is given and the report is missing), and relate the two."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import UsageError
from builder.core.owned import OwnedFolder
from evaluation.analysis.report import EVAL_JSON
from evaluation.model_formats.models import LoadedModel, model_slug
from evaluation.orchestration.pipeline import RunSettings, evaluate_model

from . import correlate, schema
from .pipeline import ProbeSettings, ValCache, probe_model
from .shape import open_folder


class MissingEvaluation(UsageError):
    """A model has no eval.json and no source was given to evaluate it on the fly."""


@dataclass(frozen=True)
class EvalLink:
    eval_dir: Path
    source: str | None = None  # evaluate missing models on this release / dataset folder / hf:// address
    run: RunSettings | None = None


def eval_report(loaded: LoadedModel, link: EvalLink, announce: Callable[[str], None]) -> dict:
    """The model's eval.json: read from EVAL_DIR/<model>/, or produced there by evaluate_model; every
    field the probe uses is checked (one line naming the file and the field)."""
    folder = Path(link.eval_dir) / model_slug(loaded.spec)
    path = folder / EVAL_JSON
    if link.source is not None:
        # evaluate_model itself reuses an evaluation of the same data revision and weights
        report = evaluate_model(loaded, link.source, link.eval_dir, link.run or RunSettings(), announce=announce).report
        schema.eval_values(report, path)
        return report
    if not (path.exists() or path.is_symlink()):
        flags = f"--model {loaded.spec}" if " " not in loaded.spec else "the same --model/--models flags"
        raise MissingEvaluation(
            f"{loaded.spec} has no {EVAL_JSON} in {folder}; run `hsi eval SOURCE` with {flags} and "
            f"--out {link.eval_dir} first, or pass --eval-source SOURCE to evaluate it on the fly"
        )
    report = schema.read_eval(path)
    found, expected = schema.eval_model(report, path), loaded.describe()
    for key in ("spec", "checkpoint_sha256"):
        if found[key] != expected[key]:
            raise MissingEvaluation(
                f"{path} evaluates {found[key]!r} as its {key}, not "
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
    """Probe every model; with an eval link, write the table, correlations and scatter figure. Every
    file goes through the probe's owned output folder (locked, no links, never a user's file)."""
    if "shape" in settings.probes:  # a malformed stimulus folder is refused before any probe runs
        open_folder(settings.cue_conflict)
    evaluations: dict[int, dict] = {}
    if link is not None and link.source is None:
        # Every eval.json is read and checked before the first probe, not after an hour of them.
        evaluations = {n: eval_report(loaded, link, announce) for n, loaded in enumerate(models)}
    with OwnedFolder(Path(out_dir), "probe") as out:
        for name in correlate.FILES if link is not None else ():  # refused now, not after the probes
            out.path(name)
        cache = ValCache(settings, announce)
        probed = [(loaded, *probe_model(loaded, settings, out, cache, overwrite, announce)) for loaded in models]
        summary: dict = {"models": [{"spec": loaded.spec, "folder": folder.name} for loaded, folder, _ in probed]}
        if link is None:
            return summary
        entries = [
            (loaded.spec, report, evaluations[n] if n in evaluations else eval_report(loaded, link, announce))
            for n, (loaded, _, report) in enumerate(probed)
        ]
        rows = correlate.table_rows(entries)
        summary["table"] = [str(p) for p in correlate.write_table(out, rows)]
        result = correlate.correlations(rows, resamples, seed)
        summary["correlations"] = str(correlate.write_correlations(out, result))
        summary["correlation_note"] = result.get("note")
        scatter, why_not = correlate.write_scatter(out, rows, result)
        summary["scatter"] = str(scatter) if scatter else None
        summary["scatter_note"] = why_not
    return summary
