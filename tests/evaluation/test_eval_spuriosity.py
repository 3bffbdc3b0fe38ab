"""`--clean ROOT` (the original photos of the same source images) and `--parts DIR` (backgrounds
alone, the paper's spuriosity proxy), and `hsi validate --scores` correlating per-class accuracies
of several models with the centre and size scores, with the partial correlation that holds clean
per-class accuracy fixed."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from eval_cli import eval_args
from parts_factory import FakeImage, render_image, write_parts
from validate_cli import scores_of_parts

from hsi.cli import main
from validation.scores.correlations import spearman


def write_clean_tree(root, images, skip=(), broken=()):
    """ImageNet's val layout: root/val/<wnid>/<id>.JPEG, each the object on its own background."""
    from PIL import Image

    for image in images:
        if image.source_id in skip:
            continue
        arrays = render_image(image)
        photo = arrays["background"].copy()
        x0, y0, x1, y1 = image.box
        photo[y0 : y1 + 1, x0 : x1 + 1] = arrays["crop"]
        folder = root / "val" / image.wnid
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{image.source_id}.JPEG"
        if image.source_id in broken:
            path.write_bytes(b"\xff\xd8 truncated")
        else:
            Image.fromarray(photo).save(path, quality=95)
    return root


def test_clean_photos_and_backgrounds_alone(paper_set, flat_parts, planted_corner, tmp_path):
    parts, images = flat_parts
    ids = [im.source_id for im in images]
    clean = write_clean_tree(tmp_path / "imagenet", images, skip={ids[0]}, broken={ids[1]})
    out = tmp_path / "out"
    assert (
        main(eval_args(paper_set, f"ts:{planted_corner}", str(out), "--clean", str(clean), "--parts", str(parts))) == 0
    )
    folder = out / "ts_planted_corner.pt"
    report = json.loads((folder / "eval.json").read_text())
    cleaned = report["clean"]
    assert cleaned["images"] == 4 and cleaned["missing"] == 1 and [e["key"] for e in cleaned["errors"]] == [ids[1]]
    assert cleaned["top1"]["value"] == 1.0  # the planted predictor sees a centred object on every photo
    drops = {r["group"]: r["drop"]["value"] for r in cleaned["drop_by_group"]}
    assert drops == {"CeO": 0.0, "CoO": 0.0, "CeR": 0.0, "CoR": 1.0}
    # a bare flat background names its own class: the background alone predicts the label
    assert report["background_only"]["images"] == 6 and report["background_only"]["top1"] == 1.0
    with open(folder / "background_accuracy.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["wnid"], r["images"], r["accuracy"]) for r in rows] == [
        ("n01443537", "2", "1.0"),
        ("n02134084", "2", "1.0"),
        ("n02437312", "2", "1.0"),
    ]
    with open(folder / "clean_accuracy.csv", newline="") as handle:
        # both goldfish photos are gone (one missing, one broken): no goldfish row
        assert {r["wnid"]: (r["images"], r["accuracy"]) for r in csv.DictReader(handle)} == {
            "n02134084": ("2", "1.0"),
            "n02437312": ("2", "1.0"),
        }
    md = (folder / "eval.md").read_text()
    assert "## Clean photos" in md and "1 source images were not found" in md and "## Backgrounds alone" in md
    # recomputing from the predictions (in place) keeps what only the model could compute
    assert main(["eval", "--from", str(folder / "predictions.parquet"), "--bootstrap", "100"]) == 0
    again = json.loads((folder / "eval.json").read_text())
    assert again["clean"] == report["clean"] and again["background_only"] == report["background_only"]
    assert again["metrics"] == report["metrics"] and "from the model run's eval.json" in again["carried_over"]


def partial_by_residuals(x, y, z) -> float:
    """Partial Spearman the long way: correlate the residuals of rank(x) and rank(y) on rank(z)."""
    from scipy.stats import rankdata

    rx, ry, rz = (rankdata(v) for v in (x, y, z))
    design = np.column_stack([np.ones(len(rz)), rz])

    def residual(r):
        return r - design @ np.linalg.lstsq(design, r, rcond=None)[0]

    return float(np.corrcoef(residual(rx), residual(ry))[0, 1])


def bars(err: str, desc: str) -> list[str]:
    """The states tqdm drew of the bar named `desc` (its lines end in carriage returns; a bar has a
    `|`, the pass's summary line of the same name does not)."""
    return [line for line in err.replace("\r", "\n").splitlines() if line.startswith(f"{desc}:") and "|" in line]


@pytest.mark.parametrize("progress", [True, False])
def test_the_clean_and_parts_passes_show_their_progress(
    paper_set, flat_parts, planted_corner, tmp_path, capsys, progress
):
    parts, images = flat_parts
    ids = [im.source_id for im in images]
    clean = write_clean_tree(tmp_path / "imagenet", images, skip={ids[0]}, broken={ids[1]})
    args = eval_args(
        paper_set, f"ts:{planted_corner}", str(tmp_path / "out"), "--clean", str(clean), "--parts", str(parts)
    )
    assert main([a for a in args if a != "--no-progress"] if progress else args) == 0
    err = capsys.readouterr().err
    clean_bar, background_bar = bars(err, "clean photos"), bars(err, "backgrounds alone")
    if progress:
        # 5 photos found (the broken one counts: it was read), 6 parts samples
        assert clean_bar and "5/5" in clean_bar[-1] and "100%" in clean_bar[-1]
        assert background_bar and "6/6" in background_bar[-1]
    else:
        assert clean_bar == background_bar == [] and "it/s" not in err and "img/s" not in err


@pytest.fixture(scope="module")
def scored_parts(tmp_path_factory):
    """Six classes whose boxes differ in size and offset, so centre and size scores vary by class."""
    from builder.core.classes import imagenet_classes

    wnids = [c.wnid for c in imagenet_classes()[10:16]]
    boxes = [
        (10, 10, 49, 49),
        (30, 20, 129, 99),
        (0, 0, 79, 59),
        (60, 40, 99, 79),
        (5, 50, 154, 114),
        (90, 10, 149, 69),
    ]
    images = [
        FakeImage(f"ILSVRC2012_val_{i + 1:08d}", w, (255, 255, 255), (0, 0, 0), box=b)
        for i, (w, b) in enumerate(zip(wnids, boxes))
    ]
    path = tmp_path_factory.mktemp("scored") / "parts"
    write_parts(path, {"val": images})
    return path, wnids


def test_validate_scores_per_model_mean_and_partial_correlation(scored_parts, tmp_path):
    parts, wnids = scored_parts
    background = {"model_a": [0.9, 0.1, 0.5, 0.7, 0.3, 0.6], "model_b": [0.2, 0.8, 0.4, 0.1, 0.9, 0.5]}
    clean_values = [0.95, 0.5, 0.9, 0.7, 0.6, 0.8]  # ranked unlike either model
    files = []
    for name, values in background.items():
        files.append(tmp_path / f"{name}.csv")
        files[-1].write_text("wnid,accuracy\n" + "".join(f"{w},{v}\n" for w, v in zip(wnids, values)))
    clean = tmp_path / "clean.csv"
    clean.write_text("wnid,accuracy\n" + "".join(f"{w},{v}\n" for w, v in zip(wnids, clean_values)))
    out = tmp_path / "report"
    assert main(scores_of_parts(parts, out, "--accuracy", *map(str, files), "--control-accuracy", str(clean))) == 0
    correlations = json.loads((out / "validation.json").read_text())["scores"]["accuracy_correlations"]
    assert correlations["averaged_over"] == 2 and set(correlations["models"]) == {"model_a", "model_b"}
    with open(next(out.glob("*scores*.csv")), newline="") as handle:
        per_class = {r["wnid"]: r for r in csv.DictReader(handle)}
    for score, column in (("centre", "centre"), ("size", "size")):
        values = [float(per_class[w][column]) for w in wnids]
        for name, acc in background.items():
            result = correlations["models"][name][score]
            assert result["spearman"] == pytest.approx(spearman(values, acc))
            assert result["partial_spearman"] == pytest.approx(partial_by_residuals(values, acc, clean_values))
        mean = np.mean([correlations["models"][n][score]["partial_spearman"] for n in background])
        assert correlations[score]["partial_spearman"] == pytest.approx(mean)
    md = (out / "validation.md").read_text()
    assert (
        "partial Spearman (clean accuracy held fixed)" in md
        and "mean over 2 models" in md
        and "| model_a: centre / size |" in md
    )


def test_control_accuracy_count_must_match(scored_parts, tmp_path, capsys):
    parts, wnids = scored_parts
    a = tmp_path / "a.csv"
    a.write_text("wnid,accuracy\n" + "".join(f"{w},0.5\n" for w in wnids))
    assert (
        main(
            scores_of_parts(
                parts, tmp_path / "r", "--accuracy", str(a), str(a), str(a), "--control-accuracy", str(a), str(a)
            )
        )
        == 2
    )
    assert "one file or one per --accuracy file (3), got 2" in capsys.readouterr().err
