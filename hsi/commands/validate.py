"""`hsi validate`: integrity of a composed dataset or parts folder, the paper's centre and size
scores, Grounding DINO box re-detection, previews, and the report written next to the dataset (or
in --out).

Exit status: 0 when every check passes, 1 when an integrity check fails (each failure is printed with
its shard and key), 2 for usage errors (missing inputs, a detector that cannot be loaded, a folder
that is not a dataset, a malformed manifest, parts of another build; nothing is written), 130 on
Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hsi.commands.common import (
    add_imagenet_flags,
    add_slurm_flags,
    out_location,
    positive_int,
    resolve_parts,
    slurm_options,
)

HELP = "check a composed dataset or parts folder, compute centre/size scores, re-detect boxes, draw previews"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dataset",
        type=out_location,
        nargs="?",
        help="a composed config folder (OUT/<config>) or a parts folder (OUT/parts), or its s3://... URL "
        "(the report goes back there)",
    )
    parser.add_argument(
        "--parts",
        help="the parts folder the dataset was composed from (or the extract --out folder holding it, a "
        "release folder made with `hsi release --parts`, hf://datasets/ORG/NAME@REVISION or s3://..., as "
        "`hsi compose --parts` takes them): enables the pixel checks of objects and backgrounds, the fill-quality "
        "figures and the parts previews; alone (no DATASET, --scores or --boxes) validates the parts folder itself",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        help="mean absolute pixel difference (0-255, finite) allowed in the "
        "placement and background checks (default 12)",
    )
    parser.add_argument("--no-previews", action="store_true", help="skip the preview sheets")
    parser.add_argument(
        "--out",
        type=Path,
        help="where to write the report (default: the dataset folder; required "
        "without one, and for a dataset inside a release)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="processes: shards checked in parallel, and with --boxes the re-detection's workers (on CUDA "
        "one per GPU, on the first N GPUs; with --runner ray up to N actors); the report is the same for any count",
    )
    scores = parser.add_argument_group("centre and size scores")
    scores.add_argument(
        "--scores",
        action="store_true",
        help="per-class centre and size scores from the parts' boxes, or from --boxes-csv",
    )
    scores.add_argument("--boxes-csv", type=Path, help="a LOC_val_solution.csv to score instead of the parts' boxes")
    scores.add_argument(
        "--sizes-from", type=Path, help="image sizes for --boxes-csv: an image folder or a parts folder"
    )
    scores.add_argument(
        "--accuracy",
        type=Path,
        nargs="+",
        help="per-class accuracy (CSV with wnid or class_index and accuracy, or JSON {wnid: acc}) to "
        "rank-correlate with the scores; several files: one per model, reported per model and averaged",
    )
    scores.add_argument(
        "--control-accuracy",
        type=Path,
        nargs="+",
        help="per-class clean accuracy (same formats) held fixed in a partial correlation: one file for "
        "all --accuracy files, or one for each",
    )
    detection = parser.add_argument_group("box re-detection (Grounding DINO)")
    detection.add_argument(
        "--boxes", action="store_true", help="re-detect the ground-truth boxes with Grounding DINO and report mIoU"
    )
    add_imagenet_flags(
        detection,
        source_help="ImageNet root holding the source images",
        split_default="val",
        split_help="source split",
        boxes_flag="--boxes-path",
        boxes_help="box annotations (XML folder or LOC_<split>_solution.csv; default: searched under --source)",
    )
    detection.add_argument(
        "--detector",
        default=None,
        help="Grounding DINO model id or local folder in transformers format (default "
        "IDEA-Research/grounding-dino-base)",
    )
    detection.add_argument("--box-threshold", type=float, default=None, help="minimum box score (default 0.35)")
    detection.add_argument("--text-threshold", type=float, default=None, help="minimum text score (default 0.25)")
    detection.add_argument(
        "--iou-threshold",
        type=float,
        default=None,
        help="images with mean IoU below this are listed for review (default 0.5)",
    )
    detection.add_argument("--batch-size", type=positive_int, default=8, help="images per detector call")
    detection.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    detection.add_argument("--limit", type=positive_int, help="re-detect only the first N images (by id)")
    detection.add_argument(
        "--runner",
        choices=["local", "ray", "slurm"],
        default="local",
        help="re-detect in local processes, on Ray actors (one GPU each where the cluster has GPUs, unless "
        "--device cpu) or as a Slurm job array (one task per --workers chunk); the integrity checks run locally",
    )
    detection.add_argument("--ray-address", help="address of a running Ray cluster (default: start a local one)")
    add_slurm_flags(parser, detach=False)


def build_request(args: argparse.Namespace):
    from builder.core.errors import UsageError
    from validation.request import DetectionRequest, ScoresRequest, ValidationRequest

    if (args.accuracy or args.control_accuracy) and not args.scores:
        raise UsageError("--accuracy and --control-accuracy are used with --scores")
    scores = None
    if args.scores:
        scores = ScoresRequest(
            args.boxes_csv, args.sizes_from, tuple(args.accuracy or ()), tuple(args.control_accuracy or ())
        )
    if args.runner in ("ray", "slurm") and not args.boxes:
        where = "on Ray" if args.runner == "ray" else "as a Slurm job array"
        raise UsageError(
            f"--runner {args.runner} runs the box re-detection {where}: pass --boxes (integrity uses --workers)"
        )
    detection = None
    if args.boxes:
        detection = DetectionRequest(
            args.source,
            args.split,
            args.boxes_path,
            args.detector,
            args.box_threshold,
            args.text_threshold,
            args.iou_threshold,
            args.batch_size,
            args.device,
            args.limit,
            args.runner,
            args.ray_address,
            slurm_options(args),
        )
    parts = resolve_parts(args.parts) if args.parts is not None else None
    return ValidationRequest(
        args.dataset, parts, args.out, not args.no_previews, args.tolerance, scores, detection, args.workers
    )


def run(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from builder.core.object_store import stage_out
    from validation.request import run_validation

    mirror = None
    if args.dataset is not None:
        args.dataset, mirror = stage_out(args.dataset)
    # a store folder: locked, staged here, validated, and its report pushed back
    with mirror.mirrored(args.dataset) if mirror else nullcontext():
        report = run_validation(build_request(args))
    _print_summary(report)
    return EXIT_OK if report.ok else EXIT_FAILED


def _print_summary(report) -> None:
    payload = report.payload
    integrity = payload.get("integrity")
    if integrity:
        from validation.integrity import failure_line

        for failure in report.integrity.failures:
            print(f"FAIL {failure_line(failure)}", file=sys.stderr)
        print(
            f"integrity: {integrity['samples_checked']} samples in {integrity['shards_checked']} shards, "
            f"{len(integrity['failures'])} failures"
        )
    if payload.get("scores"):
        summary = payload["scores"]["summary"]
        if summary.get("classes"):
            print(
                f"scores: {summary['classes']} classes, centre {summary['centre_class_mean']:.3f}, size "
                f"{summary['size_class_mean']:.3f} (class-averaged)"
            )
    if payload.get("fill_quality"):
        from validation.fill_quality import summary_lines

        for line in summary_lines(payload["fill_quality"]):
            print(line)
    if payload.get("detection"):
        detection = payload["detection"]
        mean = detection["mean_iou"]
        print(
            f"re-detection: {detection['images']} images, mean IoU {'n/a' if mean is None else f'{mean:.3f}'}, "
            f"{len(detection['below_threshold'])} below {detection['iou_threshold']}"
        )
    print(f"report: {report.json_path} and {report.md_path.name}")
