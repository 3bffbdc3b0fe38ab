"""`hsi eval`: measure one or several models on a config's groups, sizes, positions and tiers.

Writes OUT/<model>/predictions.parquet, eval.json, eval.md, entry.json (its leaderboard entry) and
plots/, and OUT/leaderboard.csv/.md, all through OUT's OwnedFolder: one run per OUT, nothing through
a link, never a user's file. The model folder's name carries what changes the numbers
(`-crop0.875`, `-subset`, `-limit240`).
Several models run one after another here, or `--model-workers N` at once in worker processes (on
CUDA one per GPU), or on Ray (`--runner ray`, one actor per model); the predictions are the same.
Each model's reports are written as it finishes, and the leaderboard is rebuilt after each one.

Exit status: 0 on success, 2 for usage errors (a model that cannot be loaded, outputs that fit no
label space, a missing source, a shard that fails its sha256, a broken eval.json in OUT), printed as
`hsi eval: error: ...`. In a sweep (several models) only a spec wrong on its face (an unknown timm
or torchvision name, a missing model file or checkpoint) is refused before any model runs; a model
that fails later (its weights will not load, it crashes, CUDA runs out of memory at a batch of 1)
is a row of the leaderboard with its reason (OUT/<model>/failed.json), the other models still run,
and the exit status is 3.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from builder.core.errors import UsageError
from hsi.commands.common import (
    add_slurm_flags,
    add_trust_flags,
    options_from,
    positive_int,
    require_extra,
    seed_int,
    slurm_options,
)

HELP = "evaluate models on a composed config: predictions, per-group metrics with intervals, reports, leaderboard"
EXIT_OK, EXIT_USAGE = 0, 2  # and 3 when some models of a sweep failed (evaluation.orchestration.sweep.ModelsFailed)


def add_model_arguments(parser: argparse.ArgumentParser, eval_only: bool) -> None:
    """The model flags of `hsi eval`, shared with `hsi probe`; `eval_only` adds the ones the probes do
    not take (they fix their own geometry and score all 1000 classes)."""
    models = parser.add_argument_group("models")
    models.add_argument(
        "--model",
        help="timm:NAME (or a bare timm name), tv:NAME, ts:FILE (TorchScript: code, loaded only with --trust-file "
        "or --trust-code), ep:FILE (torch.export .pt2), onnx:FILE, a state_dict FILE with --arch, or zero-shot CLIP: "
        "openclip:ARCH[:TAG|FILE] (weights from the Hub cache by tag, a file, or $HSI_OPENCLIP_WEIGHTS) or "
        "hf-clip:ID|DIR (a transformers CLIPModel)",
    )
    models.add_argument(
        "--models",
        help="several models: comma-separated specs, or a YAML file listing specs or mappings {model, checkpoint, "
        "arch, ..., trusted_sha256}",
    )
    models.add_argument(
        "--checkpoint",
        type=Path,
        help="local weights for a timm or tv model (through timm's pretrained_cfg_overlay=dict(file=...))",
    )
    models.add_argument("--arch", help="architecture of a state_dict file (a timm name or tv:NAME)")
    models.add_argument("--num-classes", type=positive_int, help="class count of a checkpoint that is not 1000-way")
    models.add_argument(
        "--classes", type=Path, help="wnids of the model's outputs in order, one a line (a model trained on a subset)"
    )
    add_trust_flags(models)  # ts: files are code: loaded only when trusted
    if eval_only:
        models.add_argument(
            "--templates",
            metavar="SETS",
            help="the prompt sets a zero-shot model (openclip:, hf-clip:) scores from one pass over the images, "
            "comma-separated: openai (CLIP's 80 ImageNet templates), simple (its 7), no-scale (the 80 without the 8 "
            "that name scale or framing), or a YAML file of one's own sets; the first fills the prediction columns, "
            "each is reported with its difference from the first (default: openai,simple,no-scale)",
        )
        models.add_argument(
            "--label-space",
            choices=("imagenet", "subset"),
            default="imagenet",
            help="how a 1000-way model is scored on a subset config: argmax over all 1000 classes (imagenet) or over "
            "the config's classes (subset)",
        )
    pre = parser.add_argument_group("preprocessing (default: the model's data config, on the canvas as it is)")
    if eval_only:
        pre.add_argument(
            "--crop-pct", type=float, help="reproduce a resize-then-centre-crop protocol, e.g. 0.875 (default: no crop)"
        )
    pre.add_argument("--mean", help="normalisation mean, 3 comma-separated values (default: the model's)")
    pre.add_argument("--std", help="normalisation std, 3 comma-separated values (default: the model's)")
    if eval_only:
        pre.add_argument("--input-size", help="model input size: S, or H,W (default: the model's)")
    pre.add_argument(
        "--interpolation",
        choices=("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming"),
        help="resize filter (default: the model's)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        nargs="?",
        help="a release folder, a composed dataset folder (OUT/<config>) or hf://datasets/ORG/NAME@REVISION",
    )
    parser.add_argument("--config", help="config of a release (default: its default config)")
    parser.add_argument("--split", help="split to evaluate (default: test if present, else the only or first split)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("eval-output"),
        help="output folder: one subfolder per model, plus the leaderboard",
    )
    add_model_arguments(parser, eval_only=True)
    run = parser.add_argument_group("running")
    run.add_argument(
        "--batch-size",
        type=positive_int,
        default=64,
        help="images per forward pass, halved on CUDA out-of-memory",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=2,
        help="DataLoader worker processes decoding shards; 0 decodes in the main process",
    )
    run.add_argument(
        "--model-workers",
        type=positive_int,
        metavar="N",
        help="models evaluated at once, each whole model in a process of its own (not --workers, which decode for "
        "one model): N local processes, on CUDA one per GPU (so at most the GPU count), or with --runner ray at "
        "most N actors (default: 1 locally; on Ray one per GPU of the cluster, else 1); the predictions are the "
        "same for any N. One model over N: its shards split into N parts, one per process. A failed model of "
        "several is a leaderboard row, and the exit status is 3",
    )
    run.add_argument(
        "--runner",
        choices=("local", "ray", "slurm"),
        default="local",
        help="local: this machine; ray: one Ray actor per model (a GPU actor when the cluster has GPUs); slurm: "
        "one task per model of one Slurm job array",
    )
    run.add_argument("--ray-address", help="address of a running Ray cluster (default: start a local one)")
    add_slurm_flags(parser, detach=False)  # its own group: argparse deprecates nested groups
    run.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    run.add_argument(
        "--amp",
        nargs="?",
        const=True,
        default=False,
        type=amp_kind,
        metavar="fp16|bf16",
        help="mixed precision on CUDA: a bare --amp is fp16; --amp bf16 for bf16",
    )
    run.add_argument("--channels-last", action="store_true", help="channels_last memory format")
    run.add_argument("--limit", type=positive_int, help="evaluate only the first N samples (a quick look)")
    run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="re-evaluate a model already evaluated in its folder under --out (on this data revision, or with other "
        "weights or data), replacing its files; with --predictions, replace another model's evaluation in the folder "
        "the file's results go to",
    )
    analysis = parser.add_argument_group("analysis")
    analysis.add_argument(
        "--from",
        dest="from_predictions",
        type=Path,
        help="recompute every report from a predictions.parquet, without the model",
    )
    analysis.add_argument(
        "--predictions",
        type=Path,
        help="score predictions made elsewhere on SOURCE: a CSV or parquet file of key and pred_class (0-999) or "
        "pred_wnid, optionally top5_class/top5_wnid (';'-separated) and probabilities",
    )
    analysis.add_argument(
        "--preprocessing",
        metavar="FIELD=VALUE,...",
        help="with --predictions: how the images were prepared for the model that made them, recorded as declared "
        "(not checked): resize, crop_pct, size (S or HxW), interpolation, mean and std (R/G/B in [0, 1] units), e.g. "
        "resize=256,crop_pct=0.875,size=224,interpolation=bicubic,mean=0.485/0.456/0.406,std=0.229/0.224/0.225 "
        "(default: recorded as unknown)",
    )
    analysis.add_argument("--bootstrap", type=positive_int, default=1000, help="bootstrap resamples for the intervals")
    analysis.add_argument("--seed", type=seed_int, default=0, help="bootstrap seed")
    analysis.add_argument(
        "--clean", type=Path, help="ImageNet root: also classify the original photos of the same source images"
    )
    analysis.add_argument("--clean-split", default="val", help="split of the --clean root")
    analysis.add_argument(
        "--parts",
        type=Path,
        help="parts folder: also classify the inpainted backgrounds alone (per-class background accuracy)",
    )
    entry = parser.add_argument_group(
        "leaderboard entry (OUT/<model>/entry.json; what is not given is null, never guessed)"
    )
    entry.add_argument("--entry-name", help="the model's name on the leaderboard (default: its spec); one model only")
    entry.add_argument("--architecture", help="its architecture as a reader names it, e.g. 'ResNet-50'")
    entry.add_argument("--training-data", help="what it was trained on, e.g. 'ImageNet-1k train'")
    entry.add_argument("--paper", help="link to its paper (http or https), e.g. https://arxiv.org/abs/...")
    entry.add_argument(
        "--entry-url",
        help="where entry.json will be published (http or https), e.g. its model repo's file: the `source` of the "
        "Hub's .eval_results file (none is written without it)",
    )


def _size(text: str | None) -> tuple[int, int] | None:
    from evaluation.model_formats.models import MAX_INPUT_SIDE

    if text is None:
        return None
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) == 3:
        values = values[1:]
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or min(values) < 1:
        raise UsageError(f"--input-size takes S, H,W or 3,H,W (whole numbers of at least 1), got {text!r}")
    if max(values) > MAX_INPUT_SIDE:
        raise UsageError(f"--input-size {text}: a side of at most {MAX_INPUT_SIDE} pixels, got {max(values)}")
    return values[0], values[1]


def model_entries(args: argparse.Namespace) -> list[dict]:
    """Each model to evaluate as a mapping of its spec and per-model options (evaluation.orchestration.model_list)."""
    from evaluation.orchestration.model_list import model_entries as listed_models

    return listed_models(args.model, args.models, bool(args.checkpoint or args.arch or args.classes))


def model_options(entry: dict, args: argparse.Namespace, template_sets: dict | None = None):
    from builder.backends.code_trust import CodeTrust
    from evaluation.model_formats.models import ModelOptions, parse_floats, read_classes_file

    def pick(name):
        return entry.get(name, getattr(args, name, None))

    mean, std = pick("mean"), pick("std")
    classes = pick("classes")
    size = entry.get("input_size", getattr(args, "input_size", None))
    return ModelOptions(
        checkpoint=Path(pick("checkpoint")) if pick("checkpoint") else None,
        arch=pick("arch"),
        num_classes=pick("num_classes"),
        classes=read_classes_file(Path(classes)) if classes else None,
        mean=parse_floats(str(mean), 3, "--mean") if mean is not None else None,
        std=parse_floats(str(std), 3, "--std", positive=True) if std is not None else None,
        input_size=_size(str(size)) if size is not None else None,
        interpolation=pick("interpolation"),
        crop_pct=pick("crop_pct"),
        trust=CodeTrust.of(args.trust_file or (), args.trust_code).with_files(
            entry.get("trusted_sha256") or (), "trusted_sha256"
        ),
        template_sets=tuple(template_sets.items()) if template_sets else None,
    )


def entry_infos(entries: list[dict], args: argparse.Namespace) -> list:
    """The leaderboard-entry description of each model: its models.yaml keys, else the flags."""
    from evaluation.ranking.entries import DESCRIPTION, EntryInfo

    if args.entry_name is not None and len(entries) > 1:
        raise UsageError(
            "--entry-name names one model; give each model of --models its own `entry_name:` in a models.yaml"
        )
    return [
        EntryInfo.checked(**{field: entry.get(key, getattr(args, key)) for field, _, key in DESCRIPTION})
        for entry in entries
    ]


def entry_info(args: argparse.Namespace):
    """The description the entry flags give (one model: `--from`, `--predictions`)."""
    return entry_infos([{}], args)[0]


def _value(estimate: dict | None) -> str:
    value = (estimate or {}).get("value")
    return "n/a" if value is None else f"{value:.3f}"


def _announce(text: str) -> None:
    print(text, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    require_extra("eval", "models", "torch", "timm", "pyarrow", "scipy")
    from evaluation.analysis.bootstrap import BootstrapSettings
    from evaluation.zero_shot.templates import resolve_template_sets

    bootstrap = BootstrapSettings(resamples=args.bootstrap, seed=args.seed)
    if args.from_predictions is not None and args.predictions is not None:
        raise UsageError(
            "--from recomputes an hsi eval predictions.parquet, --predictions scores a file made elsewhere: pass one"
        )
    if args.preprocessing is not None and args.predictions is None:
        raise UsageError(
            "--preprocessing declares how predictions made elsewhere were prepared: pass it with --predictions FILE "
            "(a model run records what it applies: --crop-pct, --input-size, --interpolation, --mean, --std)"
        )
    if args.from_predictions is not None:
        return _run_from(args, bootstrap)
    if args.predictions is not None:
        return _run_predictions(args, bootstrap)
    if not args.source:
        raise UsageError(
            "pass a SOURCE (release folder, dataset folder or hf:// address), or --from predictions.parquet"
        )
    if "://" not in args.source and not Path(args.source).is_dir():
        raise UsageError(
            f"{args.source} is not a folder; pass a release folder, a composed dataset folder or hf://datasets/ORG/NAME@REVISION"
        )
    for flag, value in (("--clean", args.clean), ("--parts", args.parts)):
        if value is not None and not value.is_dir():
            raise UsageError(f"{flag} {value} is not a folder")
    if args.workers < 0:
        raise UsageError("--workers must be 0 or more")
    if args.ray_address is not None and args.runner != "ray":
        raise UsageError("--ray-address names a Ray cluster: pass it with --runner ray")
    if args.runner == "ray":
        from builder.core.ray_runner import check_ray_available

        check_ray_available()
    if args.runner == "slurm":
        from builder.core.slurm_runner import check_slurm_available

        check_slurm_available(slurm_options(args))

    from evaluation.analysis.report import EVAL_MD
    from evaluation.model_formats.models import check_spec, check_trust, is_zero_shot_spec
    from evaluation.orchestration.pipeline import RunSettings
    from evaluation.orchestration.runs import eval_folder, evaluate_all
    from evaluation.orchestration.sweep import ModelsFailed
    from evaluation.predicting.data import default_split

    def summarise(spec: str, result) -> None:
        metrics = result.report["metrics"]
        summary = f"top-1 {_value(metrics['overall']['top1'])}" if metrics.get("overall") else "no samples"
        if metrics.get("has_groups"):
            worst = metrics["groups_summary"]["worst_group"]
            summary += f", worst group {worst['group']} {_value(worst)}"
        # flushed: in a sweep these lines come as each model finishes, between the workers' own
        print(f"{spec}: {summary} ({metrics['samples']} samples, {metrics['errors']['total']} error rows)", flush=True)
        files = "eval.json, entry.json, predictions.parquet, plots/"
        print(f"  reports: {result.folder / EVAL_MD} and {files}", flush=True)

    template_sets = resolve_template_sets(args.templates) if args.templates is not None else None  # files read once
    with eval_folder(args.out) as owned:
        entries = model_entries(args)
        if template_sets is not None and not any(is_zero_shot_spec(entry["model"]) for entry in entries):
            raise UsageError(
                "--templates sets the prompt sets of zero-shot models (openclip:, hf-clip:); none is given"
            )
        settings = options_from(
            args,
            RunSettings,
            split=args.split or default_split(args.source, args.config),
            progress=not args.no_progress,
            bootstrap=bootstrap,
            clean_root=args.clean,
            parts_dir=args.parts,
            part=None,  # the whole data: a sweep of one model over workers sets each worker's part
        )
        infos = entry_infos(entries, args)  # checked before any model loads
        specs = [(entry["model"], model_options(entry, args, template_sets)) for entry in entries]
        for spec, options in specs:  # an untrusted ts: file, before any worker or actor starts
            check_trust(spec, options)
        if len(specs) > 1:  # a sweep refuses a mistyped spec now, not after the models before it
            for spec, options in specs:
                check_spec(spec, options)
        summary = evaluate_all(
            specs,
            args.source,
            owned,
            settings,
            _announce,
            summarise,
            infos,
            runner=args.runner,
            workers=args.model_workers,
            ray_address=args.ray_address,
            slurm=slurm_options(args) if args.runner == "slurm" else None,
        )
    failed = f", {len(summary.failures)} failed" if summary.failures else ""
    print(f"leaderboard ({len(summary.rows)} models{failed}): {summary.md_path} and leaderboard.csv")
    if summary.failures:
        raise ModelsFailed(
            f"{len(summary.failures)} of {len(specs)} models failed ("
            + "; ".join(f"{f.spec}: {f.reason}" for f in summary.failures[:3])
            + (f"; and {len(summary.failures) - 3} more" if len(summary.failures) > 3 else "")
            + "): each is a row of the leaderboard and its folder's failed.json says why; the others were "
            "evaluated. Run the same command again to retry them (evaluated models are skipped)"
        )
    return EXIT_OK


def _run_from(args: argparse.Namespace, bootstrap) -> int:
    from evaluation.analysis.report import EVAL_MD
    from evaluation.orchestration.runs import recompute_from

    path = args.from_predictions
    if not path.is_file():
        what = "is a folder, not a predictions file (pass its predictions.parquet)" if path.is_dir() else "no such file"
        raise UsageError(f"--from {path}: {what}")
    info = entry_info(args)
    folder, report = recompute_from(path, args.out if args.out != Path("eval-output") else None, bootstrap, info)
    print(
        f"reports recomputed from {path.name}: {folder.path / EVAL_MD}, eval.json and entry.json "
        f"({report['metrics']['samples']} samples)"
    )
    return EXIT_OK


# The flags scoring a predictions file reads (its leaderboard entry's description among them); every
# other one configures a model run (the model, its preprocessing, its batches, --limit, --clean,
# --parts), which the file's predictions have replaced.
PREDICTIONS_FLAGS = frozenset(
    {"source", "config", "split", "out", "overwrite", "predictions", "preprocessing", "bootstrap", "seed"}
    | {"no_progress"}
    | {"entry_name", "architecture", "training_data", "paper", "entry_url"}
)


def model_run_flags_given(args: argparse.Namespace) -> list[str]:
    """The model-run flags `args` sets to other than their default, by name: those a user gave (a flag
    given its default value cannot be told apart, and changes nothing)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    defaults = parser.parse_args([])
    return [
        action.option_strings[-1]
        for action in parser._actions  # argparse lists its actions only here
        if action.dest not in PREDICTIONS_FLAGS and getattr(args, action.dest) != getattr(defaults, action.dest)
    ]


def _run_predictions(args: argparse.Namespace, bootstrap) -> int:
    from evaluation.analysis.report import EVAL_MD
    from evaluation.orchestration.external import preprocessing_section, score
    from evaluation.orchestration.runs import save_scored

    preprocessing_section(args.preprocessing, "--preprocessing")  # a bad declaration: one line, nothing written
    given = model_run_flags_given(args)
    if given:
        raise UsageError(
            f"--predictions already fixes the model's outputs, so {', '.join(given)} (for a model run) "
            f"{'does' if len(given) == 1 else 'do'} not apply; drop {'it' if len(given) == 1 else 'them'}, or "
            "evaluate the model itself without --predictions"
        )
    if not args.source:
        raise UsageError("--predictions scores a file on a SOURCE: pass the release folder, dataset folder or hf://")
    info = entry_info(args)
    evaluation = score(
        args.predictions,
        args.source,
        config=args.config,
        split=args.split,
        bootstrap=bootstrap,
        preprocessing=args.preprocessing,
        announce=_announce,
    )
    folder, board = save_scored(evaluation, args.out, args.predictions, info, args.overwrite)
    print(
        f"{args.predictions.name}: {evaluation.metrics['samples']} samples scored: {folder / EVAL_MD}, eval.json and "
        f"entry.json; leaderboard: {board} and leaderboard.csv"
    )
    return EXIT_OK


def amp_kind(text: str) -> bool | str:
    """--amp's value as the run records it: True for fp16 (as before bf16 was a choice), "bf16"."""
    if text not in ("fp16", "bf16"):
        raise argparse.ArgumentTypeError(f"takes fp16 or bf16, got {text!r}")
    return True if text == "fp16" else "bf16"
