"""Two image sets beside the composites, classified with the same model, preprocessing and label
space: the clean ImageNet photos of the same source images (`--clean ROOT`, read with the project's
sources module) and the inpainted backgrounds alone, object erased (`--parts DIR`: the paper's
spuriosity proxy, per-class background accuracy)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from builder.core.classes import imagenet_classes
from builder.core.csv_cells import write_dict_table
from builder.core.manifest import Manifest
from builder.core.records import Issue
from builder.core.shard_read import iter_shard
from builder.extract.images import decode_image
from builder.extract.sources import detect_layout, list_image_files
from builder.formats.parts import decode_canvas

try:
    from torch.utils.data import IterableDataset
except ImportError:  # pragma: no cover - the evaluation needs the models extra
    IterableDataset = object

BACKGROUND_ACCURACY_CSV = "background_accuracy.csv"
CLEAN_ACCURACY_CSV = "clean_accuracy.csv"


def pass_bar(total: int, desc: str, progress: bool):
    """The bar of one extra pass, on stderr like the composites' bar (a pass over 50,000 photos
    takes minutes)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="img", disable=not progress, file=sys.stderr)


Order = tuple[int, int]  # (unit, position in it): where an image stands in the pass's one order
Read = tuple[str, int, np.ndarray | None, dict | None]  # (id, label class, RGB array or None, error row or None)


@dataclass
class PassBatch:
    """Images of one extra pass decoded and prepared in a DataLoader worker, with where each stands."""

    images: object  # torch uint8 B x 3 x H x W (None when every image of the batch failed)
    items: list[tuple[Order, str, int]]  # per image: (order, id, label class)
    errors: list[tuple[Order, dict]]  # (order, error row) of the images that did not decode

    def pin_memory(self) -> PassBatch:  # called by the DataLoader's pinning thread
        return PassBatch(self.images.pin_memory() if self.images is not None else None, self.items, self.errors)


class PassBatches(IterableDataset):
    """An extra pass's images, decoded and preprocessed in the DataLoader's workers (the main pass's
    mechanism: `make_loader`). The pass is a list of units (a batch of clean photos, a parts shard);
    worker k of W reads units k, k+W, ... and cuts each unit into batches of `batch_size` images, so
    every batch holds the same images whatever the worker count, and the main process puts the
    results back in the units' order."""

    def __init__(self, units: list, read_unit: Callable[[object], Iterator[Read]], pre, batch_size: int):
        self.units, self.read_unit, self.pre, self.batch_size = units, read_unit, pre, batch_size

    def __iter__(self) -> Iterator[PassBatch]:
        import torch
        from PIL import Image
        from torch.utils.data import get_worker_info

        from .data import prepare_image

        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for unit_index in range(worker, len(self.units), workers):
            arrays: list[np.ndarray] = []
            items: list[tuple[Order, str, int]] = []
            errors: list[tuple[Order, dict]] = []
            for position, (item_id, label, rgb, error) in enumerate(self.read_unit(self.units[unit_index])):
                order = (unit_index, position)
                if error is not None:
                    errors.append((order, error))
                    continue
                arrays.append(prepare_image(Image.fromarray(rgb), self.pre))
                items.append((order, item_id, label))
                if len(arrays) == self.batch_size:
                    yield PassBatch(torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2), items, errors)
                    arrays, items, errors = [], [], []
            if arrays or errors:
                images = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2) if arrays else None
                yield PassBatch(images, items, errors)


def classify_pass(classifier, dataset: PassBatches, workers: int, bar) -> tuple[list[tuple[str, int, int]], list[dict]]:
    """(id, label class, predicted class) of every image of a pass, and its error rows, both in the
    pass's order, whatever the worker count; `bar` advances by each batch's images."""
    from .data import make_loader

    on = classifier.device.type
    loader = make_loader(dataset, workers, pin_memory=on == "cuda", yield_to_model=on == "cpu")
    results: list[tuple[Order, str, int, int]] = []
    errors: list[tuple[Order, dict]] = []
    for batch in loader:
        if batch.images is not None:
            predicted = classifier.class_index[classifier.reference_probabilities(batch.images).argmax(1)]
            results += [(order, i, label, int(p)) for (order, i, label), p in zip(batch.items, predicted)]
        errors += batch.errors
        bar.update(len(batch.items) + len(batch.errors))
    results.sort(key=lambda r: r[0])
    errors.sort(key=lambda e: e[0])
    return [(i, label, p) for _, i, label, p in results], [row for _, row in errors]


def result_frame(results: list[tuple[str, int, int]]) -> pd.DataFrame:
    rows = [{"source_id": i, "label_class": label, "pred_class": p, "correct": p == label} for i, label, p in results]
    return pd.DataFrame(rows, columns=["source_id", "label_class", "pred_class", "correct"])


def read_clean_photos(unit: list[tuple[str, int, Path]]) -> Iterator[Read]:
    """One batch of clean photos: (id, label, path) -> decoded, or an error row."""
    for image_id, label, path in unit:
        try:
            yield image_id, label, decode_image(path).rgb, None
        except Exception as exc:  # ImageDecodeError and friends: a counted row, the run goes on
            yield (
                image_id,
                label,
                None,
                Issue(image_id, "undecodable-clean-image", str(exc), "eval", key=image_id).sample_row(),
            )


def clean_predictions(
    classifier,
    pre,
    root: Path,
    split: str,
    labels: dict[str, int],
    batch_size: int = 32,
    progress: bool = False,
    workers: int = 0,
) -> tuple[pd.DataFrame, int, list[dict]]:
    """Classify the original photos of `labels` (source id -> label class) under an ImageNet root,
    decoded in `workers` DataLoader workers (0: in this process).

    Returns (rows: source_id, label_class, pred_class, correct), how many ids were not found, error rows."""
    layout = detect_layout(Path(root), split)
    paths = {image_id: path for image_id, _, path in list_image_files(layout.images_dir) if image_id in labels}
    ordered = [(image_id, labels[image_id], paths[image_id]) for image_id in sorted(paths)]
    units = [ordered[start : start + batch_size] for start in range(0, len(ordered), batch_size)]
    with pass_bar(len(paths), "clean photos", progress) as bar:
        results, errors = classify_pass(
            classifier, PassBatches(units, read_clean_photos, pre, batch_size), workers, bar
        )
    return result_frame(results), len(set(labels) - set(paths)), errors


def read_background_shard(path: Path) -> Iterator[Read]:
    """Every parts sample of one shard: its key, class and 224 canvas (the background, object
    erased), or an error row; a shard that breaks off is one row, after the samples read before it."""
    import json

    read = 0
    try:
        for key, members in iter_shard(path):
            read += 1
            try:
                meta = json.loads(members["json"])
                yield key, int(meta["class_index"]), decode_canvas(members["canvas.npy"]), None
            except Exception as exc:  # a broken parts sample is a row, not a crash
                yield key, -1, None, Issue(key, "undecodable-parts-sample", str(exc), "eval", key=key).sample_row()
    except Exception as exc:  # a truncated or corrupt tar: reported, the next shard goes on
        detail = f"{type(exc).__name__}: {exc} (after {read} samples)"
        yield (
            path.name,
            -1,
            None,
            Issue(path.name, "unreadable-shard", detail, "eval", "skipped", shard=path.name).sample_row(),
        )


def background_predictions(
    classifier, pre, parts_dir: Path, batch_size: int = 32, progress: bool = False, workers: int = 0
) -> tuple[pd.DataFrame, list[dict]]:
    """Classify every parts sample's inpainted background (the 224 canvas, object erased), each
    parts shard decoded in one of `workers` DataLoader workers (0: in this process)."""
    manifest = Manifest.read(Path(parts_dir))
    shards = manifest.shard_paths(Path(parts_dir), None)
    with pass_bar(manifest.num_samples, "backgrounds alone", progress) as bar:
        dataset = PassBatches(shards, read_background_shard, pre, batch_size)
        results, errors = classify_pass(classifier, dataset, workers, bar)
    return result_frame(results), errors


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
