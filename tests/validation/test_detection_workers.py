"""Box re-detection in worker processes and on Ray: the same `validation.json` and `validation.md`,
byte for byte, as one process; batches that do not depend on how they are shared out; an image the
detector fails on is a row, not the end of the run; and the process mapper's order, GPU pinning
and Ctrl-C."""

import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from builder.backends import BackendInfo, Detector
from builder.core.records import Box
from builder.core.runner import map_in_processes


def any_box(tiny_model) -> list[str]:
    """Flags that run the tiny detector on the CPU and keep every box it finds."""
    return ["--detector", str(tiny_model), "--box-threshold", "0", "--text-threshold", "0", "--device", "cpu"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from fake_imagenet import WNIDS
    from tiny_detector import save_tiny_grounding_dino

    return save_tiny_grounding_dino(tmp_path_factory.mktemp("tiny-gdino"), WNIDS)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Seven val images of several sizes, one of them not an image at all."""
    from fake_imagenet import write_tree

    tree = write_tree(tmp_path_factory.mktemp("src") / "imagenet", split="val", count=7)
    broken = tree.good[2]
    next(tree.root.rglob(f"{broken.image_id}.JPEG")).write_bytes(b"not a jpeg" * 20)
    return tree, broken.image_id


def validate(tiny_model, tree, out, *extra) -> dict:
    from hsi.cli import main

    args = ["validate", "--boxes", "--source", str(tree.root), *any_box(tiny_model), "--batch-size", "2"]
    assert main([*args, "--out", str(out), *extra]) == 0
    return json.loads((out / "validation.json").read_text())


@pytest.fixture(scope="module")
def one_process(tiny_model, source, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "report"
    return out, validate(tiny_model, source[0], out)


def assert_same_report(one_process, out):
    reference, _ = one_process
    assert (out / "validation.json").read_bytes() == (reference / "validation.json").read_bytes()
    assert (out / "validation.md").read_bytes() == (reference / "validation.md").read_bytes()


def test_two_worker_processes_write_the_one_process_report_byte_for_byte(tiny_model, source, one_process, tmp_path):
    tree, broken = source
    _, single = one_process
    detection = single["detection"]
    assert detection["images"] == 6 and detection["mean_iou"] is not None
    assert [row["image_id"] for row in detection["unreadable"]] == [broken]
    # the workers' torch threads are the run's, not their environment's (torch's default here, 1 forked)
    assert detection["torch"] == {"intra_op_threads": 1, "device_type": "cpu", "precision": "fp32"}
    out = tmp_path / "report"  # the same folder name: the report names its folder
    payload = validate(tiny_model, tree, out, "--workers", "2")
    assert payload["detection"]["mean_iou"] == detection["mean_iou"]
    assert_same_report(one_process, out)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_ray_actors_write_the_one_process_report_byte_for_byte(tiny_model, source, one_process, tmp_path):
    pytest.importorskip("ray.data")
    out = tmp_path / "report"
    payload = validate(tiny_model, source[0], out, "--runner", "ray", "--workers", "2")
    assert payload["detection"]["mean_iou"] == one_process[1]["detection"]["mean_iou"]
    assert_same_report(one_process, out)


class SizeDetector(Detector):
    """Answers each image with a box as wide as the widest image of its batch (a stand-in for a
    detector whose result depends on padding), and fails on images 13 px wide."""

    def __init__(self):
        self.calls = []

    def info(self):
        return BackendInfo("sizes", {"source": "test", "weights_sha256": {}, "device": "cpu"}, checkpoint="sizes")

    def detect(self, images, prompts, box_threshold, text_threshold):
        self.calls.append([image.shape[1] for image in images])
        if any(image.shape[1] == 13 for image in images):
            raise RuntimeError("cannot pad a 13 px image\nsecond line")
        widest = max(image.shape[1] for image in images)
        return [np.array([[0, 0, widest, 10]], dtype=float) for _ in images]


def items_of_widths(widths):
    from validation.detection import DetectionItem

    def blank(width):
        return lambda: np.zeros((10, width, 3), np.uint8)

    def unreadable():
        raise OSError("gone")

    return [
        DetectionItem(f"img{n}", "n01440764", (Box(0, 0, 9, 9, "n01440764"),), blank(w) if w else unreadable)
        for n, w in enumerate(widths)
    ]


def test_batches_keep_their_places_and_any_chunking_gives_the_same_report():
    from validation.detection import (
        ChunkResult,
        DetectionJob,
        detect_batch,
        detector_provenance,
        merge_chunks,
        plan_chunks,
        redetect,
    )

    items = items_of_widths([10, 0, 30, 20, 40, 10])  # img1 cannot be loaded
    detector = SizeDetector()
    reference = redetect(items, detector, batch_size=2).to_json()
    # img1 leaves its batch one short: img2 does not move up beside img0
    assert detector.calls == [[10], [30, 20], [40, 10]]
    assert reference["per_image"]["img0"]["box_ious"] == [1.0] and reference["unreadable"][0]["image_id"] == "img1"
    batches = [tuple(items[i : i + 2]) for i in range(0, 6, 2)]
    job = DetectionJob("sizes", None)  # only its thresholds are read here
    for chunks in ([batches[:1], batches[1:]], [batches[:2], batches[2:]], [[b] for b in batches]):
        results = []
        for chunk in chunks:
            images, rows = [], []
            for batch in chunk:
                found, left_out = detect_batch(batch, SizeDetector(), job.box_threshold, job.text_threshold)
                images, rows = images + found, rows + left_out
            results.append(ChunkResult(images, rows, detector_provenance(SizeDetector().info())))
        merged = merge_chunks(results, {}, batch_size=2, iou_threshold=0.5, job=job)
        assert merged.to_json() == reference
    assert [len(chunk) for chunk in plan_chunks(batches, workers=1)] == [1, 1, 1]
    assert [len(chunk) for chunk in plan_chunks(batches * 20, workers=2)] == [8] * 7 + [4]
    assert plan_chunks(batches * 20, workers=2)[1][0] is batches[2]  # contiguous, in order


def test_an_image_the_detector_fails_on_is_a_row_and_its_batch_mates_are_detected(tmp_path):
    from validation.detection import DetectorFailed, redetect
    from validation.report import validate_dataset

    detector = SizeDetector()
    report = redetect(items_of_widths([10, 13, 30]), detector, batch_size=3)
    assert detector.calls == [[10, 13, 30], [10], [13], [30]]  # the failed batch, then image by image
    assert [image.image_id for image in report.images] == ["img0", "img2"]
    [row] = report.unreadable
    assert (row.image_id, row.reason, row.action, row.stage, row.key) == (
        "img1",
        "backend-failed",
        "not-detected",
        "validate",
        "img1",
    )
    assert row.detail == "RuntimeError: cannot pad a 13 px image second line"
    out = tmp_path / "report"
    written = validate_dataset(out, detection=report.to_json(), check_integrity=False, report_dir=out, previews=False)
    assert written.payload["issues"] == {"total": 1, "by_reason": {"backend-failed": 1}}
    markdown = written.md_path.read_text()
    assert "1 images could not be loaded or the detector failed on them and are not re-detected:" in markdown
    assert "| backend-failed |  |  | img1 | RuntimeError: cannot pad a 13 px image second line |" in markdown
    # a detector that fails on every image is broken: refused, not a report of nothing
    with pytest.raises(DetectorFailed, match="failed on every one of the 2 images"):
        redetect(items_of_widths([13, 13]), SizeDetector(), batch_size=2)


def pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def visible_devices(seconds: float) -> tuple[int, str]:
    time.sleep(seconds)
    return os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES", "unset")


def test_map_in_processes_keeps_task_order_and_uses_the_workers():
    pids = map_in_processes(pid_after, [0.3, 0.0, 0.3, 0.0], workers=2)
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert map_in_processes(str, [3, 1, 2], workers=2) == ["3", "1", "2"]
    assert map_in_processes(pid_after, [0.0], workers=2) == [os.getpid()]  # one task: no pool


def test_map_in_processes_pins_one_spawned_worker_per_gpu():
    seen = map_in_processes(visible_devices, [0.5] * 4, worker_devices=["4", "7"])
    device_of = dict(seen)
    assert os.getpid() not in device_of and len(device_of) <= 2
    # each worker sees one GPU of its own, and keeps it for every task it runs
    assert len(set(device_of.values())) == len(device_of) and set(device_of.values()) <= {"4", "7"}
    assert all(device_of[pid] == device for pid, device in seen)


def test_ctrl_c_stops_the_worker_processes_within_seconds():
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        map_in_processes(pid_after, [60.0, 60.0, 60.0], workers=2)
    timer.cancel()
    assert time.monotonic() - start < 10


def test_ctrl_c_during_re_detection_is_one_line_and_exit_130(tiny_model, source, tmp_path, capsys, monkeypatch):
    from hsi.cli import main
    from validation.detection import DetectionJob

    def interrupted(self, chunk):
        raise KeyboardInterrupt

    monkeypatch.setattr(DetectionJob, "__call__", interrupted)
    out = tmp_path / "report"
    code = main(["validate", "--boxes", "--source", str(source[0].root), *any_box(tiny_model), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 130 and "Traceback" not in err and not out.exists()
    assert err.splitlines()[-1].startswith("hsi validate: error: interrupted during the box re-detection")


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--runner", "ray"], "--runner ray runs the box re-detection on Ray: pass --boxes"),
        (["--boxes", "--device", "cuda:1", "--workers", "2"], "--device cuda:1 names one GPU, but --workers 2"),
        (["--boxes", "--device", "cuda:0", "--runner", "ray"], "--device cuda:0 names one GPU, but Ray gives"),
    ],
)
def test_runner_and_device_refusals_are_one_line(flags, message, tmp_path, capsys):
    from hsi.cli import main

    assert main(["validate", "--source", str(tmp_path), "--out", str(tmp_path / "r"), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and not (tmp_path / "r").exists()


def test_batches_are_grouped_by_aspect_before_any_worker_takes_one(tmp_path):
    """Portrait and landscape (or square) photos are batched apart (a mixed batch pads to both long
    sides), in item order within each group, images whose header does not read last; the report lists the
    images and error rows by image, whatever the grouping."""
    from PIL import Image

    from validation.detection import DetectionItem, detection_batches, file_loader, redetect

    shapes = {"a": (60, 40), "b": (40, 60), "c": (64, 48), "d": None, "e": (30, 50), "f": (50, 50), "g": (40, 70)}
    items = []
    for name, shape in shapes.items():
        path = tmp_path / f"{name}.JPEG"
        if shape is None:
            path.write_bytes(b"not a jpeg" * 20)
        else:
            Image.fromarray(np.zeros((shape[1], shape[0], 3), np.uint8)).save(path)
        items.append(DetectionItem(name, "n01440764", (Box(0, 0, 9, 9, "n01440764"),), file_loader(str(path))))
    batches = detection_batches(items, 2)
    assert [[item.image_id for item in batch] for batch in batches] == [["a", "c"], ["f"], ["b", "e"], ["g"], ["d"]]
    detector = SizeDetector()
    report = redetect(items, detector, batch_size=2)
    assert detector.calls == [[60, 64], [50], [40, 30], [40]]  # each batch one orientation; d never reaches it
    assert [image.image_id for image in report.images] == ["a", "b", "c", "e", "f", "g"]
    assert [row.image_id for row in report.unreadable] == ["d"]


@pytest.fixture(scope="module")
def mixed_source(tmp_path_factory):
    """Seven val images, three of them turned portrait, and one not an image at all."""
    from fake_imagenet import synthetic_photo, write_tree
    from PIL import Image

    tree = write_tree(tmp_path_factory.mktemp("mixed") / "imagenet", split="val", count=7)
    for image in tree.good[1::2]:
        width, height = image.size
        photo = synthetic_photo(1, height, width + 30)  # taller than wide
        Image.fromarray(photo).save(next(tree.root.rglob(f"{image.image_id}.JPEG")), quality=92)
    next(tree.root.rglob(f"{tree.good[2].image_id}.JPEG")).write_bytes(b"not a jpeg" * 20)
    return tree


def test_mixed_orientations_give_the_same_report_at_any_worker_count(tiny_model, mixed_source, tmp_path):
    single = validate(tiny_model, mixed_source, tmp_path / "one" / "report")
    assert single["detection"]["images"] == 6
    workers = validate(tiny_model, mixed_source, tmp_path / "two" / "report", "--workers", "2")
    assert workers == single
    for name in ("validation.json", "validation.md"):
        assert (tmp_path / "two" / "report" / name).read_bytes() == (tmp_path / "one" / "report" / name).read_bytes()
