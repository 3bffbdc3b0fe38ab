"""Two image sets beside the composites, classified with the same model, preprocessing and label
space: the clean ImageNet photos of the same source images (`--clean ROOT`, read with the project's
sources module) and the inpainted backgrounds alone, object erased (`--parts DIR`: the paper's
spuriosity proxy, per-class background accuracy)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from builder.core.classes import imagenet_classes
from builder.core.csv_cells import write_dict_table
from builder.core.manifest import Manifest
from builder.core.records import Issue
from builder.extract.images import decode_image
from builder.extract.sources import detect_layout, list_image_files
from builder.formats.parts import decode_canvas, iter_parts_samples

BACKGROUND_ACCURACY_CSV = "background_accuracy.csv"
CLEAN_ACCURACY_CSV = "clean_accuracy.csv"


def pass_bar(total: int, desc: str, progress: bool):
    """The bar of one extra pass, on stderr like the composites' bar (a pass over 50,000 photos
    takes minutes)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="img", disable=not progress, file=sys.stderr)


def _classify(
    classifier,
    items: Iterable[tuple[str, int, object]],
    pre,
    batch_size: int,
    done: Callable[[int], object] = lambda n: None,
) -> Iterator[tuple[str, int, int]]:
    """(id, label class, predicted class) for (id, label class, PIL image) items, in batches;
    `done(n)` after each batch of n."""
    from .predict import preprocess_arrays

    batch: list = []

    def flush():
        probs = classifier.reference_probabilities(preprocess_arrays([im for _, _, im in batch], pre))
        predicted = classifier.class_index[probs.argmax(1)]
        done(len(batch))
        for (item_id, label, _), p in zip(batch, predicted):
            yield item_id, label, int(p)

    for item in items:
        batch.append(item)
        if len(batch) == batch_size:
            yield from flush()
            batch = []
    if batch:
        yield from flush()


def clean_predictions(
    classifier, pre, root: Path, split: str, labels: dict[str, int], batch_size: int = 32, progress: bool = False
) -> tuple[pd.DataFrame, int, list[dict]]:
    """Classify the original photos of `labels` (source id -> label class) under an ImageNet root.

    Returns (rows: source_id, label_class, pred_class, correct), how many ids were not found, error rows."""
    from PIL import Image

    layout = detect_layout(Path(root), split)
    paths = {image_id: path for image_id, _, path in list_image_files(layout.images_dir) if image_id in labels}
    errors: list[dict] = []
    bar = pass_bar(len(paths), "clean photos", progress)

    def items():
        for image_id in sorted(paths):
            try:
                rgb = decode_image(paths[image_id]).rgb
            except Exception as exc:  # ImageDecodeError and friends: a counted row, the run goes on
                errors.append(Issue(image_id, "undecodable-clean-image", str(exc), "eval", key=image_id).sample_row())
                bar.update(1)
                continue
            yield image_id, labels[image_id], Image.fromarray(rgb)

    with bar:
        rows = [
            {"source_id": i, "label_class": label, "pred_class": p, "correct": p == label}
            for i, label, p in _classify(classifier, items(), pre, batch_size, bar.update)
        ]
    frame = pd.DataFrame(rows, columns=["source_id", "label_class", "pred_class", "correct"])
    return frame, len(set(labels) - set(paths)), errors


def background_predictions(
    classifier, pre, parts_dir: Path, batch_size: int = 32, progress: bool = False
) -> tuple[pd.DataFrame, list[dict]]:
    """Classify every parts sample's inpainted background (the 224 canvas, object erased)."""
    import json

    from PIL import Image

    errors: list[dict] = []
    bar = pass_bar(Manifest.read(Path(parts_dir)).num_samples, "backgrounds alone", progress)

    def items():
        for key, members in iter_parts_samples(Path(parts_dir)):
            try:
                meta = json.loads(members["json"])
                canvas = decode_canvas(members["canvas.npy"])
            except Exception as exc:  # a broken parts sample is a row, not a crash
                errors.append(Issue(key, "undecodable-parts-sample", str(exc), "eval", key=key).sample_row())
                bar.update(1)
                continue
            yield key, int(meta["class_index"]), Image.fromarray(canvas)

    with bar:
        rows = [
            {"source_id": k, "label_class": label, "pred_class": p, "correct": p == label}
            for k, label, p in _classify(classifier, items(), pre, batch_size, bar.update)
        ]
    return pd.DataFrame(rows, columns=["source_id", "label_class", "pred_class", "correct"]), errors


def write_class_accuracy(frame: pd.DataFrame, path: Path) -> list[dict]:
    """Per-class accuracy (backgrounds alone, or clean photos): the CSV `hsi validate --scores
    --accuracy` and `--control-accuracy` read."""
    classes = imagenet_classes()
    rows = []
    for class_index, cell in frame.groupby("label_class", sort=True):
        cls = classes[int(class_index)]
        rows.append(
            {
                "wnid": cls.wnid,
                "class_index": cls.index,
                "class_name": cls.name,
                "images": int(len(cell)),
                "accuracy": round(float(np.mean(cell["correct"])), 6),
            }
        )
    write_dict_table(path, ["wnid", "class_index", "class_name", "images", "accuracy"], rows)
    return rows
