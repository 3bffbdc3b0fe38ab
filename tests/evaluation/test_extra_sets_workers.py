"""`hsi eval --clean` and `--parts` decode in `--workers` DataLoader workers, as the composites do:
every worker count gives the same predictions, in the same order, with the same error rows, and
each prediction is the model's answer for that very image."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from parts_factory import fake_images, render_image, write_parts  # noqa: E402

from builder.formats.parts import decode_canvas, iter_parts_samples  # noqa: E402
from evaluation.model_formats.labels import resolve_label_space  # noqa: E402
from evaluation.model_formats.models import LoadedModel, Preprocessing  # noqa: E402
from evaluation.predicting.data import prepare_image  # noqa: E402
from evaluation.predicting.extra_sets import background_predictions, clean_predictions  # noqa: E402
from evaluation.predicting.predict import Classifier  # noqa: E402

WNIDS = ["n01443537", "n02437312", "n02134084", "n01530575"]
WORKER_COUNTS = (0, 1, 3)


@pytest.fixture(scope="module")
def classifier():
    """A random linear classifier of 4 x 4 pooled colours (torch's own layers): unlike a random
    CNN, whose answer hardly depends on its input, it tells these images apart."""
    torch.manual_seed(3)
    module = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(48, 1000)).eval()
    loaded = LoadedModel("tiny-pooled-linear", module, Preprocessing(input_size=(64, 64)))
    space = resolve_label_space(1000, None, WNIDS, "imagenet")
    return Classifier(loaded, space, torch.device("cpu"), announce=lambda _: None), loaded.preprocessing


@pytest.fixture(scope="module")
def images():
    return fake_images(WNIDS, per_class=3, textured=True)


def write_photos(root, images, broken):
    """ImageNet's val layout (root/val/<wnid>/<id>.JPEG); `broken` ids hold a truncated JPEG."""
    from PIL import Image

    for image in images:
        folder = root / "val" / image.wnid
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{image.source_id}.JPEG"
        if image.source_id in broken:
            path.write_bytes(b"\xff\xd8 truncated")
        else:
            arrays = render_image(image)
            photo = arrays["background"].copy()
            x0, y0, x1, y1 = image.box
            photo[y0 : y1 + 1, x0 : x1 + 1] = arrays["crop"]
            Image.fromarray(photo).save(path, quality=95)
    return root


def one_by_one(classifier, pre, arrays):
    """The model's class for each image classified alone: what a pass must give each id."""
    from PIL import Image

    model, _ = classifier
    out = []
    for array in arrays:
        batch = torch.from_numpy(prepare_image(Image.fromarray(array), pre)[None].copy()).permute(0, 3, 1, 2)
        out.append(int(model.class_index[model.reference_probabilities(batch).argmax(1)[0]]))
    return out


def test_clean_photos_are_the_same_at_every_worker_count(classifier, images, tmp_path):
    from builder.extract.images import decode_image

    model, pre = classifier
    ids = [image.source_id for image in images]
    root = write_photos(tmp_path / "imagenet", images[1:], broken={ids[4]})  # ids[0] missing, ids[4] broken
    labels = {image.source_id: int(i // 3) for i, image in enumerate(images)}
    runs = {w: clean_predictions(model, pre, root, "val", labels, batch_size=3, workers=w) for w in WORKER_COUNTS}
    frame, missing, errors = runs[0]
    for w in WORKER_COUNTS[1:]:
        assert runs[w][0].equals(frame) and runs[w][1:] == (missing, errors), w
    expected_ids = sorted(set(ids) - {ids[0], ids[4]})
    assert list(frame["source_id"]) == expected_ids and missing == 1
    assert [(e["key"], e["reason"]) for e in errors] == [(ids[4], "undecodable-clean-image")]
    paths = {p.stem: p for p in root.rglob("*.JPEG")}
    expected = one_by_one(classifier, pre, [decode_image(paths[i]).rgb for i in expected_ids])
    assert list(frame["pred_class"]) == expected
    assert len(set(expected)) > 1  # the random model tells the photos apart: a mix-up would show
    assert list(frame["label_class"]) == [labels[i] for i in expected_ids]


def test_backgrounds_are_the_same_at_every_worker_count(classifier, images, tmp_path):
    model, pre = classifier
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=2)  # 6 shards of 2: more shards than workers
    runs = {w: background_predictions(model, pre, parts, batch_size=3, workers=w) for w in WORKER_COUNTS}
    frame, errors = runs[0]
    for w in WORKER_COUNTS[1:]:
        assert runs[w][0].equals(frame) and runs[w][1] == errors, w
    samples = list(iter_parts_samples(parts))  # the shards' own order
    assert list(frame["source_id"]) == [key for key, _ in samples] and errors == []
    expected = one_by_one(classifier, pre, [decode_canvas(members["canvas.npy"]) for _, members in samples])
    assert list(frame["pred_class"]) == expected and len(set(expected)) > 1


def test_a_broken_parts_shard_is_one_row_at_every_worker_count(classifier, images, tmp_path):
    """A parts shard that breaks off keeps the samples read before the break and is one
    unreadable-shard row; the other shards go on."""
    model, pre = classifier
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=4)
    shards = sorted(parts.rglob("*.tar"))
    broken = shards[1]
    data = broken.read_bytes()
    broken.write_bytes(data[: len(data) * 2 // 3])  # past the first samples, into a later member
    runs = {w: background_predictions(model, pre, parts, batch_size=3, workers=w) for w in WORKER_COUNTS}
    frame, errors = runs[0]
    for w in WORKER_COUNTS[1:]:
        assert runs[w][0].equals(frame) and runs[w][1] == errors, w
    assert [(e["key"], e["reason"], e["shard"]) for e in errors] == [(None, "unreadable-shard", broken.name)]
    kept = set(frame["source_id"])
    whole = {image.source_id for image in images[:4] + images[8:]}
    assert whole <= kept and 0 < len(kept - whole) < 4  # part of the broken shard's samples, not all


def test_every_worker_cuts_the_same_batches(classifier, images, tmp_path):
    """Batches are cut from each unit (a batch of photos, a parts shard) before any worker takes one,
    so the model sees the same batches at any worker count."""
    model, pre = classifier
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=5)
    seen = {}
    for workers in WORKER_COUNTS:
        batches = []
        original = model.reference_probabilities

        def recording(batch, original=original, batches=batches):
            batches.append(batch.clone())
            return original(batch)

        model.reference_probabilities = recording
        try:
            background_predictions(model, pre, parts, batch_size=3, workers=workers)
        finally:
            del model.reference_probabilities
        seen[workers] = sorted((tuple(b.shape), b.numpy().tobytes()) for b in batches)
    assert [shape[0] for shape, _ in seen[0]] == sorted([3, 2, 3, 2, 2])  # shards of 5, 5, 2 in batches of 3
    assert seen[0] == seen[1] == seen[3]
    assert np.unique([b for _, b in seen[0]]).size == 5
