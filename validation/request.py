"""One validation request: what to check (integrity, scores, box re-detection, previews) on which
folder, checked as a whole before anything runs, and `run_validation` that carries it out.

`hsi validate` only turns its flags into a `ValidationRequest`; programs build one directly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from builder.compose.parts_input import verify_parts_shards
from builder.core.errors import InputError, UsageError
from builder.core.locks import exclusive_folder
from builder.core.manifest import COMPOSITES, MANIFEST_NAME, PARTS, Manifest, ManifestError, format_of
from builder.core.ray_runner import check_ray_available
from builder.core.slurm_runner import SlurmOptions, check_slurm_available
from builder.core.stage import RUNNERS
from builder.formats.parts_index import resolve_parts_dir
from validation.integrity import check_tolerance
from validation.report import JSON_NAME, ValidationReport, validate_dataset

RELEASE_META = "_release.json"  # the file that marks a release folder (cards.release writes it)


@dataclass(frozen=True)
class ScoresRequest:
    """The paper's centre and size scores: from the parts' boxes, or a LOC csv joined with sizes."""

    boxes_csv: Path | None = None
    sizes_from: Path | None = None
    accuracy: tuple[Path, ...] = ()  # per-class accuracy files, one per model
    control_accuracy: tuple[Path, ...] = ()  # clean accuracy held fixed: one file, or one per accuracy file


@dataclass(frozen=True)
class DetectionRequest:
    """Grounding DINO re-detection of the ground-truth boxes of the source images."""

    source: Path
    split: str = "val"
    boxes_path: Path | None = None
    detector: str | None = None
    box_threshold: float | None = None
    text_threshold: float | None = None
    iou_threshold: float | None = None
    batch_size: int = 8
    device: str = "auto"
    limit: int | None = None
    runner: str = "local"  # local processes, "ray": actors on a Ray cluster, or "slurm": a job array
    ray_address: str | None = None  # None: the running Ray of this process, else a new local one
    slurm: SlurmOptions = SlurmOptions()  # --runner slurm's partition, time, GPUs per task


@dataclass(frozen=True)
class ValidationRequest:
    dataset: Path | None = None
    parts: Path | None = None
    out: Path | None = None
    previews: bool = True
    tolerance: float | None = None
    scores: ScoresRequest | None = None
    detection: DetectionRequest | None = None
    workers: int = 1  # integrity: shards checked at once; re-detection: processes (or Ray actors)

    def __post_init__(self) -> None:
        if self.parts is not None:  # the extract --out folder or its parts/, as compose takes it
            object.__setattr__(self, "parts", resolve_parts_dir(Path(self.parts)))
        if self.dataset is None and self.parts is not None and self.scores is None and self.detection is None:
            # `hsi validate --parts PARTS` alone: the parts folder is what is validated
            object.__setattr__(self, "dataset", self.parts)
            object.__setattr__(self, "parts", None)

    @property
    def dataset_stage(self) -> str | None:
        return stage_of(self.dataset) if self.dataset is not None else None

    @property
    def report_dir(self) -> Path:
        """Where the report goes: --out when given, else next to the dataset."""
        return self.out if self.out is not None else self.dataset  # type: ignore[return-value]

    def check(self) -> None:
        """Refuse a request that cannot run, with the flag to change, before any work (and before
        anything is written)."""
        if self.dataset is not None and not (self.dataset.exists() or self.dataset.is_symlink()):
            raise UsageError(
                f"no such folder: {self.dataset}; pass a composed config folder (OUT/<config>) or a parts folder"
            )
        if self.dataset is not None and not self.dataset.is_dir():
            raise UsageError(
                f"{self.dataset} is not a folder; pass a composed config folder (OUT/<config>) or a parts folder"
            )
        if self.dataset is None and self.scores is None and self.detection is None:
            raise UsageError("nothing to do: pass a dataset folder, --scores or --boxes")
        if self.dataset is None and self.out is None:
            raise UsageError("without a dataset folder, pass --out for the report")
        if self.tolerance is not None:
            check_tolerance(self.tolerance)
        if self.workers < 1:
            raise UsageError(f"--workers {self.workers} must be at least 1")
        if self.dataset is not None:
            self.check_dataset_folder()
        if self.parts is not None and not (self.parts.exists() or self.parts.is_symlink()):
            raise UsageError(f"--parts: no such folder: {self.parts}")
        if self.parts is not None and format_of(stage_of(self.parts)) != PARTS:
            raise UsageError(
                f"--parts {self.parts} is not a finished parts folder (its _info.json must say stage extract); "
                "pass the parts folder `hsi extract` wrote (OUT/parts or OUT) or a release folder made with --parts"
            )
        if self.parts is not None and self.dataset is not None:
            check_parts_match(self.dataset, self.parts)
        if self.scores is not None:
            for flag, values in (
                ("--accuracy", self.scores.accuracy),
                ("--control-accuracy", self.scores.control_accuracy),
                ("--boxes-csv", (self.scores.boxes_csv,)),
                ("--sizes-from", (self.scores.sizes_from,)),
            ):
                for value in values:
                    if value is not None and not value.exists():
                        raise UsageError(f"{flag} {value} does not exist")
            files, controls = self.scores.accuracy, self.scores.control_accuracy
            if controls and not files:
                raise UsageError("--control-accuracy needs --accuracy")
            if controls and len(controls) not in (1, len(files)):
                raise UsageError(
                    f"--control-accuracy takes one file or one per --accuracy file ({len(files)}), got {len(controls)}"
                )
            if self.scores.boxes_csv and not self.scores.sizes_from:
                raise UsageError(
                    "--boxes-csv needs --sizes-from (an image folder or a parts folder) for the image sizes"
                )
            if not self.scores.boxes_csv and format_of(self.dataset_stage) != PARTS and self.parts is None:
                raise UsageError(
                    "--scores needs boxes: a parts folder as DATASET, --parts, or --boxes-csv with --sizes-from"
                )
        if self.detection is not None:
            self.check_detection(self.detection)

    def check_detection(self, detection: DetectionRequest) -> None:
        if not detection.source:
            raise UsageError("--boxes needs --source (the ImageNet root holding the source images)")
        if detection.runner not in RUNNERS:
            raise UsageError(f"--runner must be one of {', '.join(RUNNERS)}, got {detection.runner!r}")
        pinned = detection.device.startswith("cuda:")
        if pinned and detection.runner in ("ray", "slurm"):
            raise UsageError(
                f"--device {detection.device} names one GPU, but "
                + ("Ray gives each actor its own" if detection.runner == "ray" else "Slurm gives each task its own")
                + ": pass --device cuda"
            )
        if pinned and self.workers > 1:
            raise UsageError(
                f"--device {detection.device} names one GPU, but --workers {self.workers} re-detects with one "
                "process per GPU: pass --device cuda, or --workers 1"
            )
        if detection.runner == "ray":
            check_ray_available()
        if detection.runner == "slurm":
            check_slurm_available(detection.slurm)

    def check_dataset_folder(self) -> None:
        """The dataset folder holds a manifest this toolkit wrote (malformed ones are refused with
        the field at fault), and its report may be written where it would go."""
        assert self.dataset is not None
        if not (self.dataset / MANIFEST_NAME).is_file():
            raise InputError(describe_non_dataset(self.dataset))
        Manifest.read(self.dataset)  # raises ManifestError naming the field
        release = self.dataset.resolve().parent.parent
        if self.out is None and (release / RELEASE_META).is_file():
            raise UsageError(
                f"{self.dataset} is a dataset inside the release {release}; its {JSON_NAME} is the "
                "report the release shipped and is not overwritten: pass --out DIR for the new report"
            )


def describe_non_dataset(folder: Path) -> str:
    """What a folder without a manifest is, and the datasets it holds, as a refusal to validate it."""
    held = sorted(p.parent for p in (*folder.glob(f"*/{MANIFEST_NAME}"), *folder.glob(f"data/*/{MANIFEST_NAME}")))
    kind = "a release folder" if (folder / RELEASE_META).is_file() else "not a dataset"
    text = f"{folder} is {kind}: it has no {MANIFEST_NAME}"
    if not held:
        return text + "; an unfinished dataset gets its manifest last: re-run the command that builds it"
    names = ", ".join(p.relative_to(folder).as_posix() for p in held)
    return (
        text + f"; it holds {len(held)} dataset(s): {names}. Validate one of them, "
        f"e.g. `hsi validate {held[0]}`" + (" --out DIR" if kind == "a release folder" else "")
    )


def check_parts_match(dataset: Path, parts: Path) -> None:
    """A composed dataset records the fingerprint of the parts it was composed from; other parts
    would fail every placement and are refused."""
    manifest = Manifest.read(dataset)
    recorded = (manifest.parts or {}).get("fingerprint") if manifest.holds == COMPOSITES else None
    if recorded is None:
        return
    parts_manifest = Manifest.read(parts)
    given = parts_manifest.fingerprint
    if given != recorded:
        raise UsageError(
            f"--parts {parts} has fingerprint {given[:16]}..., but {dataset.name} was composed from parts "
            f"with fingerprint {str(recorded)[:16]}...; pass the parts folder it was composed from"
        )
    # the parts are compared pixel by pixel with the composites: a corrupted parts shard would make
    # a sound dataset fail, or a broken one pass, so every shard must be the one extract wrote
    verify_parts_shards(parts, parts_manifest, sorted(parts_manifest.splits))


def stage_of(folder: Path) -> str | None:
    """The stage that wrote `folder`, or None when it holds no readable manifest."""
    try:
        manifest = Manifest.read_if_present(folder)
    except ManifestError:
        return None
    return manifest.stage if manifest else None


def run_validation(request: ValidationRequest, warn: Callable[[str], None] | None = None) -> ValidationReport:
    """Carry out a checked request, holding the report folder's lock (the one every writing command
    takes: a compose still writing the dataset, or another validate into it, is refused at once)."""
    request.check()
    with exclusive_folder(request.report_dir):
        return _run_locked(request, warn or (lambda text: print(text, file=sys.stderr)))


def _run_locked(request: ValidationRequest, warn: Callable[[str], None]) -> ValidationReport:
    detection = run_detection(request, warn) if request.detection is not None else None
    scores = None
    if request.scores is not None:

        def scores(source_ids):
            return compute_requested_scores(request, warn, source_ids)

    return validate_dataset(
        request.dataset if request.dataset is not None else request.out,  # type: ignore[arg-type]
        parts_dir=request.parts,
        previews=request.previews,
        scores=scores,
        detection=detection,
        tolerance=request.tolerance,
        check_integrity=request.dataset is not None,
        report_dir=request.report_dir,
        workers=request.workers,
        scored=scored_description(request),
    )


def scored_description(request: ValidationRequest) -> str | None:
    """What a report without a dataset folder scored or re-detected, for its header."""
    if request.dataset is not None:
        return None
    what = []
    if request.scores is not None and request.scores.boxes_csv is not None:
        what.append(f"boxes of `{request.scores.boxes_csv.name}` with image sizes from `{request.scores.sizes_from}`")
    elif request.scores is not None:
        what.append(f"boxes of the parts folder `{request.parts}`")
    if request.detection is not None:
        what.append(f"Grounding DINO re-detection on `{request.detection.source}` (split {request.detection.split})")
    return "; ".join(what) or None


def compute_requested_scores(request: ValidationRequest, warn: Callable[[str], None], source_ids=None):
    """The requested scores; `source_ids` (the dataset's own source images) restricts parts' boxes."""
    from validation.scores.inputs import read_accuracy
    from validation.scores.report import compute_scores

    assert request.scores is not None
    accuracy, controls = read_accuracies(request.scores, read_accuracy)
    items, box_issues, unscored = score_inputs(request, warn)
    if source_ids is not None and not request.scores.boxes_csv:
        items = [item for item in items if item.image_id in source_ids]
    return compute_scores(items, accuracy, controls, box_issues, unscored)


def read_accuracies(scores: ScoresRequest, read_accuracy):
    """(accuracy, controls) for `compute_scores`: one mapping, or several keyed by the files' names."""
    files, control_files = scores.accuracy, scores.control_accuracy
    if not files:
        return None, None
    stems = [path.stem for path in files]
    names = [path.stem if stems.count(path.stem) == 1 else f"{path.parent.name}/{path.stem}" for path in files]
    accuracy = {name: read_accuracy(path) for name, path in zip(names, files)}
    controls = None
    if control_files:
        read = [read_accuracy(path) for path in control_files]
        controls = {name: read[i if len(read) > 1 else 0] for i, name in enumerate(names)}
    if len(files) == 1:
        return accuracy[names[0]], ({"accuracy": controls[names[0]]} if controls else None)
    return accuracy, controls


def score_inputs(request: ValidationRequest, warn: Callable[[str], None]):
    """The boxes to score (a LOC csv joined with sizes, the dataset when it is a parts folder, or
    --parts), the boxes that had to be clipped or dropped to fit their images, and the images that
    cannot be scored (rows; each is in the report)."""
    from builder.formats.loc_csv import read_loc_solution
    from validation.scores.inputs import (
        boxes_from_loc_csv,
        boxes_from_parts,
        image_sizes_from_folder,
        image_sizes_from_parts,
    )

    scores = request.scores
    assert scores is not None
    if scores.boxes_csv and scores.sizes_from:
        if format_of(stage_of(scores.sizes_from)) == PARTS:
            sizes = image_sizes_from_parts(scores.sizes_from)
        else:
            sizes = image_sizes_from_folder(scores.sizes_from, read_loc_solution(scores.boxes_csv).ids())
        items, unsized, box_issues = boxes_from_loc_csv(scores.boxes_csv, sizes)
        if unsized:
            warn(
                f"hsi validate: {len(unsized)} images of {scores.boxes_csv.name} have no size under --sizes-from "
                f"and are not scored (first: {', '.join(row.image_id for row in unsized[:5])}); all are listed "
                "in the report"
            )
        if box_issues:
            warn(
                f"hsi validate: {len(box_issues)} boxes of {scores.boxes_csv.name} do not fit their image and were "
                f"clipped or dropped as extract does (first: {box_issues[0].image_id}: {box_issues[0].detail}); "
                "all are listed in the report"
            )
        return items, box_issues, unsized
    parts = request.dataset if format_of(request.dataset_stage) == PARTS else request.parts
    assert parts is not None  # check() refused the request otherwise
    return boxes_from_parts(parts), [], []


def detection_items(request: ValidationRequest, warn: Callable[[str], None]):
    """Images and ground-truth boxes to re-detect: from a parts folder's boxes (images under
    --source) or from the source listing itself."""
    from builder.extract.sources import detect_layout, list_image_files, load_sources
    from validation.detection import DetectionItem, file_loader, items_from_sources, missing_loader
    from validation.scores.inputs import boxes_from_parts

    detection = request.detection
    assert detection is not None
    parts_dir = request.dataset if format_of(request.dataset_stage) == PARTS else request.parts
    if parts_dir is None:
        listing = load_sources(detection.source, detection.split, detection.boxes_path, announce=warn)
        return items_from_sources(listing.records, detection.limit, detection.split)
    paths = {
        image_id: path
        for image_id, _, path in list_image_files(detect_layout(detection.source, detection.split).images_dir)
    }
    items = []
    for item in boxes_from_parts(parts_dir)[: detection.limit or None]:
        path = paths.get(item.image_id)
        load = file_loader(str(path)) if path is not None else missing_loader(item.image_id)
        items.append(DetectionItem(item.image_id, item.wnid, item.boxes, load, detection.split))
    return items


def run_detection(request: ValidationRequest, warn: Callable[[str], None]) -> dict:
    """The re-detection report: the detector is built here first (a detector that cannot be loaded
    is refused before any work), then the chunks run here, in worker processes or on Ray."""
    from builder.backends import backend_config
    from validation.detection import (
        DEFAULT_BOX_THRESHOLD,
        DEFAULT_IOU_THRESHOLD,
        DEFAULT_TEXT_THRESHOLD,
        DetectionJob,
        detection_batches,
        detector_provenance,
        merge_chunks,
        plan_chunks,
    )
    from validation.integrity.driver import ValidationInterrupted

    detection = request.detection
    assert detection is not None
    items = detection_items(request, warn)
    # the detector's config reads the request's detector, device and batch_size
    job = DetectionJob(
        "grounding-dino",
        backend_config("detector", "grounding-dino", detection),
        DEFAULT_BOX_THRESHOLD if detection.box_threshold is None else detection.box_threshold,
        DEFAULT_TEXT_THRESHOLD if detection.text_threshold is None else detection.text_threshold,
    )
    # refused here, before any work, when it cannot be loaded; on Ray the actors' devices are the
    # cluster's (a driver without a GPU still drives GPU actors), so only the weights are checked
    checked = job if detection.runner == "local" else replace(job, config=replace(job.config, device="cpu"))
    provenance = detector_provenance(checked.detector().info())
    chunks = plan_chunks(detection_batches(items, detection.batch_size), request.workers)
    try:
        results = map_detection(job, chunks, request.workers, detection)
    except KeyboardInterrupt:
        raise ValidationInterrupted(
            "interrupted during the box re-detection; its workers were stopped and nothing was written: "
            "run the same command again"
        ) from None
    report = merge_chunks(
        results,
        provenance,
        batch_size=detection.batch_size,
        iou_threshold=DEFAULT_IOU_THRESHOLD if detection.iou_threshold is None else detection.iou_threshold,
        job=job,
    )
    return report.to_json()


@dataclass(frozen=True)
class DetectChunks:
    """One Slurm array task's work: `job` over its contiguous chunks, loading the detector once."""

    job: Callable

    def __call__(self, chunks: list) -> list:
        return [self.job(chunk) for chunk in chunks]


def map_detection(job, chunks: list, workers: int, detection: DetectionRequest) -> list:
    """`job` over the chunks, results in chunk order: on Ray (up to `workers` actors, one GPU each
    when the device asks for CUDA or, with auto, when the cluster has GPUs), else in up to `workers`
    local processes (one per GPU on CUDA), else here."""
    from builder.backends.torch_threads import stage_threads
    from builder.core.runner import map_in_processes
    from validation.detection import forget_detectors

    if detection.runner == "slurm":
        from builder.core.slurm_runner import map_on_slurm

        forget_detectors()  # each array task builds its own
        chunks_per_task = max(1, -(-len(chunks) // max(1, workers)))  # --workers tasks, contiguous chunks each
        groups = [chunks[start : start + chunks_per_task] for start in range(0, len(chunks), chunks_per_task)]
        answers = map_on_slurm(DetectChunks(job), groups, detection.slurm, job_name="hsi-validate")
        return [answer for group in answers for answer in group]
    if detection.runner == "ray":
        from builder.core.ray_runner import map_on_ray

        forget_detectors()  # each actor builds its own; the driver's copy would only hold memory
        gpus = None if detection.device == "auto" else detection.device != "cpu"
        return map_on_ray(job, chunks, address=detection.ray_address, workers=workers, gpus=gpus)
    devices = detection_gpus(detection.device, workers)
    if devices:
        forget_detectors()  # spawned GPU workers build their own; forked CPU workers inherit this one
    with stage_threads():  # the chunks detected here, and the workers forked from here, use the run's count
        return map_in_processes(job, chunks, workers=workers, worker_devices=devices or None)


def detection_gpus(device: str, workers: int) -> list[str]:
    """The GPUs of a re-detection with `workers` local processes: the first `workers` that torch
    sees, named as CUDA_VISIBLE_DEVICES names them, so each worker sees only its own; none with one
    worker, on the CPU, or where there is no CUDA (auto then runs CPU processes)."""
    if workers <= 1 or device == "cpu":
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    count = torch.cuda.device_count()
    visible = [part.strip() for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part.strip()]
    names = visible[:count] if visible else [str(index) for index in range(count)]
    return names[:workers]
