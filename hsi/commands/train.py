"""`hsi train`: train ERM, JTT or DFR on a config's train split (streamed shards), select on the
held-out split per group, score the test split into predictions; `--augment gradmix|random-box` adds
GradMix or its random-box control to the training step (runs in OUT/<method>+<augment>/); `--seeds N`
repeats it per seed, `--report DIR...` summarises runs (mean +- std, paired comparison) as Markdown and a plot,
with each seed's hsi eval report in OUT/results/ for `hsi release --results`.

Multi-GPU / multi-node: `torchrun --nproc-per-node 8 -m hsi.cli train ...` (DDP; each rank streams its shards)."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from hsi.commands.common import options_from, positive_int, require_extra
from training.methods import METHODS

HELP = (
    "train baselines (ERM, JTT, DFR; optionally with GradMix) on a config's train split, with seeds and "
    "worst-group model selection"
)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def _floats(text: str) -> tuple[float, ...]:
    values = tuple(float(v) for v in text.split(",") if v.strip())
    if not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"takes finite numbers, got {text!r}")
    return values


def default_loader_workers(most: int = 4) -> int:
    """`most`, or fewer on a machine with fewer cores: PyTorch warns when a DataLoader asks for
    more workers than the process may run on."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return min(most, cores)


def _names(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", nargs="?", help="a composed dataset folder, a release folder or an hf:// address")
    parser.add_argument("--config", help="the config of a release (default: its default config)")
    parser.add_argument("--out", type=Path, help="run folder; runs go to OUT/<method>/seed-<s>/")
    parser.add_argument(
        "--method",
        choices=list(METHODS),
        default="erm",
        help="the baseline trained (runs in OUT/<method>/): "
        + "; ".join(f"{m.name}: {m.summary}" for m in METHODS.values()),
    )
    parser.add_argument("--model", default="resnet18", help="a timm architecture")
    parser.add_argument(
        "--pretrained", action="store_true", help="start from timm's pretrained weights (offline cache)"
    )
    parser.add_argument("--checkpoint", help="start from a local weights file (loaded by the evaluation loader)")
    parser.add_argument("--epochs", type=int, default=10, help="training epochs")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per step (per rank under torchrun)")
    parser.add_argument("--lr", type=float, default=0.1, help="peak learning rate")
    parser.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd", help="optimiser")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    parser.add_argument("--weight-decay", type=float, default=5e-4, help="weight decay")
    parser.add_argument(
        "--schedule", choices=["cosine", "step", "constant"], default="cosine", help="learning-rate decay per epoch"
    )
    parser.add_argument("--warmup-epochs", type=int, default=0, help="epochs of linear warm-up before the decay")
    parser.add_argument("--step-epochs", type=int, default=30, help="epochs between step decays (--schedule step)")
    parser.add_argument("--step-gamma", type=float, default=0.1, help="factor of each step decay")
    parser.add_argument("--label-smoothing", type=float, default=0.0, help="cross-entropy label smoothing")
    parser.add_argument("--no-flip", action="store_true", help="no horizontal flips")
    parser.add_argument(
        "--random-resized-crop",
        action="store_true",
        help="random resized crops (off by default: a crop can cut away a corner object)",
    )
    parser.add_argument("--crop-scale-min", type=float, default=0.35, help="smallest kept share of the canvas area")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (data order, augmentation, init)")
    parser.add_argument("--seeds", type=positive_int, default=1, help="run seeds SEED .. SEED+N-1")
    parser.add_argument(
        "--select",
        choices=["worst-group", "mean"],
        default="worst-group",
        help="keep the epoch with the best validation worst-group (ties: the better mean) or mean accuracy",
    )
    parser.add_argument("--train-split", default="train", help="the split trained on")
    parser.add_argument("--val-split", default="val", help="the held-out split epochs are selected on")
    parser.add_argument("--test-split", default="test", help="the split scored into predictions.parquet")
    parser.add_argument("--train-groups", type=_names, help="ERM-easy: train only on these groups, e.g. CeO,CoO")
    parser.add_argument("--train-sizes", type=_ints, help="ERM-easy: train only on these sizes, e.g. 84,112")
    parser.add_argument("--shuffle-buffer", type=int, default=2000, help="samples in the seeded shuffle buffer")
    parser.add_argument("--input-size", type=int, help="model input side (default: the config's canvas, uncropped)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, or auto (CUDA when there is one)")
    parser.add_argument(
        "--amp",
        choices=["fp16", "bf16"],
        default="fp16",
        help="mixed precision on CUDA: fp16 with loss scaling, or bf16 (safe on H100/H200, needs no scaling)",
    )
    parser.add_argument("--no-amp", action="store_true", help="no mixed precision on CUDA")
    parser.add_argument("--no-channels-last", action="store_true", help="no channels_last memory format on CUDA")
    parser.add_argument(
        "--workers",
        type=int,
        default=default_loader_workers(),
        help="DataLoader worker processes decoding shards: 4, or the cores this process may use if fewer; "
        "0 decodes in the main process",
    )
    parser.add_argument("--jtt-epochs", type=int, default=1, help="JTT's T: stage-1 ERM epochs")
    parser.add_argument(
        "--jtt-upweight", type=int, default=50, help="JTT's lambda_up (error samples seen 1 + it times)"
    )
    parser.add_argument(
        "--jtt-errors",
        choices=["train-pass", "eval"],
        default="train-pass",
        help="error set from the last stage-1 training pass (the authors') or an eval-mode pass",
    )
    parser.add_argument(
        "--dfr-c",
        type=_floats,
        default="1,0.7,0.3,0.1,0.07,0.03,0.01",  # a string, so --help shows it as it is typed; parsed by _floats
        help="DFR's grid of inverse L1 strengths C, comma-separated (the authors')",
    )
    parser.add_argument("--dfr-refits", type=int, default=20, help="DFR's group-balanced refits averaged into the head")
    parser.add_argument(
        "--dfr-scaler",
        choices=["train", "heldout"],
        default="train",
        help="fit the final StandardScaler on the train split's features (the authors') or the held-out's",
    )
    parser.add_argument(
        "--erm-run",
        type=Path,
        help="DFR: reuse this finished ERM run (OUT/erm, each seed taking its own seed-<s>, or one seed folder) "
        "instead of training one; it must have been trained with the same flags on the same data",
    )
    parser.add_argument(
        "--augment",
        choices=["none", "gradmix", "random-box"],
        default="none",
        help="GradMix (mask the LayerCAM peak of the model being trained) or its control, a random "
        "box of the same size distribution; runs go to OUT/<method>+<augment>/",
    )
    parser.add_argument(
        "--gradmix-layers",
        type=_names,
        help="feature_info module names whose LayerCAM maps are summed (default: the last stage)",
    )
    parser.add_argument(
        "--gradmix-area",
        type=_floats,
        default="0.1,0.5",  # a string, so --help shows it as it is typed; parsed by _floats
        help="range LOW,HIGH of the masked area fraction a = 1 - lambda",
    )
    parser.add_argument(
        "--gradmix-convention",
        choices=["paper", "code"],
        default="paper",
        help="paper: box filled from another sample, loss weighted by the masked fraction; code: "
        "uniform noise, weighted by the kept fraction 1 - a",
    )
    parser.add_argument("--resume", action="store_true", help="continue a killed run from its last.pt")
    parser.add_argument("--overwrite", action="store_true", help="start again in a folder that holds a run")
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="summarise finished runs (OUT or OUT/<method>) into --out (Markdown, plot, and per-seed eval "
        "reports in OUT/results/ for hsi release --results)",
    )
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="with --report: the two methods to compare")


def settings_from(args: argparse.Namespace):
    from training.data import Augmentation
    from training.gradmix import GradMixError, GradMixOptions
    from training.loop import TrainError, TrainSettings

    if len(args.gradmix_area) != 2:
        raise TrainError(f"--gradmix-area takes LOW,HIGH, got {args.gradmix_area}")
    try:
        mixing = GradMixOptions(args.augment, args.gradmix_layers, tuple(args.gradmix_area), args.gradmix_convention)
    except GradMixError as exc:
        raise TrainError(str(exc)) from None
    return options_from(
        args,
        TrainSettings,
        source=str(args.source),
        out=str(args.out),
        mixing=mixing,
        augmentation=Augmentation(not args.no_flip, args.random_resized_crop, args.crop_scale_min),
        amp="off" if args.no_amp else args.amp,
        channels_last=not args.no_channels_last,
        progress=False,  # no progress bar: a run's progress is its per-epoch lines
    )


def run(args: argparse.Namespace) -> int:
    require_extra("train", "models", "torch", "timm", "pyarrow", "scipy", "sklearn")
    from training.loop import TrainError

    if args.out is None:
        raise TrainError("pass --out DIR: the run folder (or, with --report, where the summary goes)")
    if args.report:
        from training.summary import write_summary

        markdown = write_summary(args.report, args.out, compare=tuple(args.compare) if args.compare else None)
        print(markdown)
        return 0
    if not args.source:
        raise TrainError("pass the dataset to train on: hsi train SOURCE --out DIR (a composed config folder)")
    from training.run import MethodOptions, RunControl, run_seeds

    results = run_seeds(
        settings_from(args),
        options_from(args, MethodOptions),
        args.out,
        range(args.seed, args.seed + args.seeds),
        options_from(args, RunControl, announce=print),
    )
    if results:
        from training.summary import method_line, summarise_method

        print(method_line(summarise_method(results)))
    return 0
