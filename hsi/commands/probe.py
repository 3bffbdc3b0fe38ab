"""`hsi probe`: spectral bias, critical band and shape bias of one or several models, and, with
--eval-dir, their Spearman correlations with each model's Hard-Spurious-ImageNet accuracies.

Writes OUT/<model>/probes.json and probes.md; with --eval-dir also OUT/probe_table.csv/.md,
OUT/correlations.json/.md and OUT/plots/probe_scatter.png, all through the probe's owned folder
(builder.core.owned: one run at a time, nothing through a link, never a file it did not write).
Exit status 0, or 2 for usage errors (a model that cannot be loaded, a malformed cue-conflict
folder, a missing or malformed evaluation, an --out it may not write).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from builder.core.errors import UsageError
from hsi.commands.common import add_imagenet_flags, options_from, positive_int, require_extra, seed_int
from hsi.commands.eval import add_model_arguments, model_entries, model_options

HELP = "bias probes (spectral, critical band, shape) per model and their correlation with Hard-Spurious accuracy"
EXIT_OK = 0
PROBE_NAMES = ("spectral", "critical-band", "shape")


# What the probes do to an image, whatever the model's own data config says (runner.py): the title
# of eval's preprocessing group ("the canvas as it is") is eval's, not the probes'.
PREPROCESSING_TITLE = "preprocessing (the probes' own geometry, the same for every model)"
PREPROCESSING_DESCRIPTION = (
    "ImageNet images (spectral, critical band): shorter side resized to 256, then a centre crop of 224 x 224. "
    "Cue-conflict stimuli (shape): resized to 224 x 224 if they differ, no crop. Normalisation and resize "
    "filter: the model's data config unless given here."
)


class _ProbeGroupTitles:
    """The parser as `add_model_arguments` sees it, giving its preprocessing group the probes' title."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser

    def add_argument_group(self, title: str | None = None, **kwargs):
        if title is not None and title.split(" ", 1)[0] == "preprocessing":
            title, kwargs["description"] = PREPROCESSING_TITLE, PREPROCESSING_DESCRIPTION
        return self.parser.add_argument_group(title, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.parser, name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(_ProbeGroupTitles(parser), eval_only=False)  # type: ignore[arg-type]
    data = parser.add_argument_group("stimuli")
    add_imagenet_flags(
        data,
        source_help="ImageNet root whose val images feed the spectral and critical-band probes",
        split_default="val",
        split_help="split of --source",
        boxes_help="box annotations of --source when not found automatically (they label a flat val folder)",
    )
    data.add_argument("--limit", type=positive_int, help="use only the first N images of --source (sorted by id)")
    data.add_argument(
        "--cue-conflict",
        type=Path,
        help="model-vs-human cue-conflict folder (16 class folders of PNGs) for the shape bias",
    )
    data.add_argument(
        "--probes",
        help="comma-separated subset of spectral,critical-band,shape (default: every probe whose stimuli are given)",
    )
    band = parser.add_argument_group("critical band")
    band.add_argument(
        "--criterion",
        choices=("absolute", "relative"),
        default="absolute",
        help="a band's threshold: accuracy above LEVEL (absolute) or above LEVEL x the noise-free accuracy (relative)",
    )
    band.add_argument("--criterion-level", type=float, default=0.5, help="LEVEL of --criterion")
    zoo = parser.add_argument_group("across models")
    zoo.add_argument(
        "--eval-dir",
        type=Path,
        help="an `hsi eval` output folder holding <model>/eval.json: adds the table, the "
        "correlations and the scatter figure (from 3 models)",
    )
    zoo.add_argument(
        "--eval-source",
        help="evaluate models missing from --eval-dir on the fly on this release, dataset folder or hf:// address",
    )
    zoo.add_argument("--eval-config", help="config of --eval-source (default: its default)")
    zoo.add_argument("--eval-split", help="split of --eval-source (default: test if present)")
    zoo.add_argument("--bootstrap", type=positive_int, default=1000, help="bootstrap resamples over models")
    run = parser.add_argument_group("running")
    run.add_argument(
        "--out",
        type=Path,
        default=Path("probe-output"),
        help="output folder: an empty folder or one `hsi probe` wrote; never a link",
    )
    run.add_argument("--batch-size", type=positive_int, default=64, help="images per forward pass")
    run.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    run.add_argument("--seed", type=seed_int, default=0, help="seed of the critical-band noise and of the bootstraps")
    run.add_argument("--overwrite", action="store_true", help="re-run a model already probed with the same settings")
    run.add_argument("--no-progress", action="store_true", help="hide the progress bars (per probe, on stderr)")


def _probes(args: argparse.Namespace) -> tuple[str, ...]:
    if args.probes:
        chosen = tuple(p.strip() for p in args.probes.split(",") if p.strip())
        unknown = sorted(set(chosen) - set(PROBE_NAMES))
        if unknown or not chosen:
            raise UsageError(f"--probes takes a subset of {','.join(PROBE_NAMES)}, got {args.probes!r}")
    else:
        chosen = (("spectral", "critical-band") if args.source else ()) + (("shape",) if args.cue_conflict else ())
        if not chosen:
            raise UsageError(
                "nothing to probe: pass --source IMAGENET_ROOT (spectral, critical band) and/or "
                "--cue-conflict FOLDER (shape bias)"
            )
    needs_source = {"spectral", "critical-band"} & set(chosen)
    if needs_source and args.source is None:
        raise UsageError(f"{', '.join(sorted(needs_source))} need --source IMAGENET_ROOT")
    if args.source is not None and not args.source.is_dir():
        raise UsageError(f"--source {args.source} is not a folder")
    if "shape" in chosen and args.cue_conflict is None:
        raise UsageError("shape needs --cue-conflict FOLDER (model-vs-human's cue-conflict stimuli)")
    return tuple(p for p in PROBE_NAMES if p in chosen)


def _eval_link(args: argparse.Namespace):
    from evaluation.analysis.bootstrap import BootstrapSettings
    from evaluation.orchestration.pipeline import RunSettings
    from evaluation.predicting.data import default_split
    from evaluation.probes.zoo import EvalLink

    if args.eval_dir is None:
        if args.eval_source:
            raise UsageError("--eval-source needs --eval-dir (where the evaluations are written)")
        return None
    if args.eval_source is None:
        return EvalLink(args.eval_dir)
    split = args.eval_split or default_split(args.eval_source, args.eval_config)
    run = RunSettings(
        config=args.eval_config,
        split=split,
        batch_size=args.batch_size,
        device=args.device,
        workers=0,
        progress=False,
        bootstrap=BootstrapSettings(resamples=args.bootstrap, seed=args.seed),
    )
    return EvalLink(args.eval_dir, args.eval_source, run)


def run(args: argparse.Namespace) -> int:
    require_extra("probe", "models", "torch", "timm", "scipy", "pyrtools")
    from evaluation.model_formats.models import check_trust, load_model
    from evaluation.probes.pipeline import ProbeSettings
    from evaluation.probes.zoo import probe_zoo

    if not 0 < args.criterion_level < 1:
        raise UsageError(f"--criterion-level must be in (0, 1), got {args.criterion_level}")
    settings = options_from(args, ProbeSettings, probes=_probes(args), progress=not args.no_progress)
    link = _eval_link(args)
    specs = [(entry["model"], model_options(entry, args)) for entry in model_entries(args)]
    for spec, options in specs:  # every untrusted ts: file refused before any model loads
        check_trust(spec, options)
    models = [load_model(spec, options) for spec, options in specs]
    summary = probe_zoo(
        models,
        settings,
        args.out,
        link,
        args.bootstrap,
        args.seed,
        args.overwrite,
        announce=lambda text: print(text, file=sys.stderr),
    )
    for entry in summary["models"]:
        print(f"{entry['spec']}: {args.out / entry['folder'] / 'probes.md'} and probes.json")
    if link is not None:
        print(
            f"table: {summary['table'][1]}; correlations: {summary['correlations']}"
            + (f" ({summary['correlation_note']})" if summary.get("correlation_note") else "")
        )
        if summary.get("scatter"):
            print(f"scatter: {summary['scatter']}")
        elif summary.get("scatter_note"):
            print(summary["scatter_note"])
    return EXIT_OK
