"""The paper's centre and size scores on hand-made boxes with known answers, a LOC_val_solution.csv
fixture checked against a by-hand computation, rank correlations against known values, and the
`hsi validate --scores` outputs."""

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest
from fake_imagenet import extract_args, write_tree
from PIL import Image
from validate_cli import scores_from_csv

from builder.core.records import Box
from builder.formats.loc_csv import read_loc_boxes, read_loc_solution
from hsi.cli import main
from validation.scores.boxes import ImageBoxes, score_image
from validation.scores.correlations import average_ranks, kendall_tau_b, spearman
from validation.scores.inputs import boxes_from_loc_csv, image_sizes_from_folder
from validation.scores.report import compute_scores

TENCH, GOLDFISH = "n01440764", "n01443537"


def test_single_boxes_with_known_scores():
    # W=100, H=50. A box whose centre sits at (25, 12.5): d = max(25/50, 12.5/25) = 0.5.
    corner = score_image(ImageBoxes("a", TENCH, 100, 50, (Box(0, 0, 50, 25, TENCH),)))
    assert corner.centre == pytest.approx(0.5) and corner.size == pytest.approx(50 * 25 / 5000)
    # Centred exactly: d = 0, centre score 1; area 40 x 20 of 100 x 50.
    centred = score_image(ImageBoxes("b", TENCH, 100, 50, (Box(30, 15, 70, 35, TENCH),)))
    assert centred.centre == pytest.approx(1.0) and centred.size == pytest.approx(0.16)
    # The whole image: centre 1 and size (W-1)(H-1)/WH with raw inclusive corners, as the formula says.
    whole = score_image(ImageBoxes("c", TENCH, 10, 10, (Box(0, 0, 9, 9, TENCH),)))
    assert whole.centre == pytest.approx(1 - 0.1) and whole.size == pytest.approx(0.81)
    # Horizontal offset dominates: cx = 90 on W = 100 -> 0.8; cy centred.
    right = score_image(ImageBoxes("d", TENCH, 100, 100, (Box(80, 40, 100, 60, TENCH),)))
    assert right.centre == pytest.approx(0.2)


def test_several_boxes_average_per_image_then_per_class():
    two = ImageBoxes("a", TENCH, 100, 50, (Box(0, 0, 50, 25, TENCH), Box(30, 15, 70, 35, TENCH)))
    one = ImageBoxes("b", TENCH, 100, 50, (Box(30, 15, 70, 35, TENCH),))
    other = ImageBoxes("c", GOLDFISH, 100, 50, (Box(0, 0, 50, 25, GOLDFISH),))
    report = compute_scores([two, one, other])
    image_a = report.images[0]
    assert image_a.centre == pytest.approx(1 - (0.5 + 0) / 2) and image_a.size == pytest.approx((0.25 + 0.16) / 2)
    by_class = {c.wnid: c for c in report.classes}
    assert by_class[TENCH].images == 2 and by_class[TENCH].name == "tench"
    assert by_class[TENCH].centre == pytest.approx((0.75 + 1.0) / 2)
    assert by_class[TENCH].size == pytest.approx((0.205 + 0.16) / 2)
    assert report.summary["centre_class_mean"] == pytest.approx(((0.75 + 1.0) / 2 + 0.5) / 2)
    assert report.summary["centre_image_mean"] == pytest.approx((0.75 + 1.0 + 0.5) / 3)


# (image id, width, height, [(wnid, x0, y0, x1, y1), ...]) in LOC_val_solution.csv form
LOC_ROWS = [
    ("ILSVRC2012_val_00000001", 500, 375, [(TENCH, 10, 20, 200, 300)]),
    ("ILSVRC2012_val_00000002", 333, 500, [(TENCH, 100, 150, 250, 400), (TENCH, 0, 0, 50, 60)]),
    ("ILSVRC2012_val_00000003", 640, 480, [(GOLDFISH, 300, 200, 639, 479)]),
    ("ILSVRC2012_val_00000004", 64, 64, [(GOLDFISH, 16, 16, 48, 48)]),
    ("ILSVRC2012_val_00000005", 120, 90, [(GOLDFISH, 5, 5, 20, 30)]),  # no image file: unsized
]


@pytest.fixture
def loc_fixture(tmp_path):
    csv_path = tmp_path / "LOC_val_solution.csv"
    with open(csv_path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["ImageId", "PredictionString"])
        for image_id, _, _, boxes in LOC_ROWS:
            writer.writerow([image_id, " ".join(f"{w} {x0} {y0} {x1} {y1}" for w, x0, y0, x1, y1 in boxes) + " "])
    images = tmp_path / "val"
    images.mkdir()
    for image_id, width, height, _ in LOC_ROWS[:-1]:
        Image.new("RGB", (width, height), (90, 90, 90)).save(images / f"{image_id}.JPEG")
    return csv_path, images


def by_hand(rows) -> dict[str, tuple[float, float]]:
    """The section 3.3 formula written out independently, per class: (centre, size)."""
    per_class: dict[str, list[tuple[float, float]]] = {}
    for _, width, height, boxes in rows:
        ds, areas = [], []
        for _, x0, y0, x1, y1 in boxes:
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            ds.append(max(abs(cx - width / 2) / (width / 2), abs(cy - height / 2) / (height / 2)))
            areas.append((x1 - x0) * (y1 - y0) / (width * height))
        per_class.setdefault(boxes[0][0], []).append((1 - sum(ds) / len(ds), sum(areas) / len(areas)))
    return {w: (sum(c for c, _ in v) / len(v), sum(s for _, s in v) / len(v)) for w, v in per_class.items()}


def test_loc_solution_scores_match_a_by_hand_computation(loc_fixture):
    csv_path, images = loc_fixture
    boxes = read_loc_boxes(csv_path)
    assert boxes["ILSVRC2012_val_00000002"][1] == Box(0, 0, 50, 60, TENCH)
    sizes = image_sizes_from_folder(images, set(boxes))
    assert sizes["ILSVRC2012_val_00000002"] == (333, 500)
    items, unsized, _ = boxes_from_loc_csv(csv_path, sizes)
    assert [(row.image_id, row.reason, row.action, row.key) for row in unsized] == [
        ("ILSVRC2012_val_00000005", "image-size-unknown", "not-scored", "ILSVRC2012_val_00000005")
    ]
    report = compute_scores(items)
    expected = by_hand(LOC_ROWS[:-1])
    assert {c.wnid: (c.centre, c.size) for c in report.classes} == {
        w: (pytest.approx(c, abs=1e-12), pytest.approx(s, abs=1e-12)) for w, (c, s) in expected.items()
    }
    assert report.summary["centre_class_mean"] == pytest.approx(np.mean([c for c, _ in expected.values()]))
    assert report.summary["size_class_mean"] == pytest.approx(np.mean([s for _, s in expected.values()]))


def test_cli_scores_from_loc_csv_writes_csv_plot_and_correlations(loc_fixture, tmp_path):
    csv_path, images = loc_fixture
    accuracy = tmp_path / "accuracy.csv"
    accuracy.write_text("wnid,accuracy\nn01440764,0.9\nn01443537,0.4\nn01484850,0.7\n")
    out = tmp_path / "report"
    assert main(scores_from_csv(csv_path, images, out, "--accuracy", str(accuracy))) == 0
    rows = list(csv.DictReader(open(out / "scores_per_class.csv")))
    expected = by_hand(LOC_ROWS[:-1])
    assert [r["wnid"] for r in rows] == [TENCH, GOLDFISH] and rows[1]["name"] == "goldfish"
    assert [int(r["images"]) for r in rows] == [2, 2]
    for row in rows:
        assert float(row["centre"]) == pytest.approx(expected[row["wnid"]][0], abs=1e-6)
        assert float(row["size"]) == pytest.approx(expected[row["wnid"]][1], abs=1e-6)
    assert Image.open(out / "previews" / "score_distributions.png").size == (900, 340)
    report = json.loads((out / "validation.json").read_text())
    correlations = report["scores"]["accuracy_correlations"]
    assert correlations["classes"] == 2 and correlations["centre"]["spearman"] is None  # too few classes
    assert report["scores"]["summary"]["paper_reference"]["centre_class_mean"] == 0.747
    assert "0.747" in (out / "validation.md").read_text()


def test_scores_from_a_parts_folder_use_the_boxes_the_parts_carry(tmp_path):
    tree = write_tree(tmp_path / "imagenet", split="val", count=8)
    assert main(extract_args(tree.root, tmp_path / "out")) == 0
    parts = tmp_path / "out" / "parts"
    accuracy = tmp_path / "acc.json"
    accuracy.write_text(json.dumps({"n01440764": 0.1, "n01443537": 0.5, "n01484850": 0.3, "n01491361": 0.9}))
    assert main(["validate", str(parts), "--scores", "--accuracy", str(accuracy), "--no-previews"]) == 0
    expected = by_hand([(img.image_id, img.size[0], img.size[1], list(img.boxes)) for img in tree.good])
    rows = {r["wnid"]: r for r in csv.DictReader(open(parts / "scores_per_class.csv"))}
    assert set(rows) == set(expected)
    for wnid, (centre, size) in expected.items():
        assert float(rows[wnid]["centre"]) == pytest.approx(centre, abs=1e-6)
        assert float(rows[wnid]["size"]) == pytest.approx(size, abs=1e-6)
    correlations = json.loads((parts / "validation.json").read_text())["scores"]["accuracy_correlations"]
    centres = [expected[w][0] for w in sorted(expected)]
    acc = [json.loads(accuracy.read_text())[w] for w in sorted(expected)]
    assert correlations["centre"]["spearman"] == pytest.approx(spearman(centres, acc))
    assert correlations["classes"] == 4


def test_rank_correlations_match_known_values():
    # the reference values scipy.stats documents for these inputs
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(0.8207826816681233, abs=1e-12)
    assert kendall_tau_b([12, 2, 1, 12, 2], [1, 4, 7, 1, 0]) == pytest.approx(-0.4714045207910317, abs=1e-12)
    # by hand: no ties, one discordant pair of 6 -> tau = (5 - 1) / 6
    assert kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # by hand: d = [0, 1, -1, 0] -> rho = 1 - 6 * 2 / (4 * 15)
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert list(average_ranks([10, 20, 20, 5])) == [2.0, 3.5, 3.5, 1.0]
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_bad_inputs_are_usage_errors(tmp_path, capsys):
    bad = tmp_path / "LOC_val_solution.csv"
    bad.write_text("ImageId,PredictionString\nILSVRC2012_val_00000001,n01440764 1 2 3\n")
    assert (
        main(
            [
                "validate",
                "--scores",
                "--boxes-csv",
                str(bad),
                "--sizes-from",
                str(tmp_path),
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    assert "groups of 'wnid x0 y0 x1 y1'" in capsys.readouterr().err
    assert main(["validate", "--scores", "--boxes-csv", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "--sizes-from" in capsys.readouterr().err
    assert main(["validate", "--scores", "--out", str(tmp_path / "r")]) == 2


@pytest.mark.skipif(
    not (os.environ.get("HSI_LOC_VAL_SOLUTION") and os.environ.get("HSI_IMAGENET_VAL")),
    reason="set HSI_LOC_VAL_SOLUTION (LOC_val_solution.csv) and HSI_IMAGENET_VAL (the val images) to run",
)
def test_official_val_boxes_give_the_papers_figures():
    """Over ImageNet's official val boxes the paper reports class-averaged 0.747 (centre), 0.418 (size)."""
    csv_path, images = Path(os.environ["HSI_LOC_VAL_SOLUTION"]), Path(os.environ["HSI_IMAGENET_VAL"])
    items, unsized, _ = boxes_from_loc_csv(csv_path, image_sizes_from_folder(images, read_loc_solution(csv_path).ids()))
    assert not unsized and len(items) == 50_000
    summary = compute_scores(items).summary
    assert summary["classes"] == 1000
    assert summary["centre_class_mean"] == pytest.approx(0.747, abs=0.001)
    assert summary["size_class_mean"] == pytest.approx(0.418, abs=0.001)


def test_unscored_images_become_rows_in_the_report(loc_fixture, tmp_path, capsys):
    csv_path, images = loc_fixture
    # an image whose only box lies wholly outside it: the box is dropped and the image has no score
    Image.new("RGB", (50, 40), (90, 90, 90)).save(images / "ILSVRC2012_val_00000006.JPEG")
    with open(csv_path, "a", newline="") as handle:
        csv.writer(handle).writerow(["ILSVRC2012_val_00000006", f"{TENCH} 60 50 90 80"])
    out = tmp_path / "report"
    assert main(scores_from_csv(csv_path, images, out, "--no-previews")) == 0
    assert "1 images of LOC_val_solution.csv have no size under --sizes-from" in capsys.readouterr().err
    payload = json.loads((out / "validation.json").read_text())
    unscored = payload["scores"]["unscored"]
    assert unscored["by_reason"] == {"image-size-unknown": 1, "no-box-to-score": 1}
    assert [(r["image_id"], r["reason"], r["action"], r["stage"], r["key"]) for r in unscored["rows"]] == [
        ("ILSVRC2012_val_00000005", "image-size-unknown", "not-scored", "validate", "ILSVRC2012_val_00000005"),
        ("ILSVRC2012_val_00000006", "no-box-to-score", "not-scored", "validate", "ILSVRC2012_val_00000006"),
    ]
    assert payload["scores"]["summary"]["images"] == 4 and payload["scores"]["summary"]["images_unscored"] == 2
    assert payload["issues"] == {
        "total": 3,
        "by_reason": {"box-empty": 1, "image-size-unknown": 1, "no-box-to-score": 1},
    }
    markdown = (out / "validation.md").read_text()
    assert "2 images are not scored:" in markdown
    assert "| no-box-to-score |  |  | ILSVRC2012_val_00000006 | no box of the image is left inside it |" in markdown


def test_one_bootstrap_rule_leaves_out_resamples_without_a_rank_order():
    """Validation (over classes) and the probes (over models) share one bootstrap: a resample whose
    side is constant has no rank order and is left out and counted, not scored 0 (validation's old
    rule pulled the interval towards 0)."""
    from validation.scores.correlations import correlation_with_interval, rank_correlation

    x, y = [0, 0, 0, 0, 1, 1], [1, 2, 3, 4, 5, 6]  # perfectly ordered; many resamples hold one x value
    found = rank_correlation(x, y, resamples=500)
    from scipy.stats import spearmanr

    assert found.value == pytest.approx(spearmanr(x, y).statistic)
    assert 0 < found.undefined_resamples < 500
    assert found.low > 0  # every defined resample keeps the order: no 0 from the undefined ones
    assert correlation_with_interval(x, y, "spearman")["ci"][0] > 0
    kendall = rank_correlation(x, y, "kendall", resamples=200)
    assert kendall.undefined_resamples > 0 and kendall.low > 0


def test_the_docs_define_the_centre_score_as_the_code_computes_it():
    """A box offset on both axes tells a Chebyshev distance (the code's) from a Euclidean one: centre
    (75, 75) in 100 x 100 gives max(0.5, 0.5) = 0.5, where the Euclidean distance would be 0.707."""
    diagonal = score_image(ImageBoxes("e", TENCH, 100, 100, (Box(70, 70, 80, 80, TENCH),)))
    assert diagonal.centre == pytest.approx(0.5)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "build.md").read_text("utf-8")
    assert "`max(|cx - W/2| / (W/2), |cy - H/2| / (H/2))`" in docs and "not a Euclidean one" in docs
