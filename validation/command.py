"""`hsi validate`: integrity of a composed dataset or parts folder, the paper's centre and size
scores, Grounding DINO box re-detection, previews, and the report written next to the dataset.

Exit status: 0 when every check passes, 1 when an integrity check fails (each failure is printed with
its shard and key), 2 for usage errors (missing inputs, a detector that cannot be loaded).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from builder.commands.common import fail, positive_int

HELP = "check a composed dataset or parts folder, compute centre/size scores, re-detect boxes, draw previews"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", type=Path, nargs="?", help="a composed config folder (OUT/<config>) or a parts folder (OUT/parts)")
    parser.add_argument("--parts", type=Path, help="the parts folder the dataset was composed from: enables the pixel placement check and the parts preview")
    parser.add_argument("--tolerance", type=float, help="mean absolute pixel difference (0-255) allowed in the placement check (default 12)")
    parser.add_argument("--no-previews", action="store_true", help="skip the preview sheets")
    parser.add_argument("--out", type=Path, help="where to write the report when no dataset folder is given")
    scores = parser.add_argument_group("centre and size scores")
    scores.add_argument("--scores", action="store_true", help="per-class centre and size scores from the parts' boxes, or from --boxes-csv")
    scores.add_argument("--boxes-csv", type=Path, help="a LOC_val_solution.csv to score instead of the parts' boxes")
    scores.add_argument("--sizes-from", type=Path, help="image sizes for --boxes-csv: an image folder or a parts folder")
    scores.add_argument("--accuracy", type=Path, nargs="+", help="per-class accuracy (CSV with wnid or class_index and accuracy, or JSON {wnid: acc}) to rank-correlate with the scores; several files: one per model, reported per model and averaged")
    scores.add_argument("--control-accuracy", type=Path, nargs="+", help="per-class clean accuracy (same formats) held fixed in a partial correlation: one file for all --accuracy files, or one for each")
    detection = parser.add_argument_group("box re-detection (Grounding DINO)")
    detection.add_argument("--boxes", action="store_true", help="re-detect the ground-truth boxes with Grounding DINO and report mIoU")
    detection.add_argument("--source", type=Path, help="ImageNet root holding the source images")
    detection.add_argument("--split", default="val", help="source split (default val)")
    detection.add_argument("--boxes-path", type=Path, help="box annotations (XML folder or LOC_<split>_solution.csv; default: searched under --source)")
    detection.add_argument("--detector", default=None, help="Grounding DINO model id or local folder in transformers format (default IDEA-Research/grounding-dino-base)")
    detection.add_argument("--box-threshold", type=float, default=None, help="minimum box score (default 0.35)")
    detection.add_argument("--text-threshold", type=float, default=None, help="minimum text score (default 0.25)")
    detection.add_argument("--iou-threshold", type=float, default=None, help="images with mean IoU below this are listed for review (default 0.5)")
    detection.add_argument("--batch-size", type=positive_int, default=8, help="images per detector call (default 8)")
    detection.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    detection.add_argument("--limit", type=positive_int, help="re-detect only the first N images (by id)")


def _stage_of(folder: Path) -> str | None:
    try:
        return json.loads((folder / "_info.json").read_text("utf-8")).get("stage")
    except (OSError, ValueError):
        return None


def _score_inputs(args: argparse.Namespace, stage: str | None):
    """The boxes to score: a LOC csv joined with sizes, the dataset when it is a parts folder, or --parts."""
    from .scores import boxes_from_loc_csv, boxes_from_parts, image_sizes_from_folder, image_sizes_from_parts, read_loc_solution

    if args.boxes_csv:
        if not args.sizes_from:
            raise ValueError("--boxes-csv needs --sizes-from (an image folder or a parts folder) for the image sizes")
        if _stage_of(args.sizes_from) == "extract":
            sizes = image_sizes_from_parts(args.sizes_from)
        else:
            sizes = image_sizes_from_folder(args.sizes_from, set(read_loc_solution(args.boxes_csv)))
        items, unsized = boxes_from_loc_csv(args.boxes_csv, sizes)
        if unsized:
            print(f"hsi validate: {len(unsized)} images of {args.boxes_csv.name} have no size under --sizes-from "
                  f"and are not scored (first: {', '.join(unsized[:5])})", file=sys.stderr)
        return items
    if stage == "extract":
        return boxes_from_parts(args.dataset)
    if args.parts:
        return boxes_from_parts(args.parts)
    raise ValueError("--scores needs boxes: a parts folder as DATASET, --parts, or --boxes-csv with --sizes-from")


def _detection_items(args: argparse.Namespace, stage: str | None):
    """Images and ground-truth boxes to re-detect: from a parts folder's boxes (images under
    --source) or from the source listing itself."""
    from builder.records import Box
    from builder.sources import detect_layout, list_image_files, load_sources

    from .detection import DetectionItem, _file_loader, items_from_sources
    from .scores import boxes_from_parts

    if not args.source:
        raise ValueError("--boxes needs --source (the ImageNet root holding the source images)")
    parts_dir = args.dataset if stage == "extract" else args.parts
    if parts_dir is None:
        listing = load_sources(args.source, args.split, args.boxes_path, announce=lambda text: print(text, file=sys.stderr))
        return items_from_sources(listing.records, args.limit)
    paths = {image_id: path for image_id, _, path in list_image_files(detect_layout(args.source, args.split).images_dir)}
    items = []
    for item in boxes_from_parts(parts_dir)[: args.limit or None]:
        if item.image_id in paths:
            boxes = tuple(Box(b.x0, b.y0, b.x1, b.y1, b.wnid) for b in item.boxes)
            items.append(DetectionItem(item.image_id, item.wnid, boxes, _file_loader(str(paths[item.image_id]))))
        else:
            items.append(DetectionItem(item.image_id, item.wnid, item.boxes, _missing_loader(item.image_id)))
    return items


def _missing_loader(image_id: str):
    def load():
        raise ValueError(f"{image_id} is not under --source")

    return load


def _accuracies(args: argparse.Namespace, read_accuracy):
    """(accuracy, controls) for compute_scores: one mapping, or several by file name."""
    files, control_files = args.accuracy or [], args.control_accuracy or []
    if control_files and not files:
        raise ValueError("--control-accuracy needs --accuracy")
    if control_files and len(control_files) not in (1, len(files)):
        raise ValueError(f"--control-accuracy takes one file or one per --accuracy file ({len(files)}), got {len(control_files)}")
    if not files:
        return None, None
    names = [path.stem if [p.stem for p in files].count(path.stem) == 1 else f"{path.parent.name}/{path.stem}" for path in files]
    accuracy = {name: read_accuracy(path) for name, path in zip(names, files)}
    controls = None
    if control_files:
        read = [read_accuracy(path) for path in control_files]
        controls = {name: read[i if len(read) > 1 else 0] for i, name in enumerate(names)}
    if len(files) == 1:
        return accuracy[names[0]], ({"accuracy": controls[names[0]]} if controls else None)
    return accuracy, controls


def run(args: argparse.Namespace) -> int:
    from builder.config import ConfigError

    dataset = args.dataset
    if dataset is not None and not dataset.is_dir():
        return fail("validate", f"{dataset} is not a folder; pass a composed config folder (OUT/<config>) or a parts folder")
    stage = _stage_of(dataset) if dataset is not None else None
    if dataset is None and not (args.scores or args.boxes):
        return fail("validate", "nothing to do: pass a dataset folder, --scores or --boxes")
    if dataset is None and args.out is None:
        return fail("validate", "without a dataset folder, pass --out for the report")
    if args.parts is not None and _stage_of(args.parts) != "extract":
        return fail("validate", f"--parts {args.parts} is not a finished parts folder (its _info.json must say stage extract)")
    for name in ("accuracy", "control_accuracy", "boxes_csv", "sizes_from"):
        value = getattr(args, name)
        for path in value if isinstance(value, list) else [value]:
            if path is not None and not path.exists():
                return fail("validate", f"--{name.replace('_', '-')} {path} does not exist")

    scores = detection = None
    try:
        if args.scores:
            from .scores import compute_scores, read_accuracy

            accuracy, controls = _accuracies(args, read_accuracy)
            scores = compute_scores(_score_inputs(args, stage), accuracy, controls)
        elif args.accuracy or args.control_accuracy:
            return fail("validate", "--accuracy and --control-accuracy are used with --scores")
        if args.boxes:
            detection = _run_detection(args, stage)
    except (ValueError, KeyError, ConfigError) as exc:
        return fail("validate", str(exc))
    except RuntimeError as exc:  # DetectorError, SourceError-like problems
        return fail("validate", str(exc))

    from .report import validate_dataset

    report = validate_dataset(
        dataset if dataset is not None else args.out,
        parts_dir=args.parts,
        previews=not args.no_previews,
        scores=scores,
        detection=detection,
        tolerance=args.tolerance,
        check_integrity=dataset is not None,
        report_dir=None if dataset is not None else args.out,
    )
    _print_summary(report)
    return EXIT_OK if report.ok else EXIT_FAILED


def _run_detection(args: argparse.Namespace, stage: str | None) -> dict:
    from .detection import (DEFAULT_BOX_THRESHOLD, DEFAULT_DETECTOR, DEFAULT_IOU_THRESHOLD,
                            DEFAULT_TEXT_THRESHOLD, load_detector, redetect)

    items = _detection_items(args, stage)
    detector = load_detector(args.detector or DEFAULT_DETECTOR, args.device)
    report = redetect(
        items,
        detector,
        batch_size=args.batch_size,
        box_threshold=DEFAULT_BOX_THRESHOLD if args.box_threshold is None else args.box_threshold,
        text_threshold=DEFAULT_TEXT_THRESHOLD if args.text_threshold is None else args.text_threshold,
        iou_threshold=DEFAULT_IOU_THRESHOLD if args.iou_threshold is None else args.iou_threshold,
    )
    return report.to_json()


def _print_summary(report) -> None:
    payload = report.payload
    integrity = payload.get("integrity")
    if integrity:
        for failure in report.integrity.failures:
            print(f"FAIL {failure.line()}", file=sys.stderr)
        print(f"integrity: {integrity['samples_checked']} samples in {integrity['shards_checked']} shards, "
              f"{len(integrity['failures'])} failures")
    if payload.get("scores"):
        summary = payload["scores"]["summary"]
        if summary.get("classes"):
            print(f"scores: {summary['classes']} classes, centre {summary['centre_class_mean']:.3f}, size {summary['size_class_mean']:.3f} (class-averaged)")
    if payload.get("detection"):
        detection = payload["detection"]
        mean = detection["mean_iou"]
        print(f"re-detection: {detection['images']} images, mean IoU {'n/a' if mean is None else f'{mean:.3f}'}, "
              f"{len(detection['below_threshold'])} below {detection['iou_threshold']}")
    print(f"report: {report.json_path} and {report.md_path.name}")
