"""`hsi scgs`: the SCGS-augmented config of a composed source (arXiv 2412.19457): misclassified train
images of an ERM model, a Grad-CAM++ keep-mask of the wrong class (or a control: --mask random,
shifted, none), Stable Diffusion inpainting of the rest with the true class, a label check; written
as `OUT/<source>-scgs[-<mask>]` (train = the source's train + the generated images; val and test
are the source's shards, copied unchanged)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hsi.commands.common import add_run_flags, add_trust_flags, options_from, require_extra, run_options, seed_int

DEFAULT_SHARD_SIZE = 64  # builder.augment.generation's; not imported here, so `hsi --help` stays light

HELP = (
    "add SCGS images (Grad-CAM++ masks of the ERM model's errors, SD inpainting with the true class) to a train split"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", type=Path, help="a composed config folder with a train split (OUT/<config>)")
    parser.add_argument("--out", type=Path, required=True, help="writes OUT/<source config>-scgs[-<mask>]/")
    parser.add_argument("--checkpoint", type=Path, help="the ERM model: an `hsi train` run's best.pt")
    parser.add_argument("--model", help="the ERM model as a model spec (or the architecture of --checkpoint)")
    parser.add_argument(
        "--predictions",
        type=Path,
        help="M from this `hsi eval --split train` predictions.parquet of the same model (default: the model "
        "classifies the train split)",
    )
    parser.add_argument("--clusters", type=int, default=5, help="k-means clusters per class")
    parser.add_argument("--fraction", type=float, default=0.2, help="share of each class's errors regenerated")
    parser.add_argument("--per-image", type=int, default=1, help="images generated per sampled image")
    parser.add_argument("--threshold", type=float, default=0.7, help="keep-mask = CAM >= this")
    parser.add_argument("--cam-layer", help="module of the ERM model the CAM uses (default: its last stage)")
    parser.add_argument(
        "--sd-model",
        default=None,
        help="inpainting pipeline: a hub id or a local folder "
        "(default stable-diffusion-v1-5/stable-diffusion-inpainting)",
    )
    parser.add_argument(
        "--prompt-template", default="a photo of a {class_name}", help="SD prompt; {class_name} is the true class"
    )
    parser.add_argument("--negative-prompt", default="", help="SD negative prompt (default: none)")
    parser.add_argument("--steps", type=int, default=30, help="SD denoising steps, of which int(steps x strength) run")
    parser.add_argument("--guidance", type=float, default=7.5, help="SD classifier-free guidance scale")
    parser.add_argument("--strength", type=float, default=0.9, help="SD inpainting strength, in (0, 1]")
    parser.add_argument(
        "--no-paste-back", action="store_true", help="do not paste the kept source pixels back after generation"
    )
    parser.add_argument(
        "--mask",
        choices=["cam", "random", "shifted", "none"],
        default="cam",
        help="cam (SCGS), or a control: random blobs of the CAM mask's area, the CAM mask shifted, no mask",
    )
    parser.add_argument("--check-model", help="a second model spec for the label check")
    add_trust_flags(parser)  # a ts: --model or --check-model is code: loaded only when trusted
    parser.add_argument("--keep", choices=["all", "agree", "flag"], default="all", help="label-check rule")
    parser.add_argument(
        "--seed", type=seed_int, default=0, help="seed of the error sampling, control masks and diffusion noise"
    )
    parser.add_argument("--batch-size", type=int, default=16, help="classifier and CAM batch size")
    parser.add_argument("--sd-batch-size", type=int, default=4, help="images per diffusion batch")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument(
        "--sd-dtype", default="auto", help="SD weights: auto (float16 on CUDA), float16, bfloat16, float32"
    )
    add_run_flags(parser, DEFAULT_SHARD_SIZE)


def run(args: argparse.Namespace) -> int:
    require_extra("scgs", "augment", "torch", "timm", "diffusers", "sklearn", "pytorch_grad_cam")
    from builder.augment.preflight import check_generation
    from builder.augment.source import SourceError, open_source
    from builder.augment.stage import ScgsModels, ScgsOptions, ScgsStage, check_run_options, run_scgs
    from builder.backends.code_trust import CodeTrust
    from builder.backends.registry import backend_config
    from builder.backends.sd_inpaint import GenerationSettings
    from builder.compose.spec import spec_from_json
    from evaluation.model_formats.labels import config_wnids
    from training.scgs_classifier import ScgsModelLoader, read_train_predictions

    options = options_from(args, ScgsOptions).check()
    generation = options_from(
        args, GenerationSettings, paste_back=not args.no_paste_back, batch_size=args.sd_batch_size
    )
    check_generation(generation)
    run_flags = run_options(args)
    check_run_options(run_flags, args.device)  # --workers that do not fit the GPUs: refused before loading
    source = open_source(args.source)  # cheap refusals first: no train split, not a composed config
    wnids = config_wnids(source.manifest.to_json())
    if len(wnids) != len(source.class_names):
        raise SourceError(
            f"{args.source}: its manifest names {len(source.class_names)} classes but its spec has {len(wnids)}; "
            "validate the source config and rebuild it with `hsi compose`"
        )
    canvas = spec_from_json(source.manifest.spec or {"name": args.source}).canvas
    generator = backend_config("generator", "sd-inpaint", args)
    trust = CodeTrust.of(args.trust_file or (), args.trust_code)
    loader = ScgsModelLoader.of(
        args.model, args.checkpoint, wnids, canvas, args.cam_layer, args.check_model, generator, trust
    )
    loaded = loader(args.device)
    rows = provenance = None
    if args.predictions is not None:
        rows, provenance = read_train_predictions(
            args.predictions, wnids, loaded.classifier, source.manifest.fingerprint
        )
    models = ScgsModels(
        loaded.classifier, loaded.inpainter, generation, loaded.check_classifier, rows, provenance, loader
    )
    stage = ScgsStage(source, args.out, options, models)
    result = run_scgs(stage, run_flags)
    write_previews(stage.out_dir, result.manifest.fingerprint)
    summary = result.manifest.augment or {}
    overall = (summary.get("label_check") or {}).get("overall") or {}
    print(
        f"hsi scgs: {stage.out_dir}: {summary.get('misclassified')} of {summary.get('train_samples')} train samples "
        f"misclassified, {summary.get('sampled_images')} sampled, {summary.get('generated_images')} generated, "
        f"{summary.get('kept_images')} kept (label check agrees on {overall.get('agrees', 0)}; --keep {args.keep}); "
        f"{result.shards_built} shards built, {result.shards_reused} reused"
    )
    return 0


def write_previews(folder: Path, fingerprint: str) -> None:
    """The card's preview sheet and label-check figure beside the shards (releases copy them),
    written under the folder's lock, and only while the folder still holds this run's output: a run
    that started on it meanwhile is left alone (FolderLocked: run the same command again)."""
    from builder.core.locks import exclusive_folder
    from builder.core.manifest import Manifest
    from cards.scgs import write_scgs_previews

    with exclusive_folder(folder):
        current = Manifest.read_if_present(folder)
        if current is not None and current.fingerprint == fingerprint:
            write_scgs_previews(folder)
