"""Box re-detection: IoU bookkeeping with known boxes, and Grounding DINO end to end through the
production loading code with a tiny randomly initialised model saved to a temporary folder."""

import json
import os

import numpy as np
import pytest
from fake_imagenet import WNIDS, extract_args, write_tree
from tiny_detector import save_tiny_grounding_dino

from builder.backends import BackendInfo, Detector, make_backend
from builder.backends.grounding_dino import GroundingDinoConfig
from builder.backends.torch_base import weight_files_sha256
from builder.core.hashing import sha256_file
from builder.core.records import Box
from hsi.cli import main
from validation.detection import DetectionItem, best_ious, missing_loader, prompt_for, redetect


def any_box(tiny_model) -> list[str]:
    """Flags that run the tiny detector on the CPU and keep every box it finds."""
    return ["--detector", str(tiny_model), "--box-threshold", "0", "--text-threshold", "0", "--device", "cpu"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    return save_tiny_grounding_dino(tmp_path_factory.mktemp("tiny-gdino"), WNIDS)


def test_best_iou_uses_inclusive_ground_truth_corners():
    # ground truth covers pixels 0..9 (10 px wide): continuous [0, 10]
    truth = [Box(0, 0, 9, 9, "n01440764"), Box(100, 100, 109, 109, "n01440764")]
    detections = np.array([[0, 0, 10, 10], [5, 0, 15, 10]], dtype=float)
    ious = best_ious(truth, detections)
    assert ious[0] == pytest.approx(1.0)
    assert ious[1] == 0.0
    assert best_ious(truth, np.zeros((0, 4))) == (0.0, 0.0)
    assert best_ious([Box(0, 0, 9, 9, "x")], np.array([[5, 0, 15, 10]], dtype=float))[0] == pytest.approx(50 / 150)


class FixedDetector(Detector):
    """Answers with given boxes per prompt, to check batching and aggregation exactly."""

    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def info(self):
        return BackendInfo("fixed", {"source": "test", "weights_sha256": {}, "device": "cpu"}, checkpoint="fixed")

    def detect(self, images, prompts, box_threshold, text_threshold):
        self.calls.append(len(images))
        return [np.array(self.answers[p], dtype=float).reshape(-1, 4) for p in prompts]


def test_redetect_batches_and_aggregates_per_image_class_and_overall():
    tench, goldfish = prompt_for("n01440764"), prompt_for("n01443537")
    assert tench == "tench." and goldfish == "goldfish."
    detector = FixedDetector({tench: [[0, 0, 10, 10]], goldfish: []})
    blank = lambda: np.zeros((20, 20, 3), np.uint8)  # noqa: E731
    items = [
        DetectionItem("a", "n01440764", (Box(0, 0, 9, 9, "n01440764"), Box(5, 0, 14, 9, "n01440764")), blank),
        DetectionItem("b", "n01440764", (Box(0, 0, 9, 9, "n01440764"),), blank),
        DetectionItem("c", "n01443537", (Box(0, 0, 9, 9, "n01443537"),), blank),
        DetectionItem(
            "d", "n01443537", (Box(0, 0, 9, 9, "n01443537"),), lambda: (_ for _ in ()).throw(OSError("gone"))
        ),
    ]
    report = redetect(items, detector, batch_size=2, iou_threshold=0.5)
    assert detector.calls == [2, 1]
    payload = report.to_json()
    assert payload["per_image"]["a"]["box_ious"] == [1.0, pytest.approx(1 / 3, abs=1e-6)]
    assert payload["per_image"]["a"]["mean_iou"] == pytest.approx(2 / 3, abs=1e-6)
    assert payload["per_class"]["n01440764"]["mean_iou"] == pytest.approx((2 / 3 + 1) / 2)
    assert payload["per_class"]["n01443537"] == {"images": 1, "mean_iou": 0.0}
    assert payload["mean_iou"] == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert payload["below_threshold"] == [{"image_id": "c", "wnid": "n01443537", "mean_iou": 0.0}]
    assert [(r["image_id"], r["reason"], r["action"], r["key"], r["detail"]) for r in payload["unreadable"]] == [
        ("d", "unreadable-image", "not-detected", "d", "gone")
    ]
    assert payload["unreadable_by_reason"] == {"unreadable-image": 1}
    assert (payload["detector"], payload["source"], payload["device"]) == ("fixed", "test", "cpu")


def test_tiny_grounding_dino_loads_offline_and_detects(tiny_model):
    detector = make_backend("detector", "grounding-dino", GroundingDinoConfig(model_id=str(tiny_model), device="cpu"))
    info = detector.info()
    assert info.name == "grounding-dino" and info.checkpoint == tiny_model.name  # a folder's name, never its path
    assert info.params["source"] == "local folder" and info.params["device"] == "cpu"
    assert info.params["weights_sha256"] == {"model.safetensors": sha256_file(tiny_model / "model.safetensors")}
    tokens = detector.processor.tokenizer("great white shark.")["input_ids"]
    assert detector.processor.tokenizer.unk_token_id not in tokens and len(tokens) == 6  # CLS 3 words . SEP
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (40, 60, 3), dtype=np.uint8), rng.integers(0, 255, (70, 50, 3), dtype=np.uint8)]
    found = detector.detect(images, ["tench.", "great white shark."], 0.0, 0.0)
    assert [f.shape[1] for f in found] == [4, 4] and all(len(f) > 0 for f in found)
    # post-processing scales boxes back to each image's own size
    for boxes, image in zip(found, images):
        assert boxes[:, [0, 2]].max() <= image.shape[1] + 1e-3 and boxes[:, [1, 3]].max() <= image.shape[0] + 1e-3
    # scores are probabilities: a box threshold above 1 leaves nothing
    assert [len(f) for f in detector.detect(images, ["tench.", "goldfish."], 1.01, 0.0)] == [0, 0]


def test_out_of_memory_halves_the_detector_batch_and_gives_the_same_boxes(tiny_model, capsys):
    import torch

    config = GroundingDinoConfig(model_id=str(tiny_model), device="cpu", batch_size=2)
    detector = make_backend("detector", "grounding-dino", config)
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 255, (48, 64, 3), dtype=np.uint8) for _ in range(2)]
    prompts = ["tench.", "goldfish."]  # the same number of tokens: no text padding differs between batches
    expected = detector.detect(images, prompts, 0.0, 0.0)
    forward, calls = detector.model.forward, []

    def limited(**inputs):
        calls.append(inputs["pixel_values"].shape[0])
        if inputs["pixel_values"].shape[0] > 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return forward(**inputs)

    detector.model.forward = limited
    got = detector.detect(images, prompts, 0.0, 0.0)
    assert calls == [2, 1, 1] and detector.batch.size == 1
    assert "out of memory in Grounding DINO with a batch of 2; retrying with 1" in capsys.readouterr().err
    for a, b in zip(expected, got):
        assert a.shape == b.shape and np.allclose(a, b, atol=1e-4)


def test_hsi_validate_boxes_end_to_end_with_the_tiny_detector(tiny_model, tmp_path):
    tree = write_tree(tmp_path / "imagenet", split="val", count=5)
    out = tmp_path / "report"
    code = main(
        ["validate", "--boxes", "--source", str(tree.root), "--split", "val", *any_box(tiny_model), "--batch-size", "2"]
        + ["--out", str(out)]
    )
    assert code == 0
    report = json.loads((out / "validation.json").read_text())
    detection = report["detection"]
    assert detection["images"] == 5 and detection["batch_size"] == 2
    assert detection["weights_sha256"] == weight_files_sha256(tiny_model)
    assert set(detection["per_image"]) == {img.image_id for img in tree.good}
    assert 0.0 <= detection["mean_iou"] <= 1.0
    means = [row["mean_iou"] for row in detection["per_image"].values()]
    assert detection["mean_iou"] == pytest.approx(np.mean(means), abs=1e-5)
    assert "Box re-detection" in (out / "validation.md").read_text()


def test_boxes_on_a_parts_folder_reads_images_from_source(tiny_model, tmp_path):
    tree = write_tree(tmp_path / "imagenet", split="val", count=4)
    assert main(extract_args(tree.root, tmp_path / "out")) == 0
    parts = tmp_path / "out" / "parts"
    assert (
        main(["validate", str(parts), "--boxes", "--source", str(tree.root), *any_box(tiny_model), "--no-previews"])
        == 0
    )
    report = json.loads((parts / "validation.json").read_text())
    assert report["detection"]["images"] == 4 and report["integrity"]["ok"]


def test_missing_detector_is_a_usage_error_naming_the_flag(tmp_path, capsys):
    tree = write_tree(tmp_path / "imagenet", split="val", count=2)
    code = main(
        [
            "validate",
            "--boxes",
            "--source",
            str(tree.root),
            "--detector",
            "nobody/no-such-model",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "hsi validate: error: cannot load the detector 'nobody/no-such-model': it is neither a local folder" in err
    assert (
        "Pass --detector with a folder holding the transformers-format weights (published at "
        "https://huggingface.co/IDEA-Research/grounding-dino-base)." in err
    )


@pytest.mark.gpu
@pytest.mark.skipif(
    not (os.environ.get("HSI_GDINO_MODEL") and os.environ.get("HSI_IMAGENET_ROOT")),
    reason="set HSI_GDINO_MODEL (grounding-dino-base folder) and HSI_IMAGENET_ROOT to run",
)
def test_real_grounding_dino_on_gpu_agrees_with_val_boxes(tmp_path):
    """With the published weights, re-detection of 200 val images is in the paper's range (0.875)."""
    out = tmp_path / "report"
    assert (
        main(
            [
                "validate",
                "--boxes",
                "--source",
                os.environ["HSI_IMAGENET_ROOT"],
                "--split",
                "val",
                "--detector",
                os.environ["HSI_GDINO_MODEL"],
                "--device",
                "cuda",
                "--batch-size",
                "16",
                "--limit",
                "200",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    detection = json.loads((out / "validation.json").read_text())["detection"]
    assert detection["images"] == 200 and detection["device"] == "cuda"
    assert detection["mean_iou"] > 0.8


def test_an_unreadable_source_image_becomes_a_row_with_its_reason_split_and_key(tmp_path):
    from validation.report import validate_dataset
    from validation.request import DetectionRequest, ValidationRequest, detection_items

    tree = write_tree(tmp_path / "imagenet", split="val", count=3)
    broken = tree.good[1]
    broken_path = next((tree.root).rglob(f"{broken.image_id}.JPEG"))
    broken_path.write_bytes(b"this is not an image at all" * 10)
    out = tmp_path / "report"
    request = ValidationRequest(out=out, detection=DetectionRequest(source=tree.root, split="val"))
    items = detection_items(request, warn=lambda text: None)
    missing = DetectionItem("ILSVRC2012_val_00000099", WNIDS[0], (Box(0, 0, 4, 4, WNIDS[0]),), missing_loader("x"))
    detector = FixedDetector({prompt_for(image.wnid): [[0, 0, 10, 10]] for image in tree.good})
    report = redetect([*items, missing], detector)
    assert [image.image_id for image in report.images] == sorted(i.image_id for i in tree.good if i is not broken)
    rows = [(r.image_id, r.reason, r.action, r.stage, r.split, r.key) for r in report.unreadable]
    assert rows == [
        (broken.image_id, "unreadable-image", "not-detected", "validate", "val", broken.image_id),
        ("ILSVRC2012_val_00000099", "image-not-found", "not-detected", "validate", None, "ILSVRC2012_val_00000099"),
    ]
    assert report.unreadable[1].detail == "x is not under --source"
    written = validate_dataset(out, detection=report.to_json(), check_integrity=False, report_dir=out, previews=False)
    payload = json.loads(written.json_path.read_text())
    assert written.ok and payload["issues"] == {
        "total": 2,
        "by_reason": {"image-not-found": 1, "unreadable-image": 1},
    }
    markdown = written.md_path.read_text()
    assert "2 images could not be loaded and are not re-detected:" in markdown
    assert f"| unreadable-image | val |  | {broken.image_id} | not an image file Pillow can identify |" in markdown
    assert "| image-not-found | 1 | not-detected | a source image to re-detect is not under --source |" in markdown
