"""The paper's per-class centre and size scores (Corner Cases, section 3.3) and their rank
correlations with per-class accuracy.

For an image of width W and height H, per box (x0, y0, x1, y1) in ImageNet's raw VOC corner values:
  centre distance d = max(|cx - W/2| / (W/2), |cy - H/2| / (H/2)),  cx = (x0+x1)/2, cy = (y0+y1)/2
  area fraction   a = (x1 - x0)(y1 - y0) / (W H)
Per image: centre score = 1 - mean d over its boxes, size score = mean a. Per class: the mean over its
images. The paper's class-averaged means over ImageNet's official val boxes are 0.747 (centre) and
0.418 (size); a user with `LOC_val_solution.csv` can reproduce them with
`hsi validate --scores --boxes-csv LOC_val_solution.csv --sizes-from VAL_IMAGES`.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from builder.core.classes import class_of, is_known_wnid
from builder.core.errors import InputError
from builder.core.records import Box, Issue, SourceImage, count_by_reason
from builder.formats.loc_csv import read_loc_boxes

# The paper's class-averaged figures over the official ImageNet val boxes.
PAPER_CENTRE_MEAN = 0.747
PAPER_SIZE_MEAN = 0.418

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")


@dataclass(frozen=True)
class ImageBoxes:
    """One image's boxes and size: what the scores are computed from."""

    image_id: str
    wnid: str
    width: int
    height: int
    boxes: tuple[Box, ...]


@dataclass(frozen=True)
class ImageScore:
    image_id: str
    wnid: str
    centre: float
    size: float


@dataclass(frozen=True)
class ClassScore:
    wnid: str
    name: str
    images: int
    centre: float
    size: float


def centre_distance(box: Box, width: int, height: int) -> float:
    half_w, half_h = width / 2, height / 2
    cx, cy = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
    return max(abs(cx - half_w) / half_w, abs(cy - half_h) / half_h)


def area_fraction(box: Box, width: int, height: int) -> float:
    return (box.x1 - box.x0) * (box.y1 - box.y0) / (width * height)


def score_image(item: ImageBoxes) -> ImageScore:
    if not item.boxes:
        raise ValueError(f"image {item.image_id} has no boxes to score")
    if item.width <= 0 or item.height <= 0:
        raise ValueError(f"image {item.image_id} has size {item.width}x{item.height}")
    distances = [centre_distance(b, item.width, item.height) for b in item.boxes]
    areas = [area_fraction(b, item.width, item.height) for b in item.boxes]
    return ImageScore(item.image_id, item.wnid, 1.0 - float(np.mean(distances)), float(np.mean(areas)))


def class_name(wnid: str) -> str:
    return class_of(wnid).name if is_known_wnid(wnid) else ""


def score_classes(image_scores: Iterable[ImageScore]) -> list[ClassScore]:
    """Per-class means over images, sorted by wnid."""
    grouped: dict[str, list[ImageScore]] = {}
    for score in image_scores:
        grouped.setdefault(score.wnid, []).append(score)
    return [
        ClassScore(
            wnid,
            class_name(wnid),
            len(rows),
            float(np.mean([r.centre for r in rows])),
            float(np.mean([r.size for r in rows])),
        )
        for wnid, rows in sorted(grouped.items())
    ]


def summarise(classes: Sequence[ClassScore], images: Sequence[ImageScore]) -> dict:
    """Class-averaged means (the paper's figures) plus image-averaged ones and the spread."""
    if not classes:
        return {"classes": 0, "images": 0}
    centres = np.array([c.centre for c in classes])
    sizes = np.array([c.size for c in classes])
    return {
        "classes": len(classes),
        "images": len(images),
        "centre_class_mean": float(centres.mean()),
        "size_class_mean": float(sizes.mean()),
        "centre_image_mean": float(np.mean([i.centre for i in images])),
        "size_image_mean": float(np.mean([i.size for i in images])),
        "centre_class_std": float(centres.std()),
        "size_class_std": float(sizes.std()),
        "paper_reference": {
            "centre_class_mean": PAPER_CENTRE_MEAN,
            "size_class_mean": PAPER_SIZE_MEAN,
            "note": "over ImageNet's official val boxes (LOC_val_solution.csv), all 50,000 images",
        },
    }


# --- inputs ---------------------------------------------------------------------------------


def image_sizes_from_folder(root: Path, wanted: set[str] | None = None) -> dict[str, tuple[int, int]]:
    """(width, height) of every image under `root` whose file stem is in `wanted` (header reads only)."""
    from PIL import Image

    sizes: dict[str, tuple[int, int]] = {}
    for path in sorted(Path(root).rglob("*")):
        if path.suffix.lower() not in IMAGE_SUFFIXES or (wanted is not None and path.stem not in wanted):
            continue
        try:
            with Image.open(path) as image:
                sizes[path.stem] = image.size
        except OSError:
            continue  # an unreadable image has no size; its boxes are reported as unscored
    return sizes


def image_sizes_from_parts(parts_dir: Path) -> dict[str, tuple[int, int]]:
    return {item.image_id: (item.width, item.height) for item in boxes_from_parts(parts_dir)}


def boxes_from_parts(parts_dir: Path, split: str | None = None) -> list[ImageBoxes]:
    """Every parts sample's boxes and source size, read from its `json` member only."""
    from builder.formats.parts import decode_parts_json, iter_parts_samples

    items = []
    for key, members in iter_parts_samples(parts_dir, split):
        meta = decode_parts_json(members)
        boxes = tuple(Box(b["x0"], b["y0"], b["x1"], b["y1"], b["wnid"]) for b in meta["boxes"])
        items.append(ImageBoxes(key, meta["wnid"], int(meta["width"]), int(meta["height"]), boxes))
    return sorted(items, key=lambda item: item.image_id)


def boxes_from_loc_csv(
    csv_path: Path, sizes: dict[str, tuple[int, int]]
) -> tuple[list[ImageBoxes], list[Issue], list[Issue]]:
    """Join the CSV's boxes with image sizes; each image without a known size is returned as an
    `image-size-unknown` row (it is not scored).

    Boxes are clipped to their image as extract clips them (`box-outside-image`; a box empty
    inside the image is dropped, `box-empty`), and each repair is returned as an `Issue`. The
    image's class is its first box's wnid (ImageNet val images carry boxes of their label only).
    """
    from builder.extract.shard_builder import clip_boxes

    items, unsized, issues = [], [], []
    for image_id, boxes in sorted(read_loc_boxes(csv_path).items()):
        if image_id not in sizes:
            detail = f"{Path(csv_path).name} has {len(boxes)} boxes for it, but no readable image of it has a size"
            unsized.append(Issue(image_id, "image-size-unknown", detail, "validate", key=image_id))
            continue
        width, height = sizes[image_id]
        kept, clipped = clip_boxes(SourceImage(image_id, boxes[0].wnid, "", tuple(boxes)), width, height)
        issues.extend(replace(issue, stage="validate") for issue in clipped)
        items.append(ImageBoxes(image_id, boxes[0].wnid, width, height, tuple(kept)))
    return items, unsized, issues


def read_accuracy(path: Path) -> dict[str, float]:
    """Per-class accuracy: a CSV with a `wnid` (or `class_index`) column and an `accuracy` column,
    or a JSON object {wnid: accuracy}."""
    from builder.core.classes import imagenet_classes

    path = Path(path)
    if path.suffix.lower() == ".json":
        data = json.loads(path.read_text("utf-8"))
        if not isinstance(data, dict):
            raise InputError(f"{path} must hold a JSON object mapping wnid -> accuracy")
        return {str(k): float(v) for k, v in data.items()}
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        fields = set(reader.fieldnames or ())
        if "accuracy" not in fields or not fields & {"wnid", "class_index"}:
            raise InputError(f"{path} needs an 'accuracy' column and a 'wnid' or 'class_index' column")
        by_index = {c.index: c.wnid for c in imagenet_classes()}
        accuracy = {}
        for row in reader:
            wnid = row.get("wnid") or by_index[int(row["class_index"])]
            accuracy[wnid] = float(row["accuracy"])
    return accuracy


# --- rank correlations (scipy.stats), with p-values and bootstrap intervals ------------------

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0  # the interval of the same classes is the same in every run


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks with ties given their average rank."""
    from scipy.stats import rankdata

    return rankdata(np.asarray(values, dtype=float), method="average")


def _constant(values: Sequence[float]) -> bool:
    return len(set(values)) < 2


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (nan when a side is constant)."""
    from scipy.stats import spearmanr

    return float("nan") if _constant(x) or _constant(y) else float(spearmanr(x, y).statistic)


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b, which corrects for ties (nan when a side is constant)."""
    from scipy.stats import kendalltau

    return float("nan") if _constant(x) or _constant(y) else float(kendalltau(x, y, variant="b").statistic)


def correlation_with_interval(x: Sequence[float], y: Sequence[float], method: str) -> dict:
    """The correlation, its two-sided p-value and a paired percentile bootstrap interval over
    classes (BOOTSTRAP_RESAMPLES resamples, seeded)."""
    from scipy.stats import bootstrap, kendalltau, spearmanr

    if _constant(x) or _constant(y):
        return {"value": float("nan"), "p_value": None, "ci": None}
    if method == "spearman":

        def test(a, b):
            return spearmanr(a, b)
    else:

        def test(a, b):
            return kendalltau(a, b, variant="b")

    result = test(x, y)

    def statistic(a, b):
        if _constant(a) or _constant(b):  # a resample with a constant side carries no order
            return 0.0
        return test(a, b).statistic

    interval = bootstrap(
        (np.asarray(x, float), np.asarray(y, float)),
        statistic,
        paired=True,
        vectorized=False,
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=BOOTSTRAP_CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    ).confidence_interval
    return {
        "value": float(result.statistic),
        "p_value": float(result.pvalue),
        "ci": [float(interval.low), float(interval.high)],
    }


def partial_correlation(r_xy: float, r_xz: float, r_yz: float) -> float:
    """The correlation of x and y with z held fixed, from the three pairwise correlations
    (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2)); with rank correlations, partial Spearman."""
    denominator = math.sqrt((1 - r_xz**2) * (1 - r_yz**2))
    finite = all(map(math.isfinite, (r_xy, r_xz, r_yz)))
    return (r_xy - r_xz * r_yz) / denominator if denominator and finite else float("nan")


def correlate_with_accuracy(
    classes: Sequence[ClassScore], accuracy: dict[str, float], control: dict[str, float] | None = None
) -> dict:
    """Spearman and Kendall correlations of per-class accuracy with each score, over shared classes,
    each with its p-value and a bootstrap interval.

    With `control` (e.g. per-class accuracy on clean photos: hard classes may simply be hard), each
    score also gets its partial Spearman correlation with the accuracy, the control held fixed,
    over the classes that have all three."""
    shared = [c for c in classes if c.wnid in accuracy]
    acc = [accuracy[c.wnid] for c in shared]
    result: dict = {
        "classes": len(shared),
        "classes_without_accuracy": len(classes) - len(shared),
        "confidence": BOOTSTRAP_CONFIDENCE,
        "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
    }
    controlled = [c for c in shared if control is not None and c.wnid in control]
    for score in ("centre", "size"):
        values = [getattr(c, score) for c in shared]
        entry: dict = {"spearman": None, "kendall_tau_b": None}
        if len(shared) >= 3:
            for name, method in (("spearman", "spearman"), ("kendall_tau_b", "kendall")):
                stats = correlation_with_interval(values, acc, method)
                entry[name], entry[f"{name}_p"], entry[f"{name}_ci"] = stats["value"], stats["p_value"], stats["ci"]
        if control is not None:
            x = [getattr(c, score) for c in controlled]
            y = [accuracy[c.wnid] for c in controlled]
            z = [control[c.wnid] for c in controlled]
            entry["partial_spearman"] = (
                partial_correlation(spearman(x, y), spearman(x, z), spearman(y, z)) if len(controlled) >= 4 else None
            )
        result[score] = entry
    if control is not None:
        result["classes_with_control"] = len(controlled)
    return result


def correlate_models(
    classes: Sequence[ClassScore],
    accuracies: dict[str, dict[str, float]],
    controls: dict[str, dict[str, float]] | None = None,
) -> dict:
    """Correlations per model (several --accuracy files) and their mean over models. One model:
    exactly correlate_with_accuracy's result."""
    per_model = {
        name: correlate_with_accuracy(classes, acc, (controls or {}).get(name)) for name, acc in accuracies.items()
    }
    if len(per_model) == 1:
        return next(iter(per_model.values()))
    result: dict = {
        "models": per_model,
        "averaged_over": len(per_model),
        "classes": min(r["classes"] for r in per_model.values()),
    }
    for score in ("centre", "size"):
        result[score] = {}
        for statistic in ("spearman", "kendall_tau_b", "partial_spearman"):
            values = [r[score].get(statistic) for r in per_model.values()]
            if any(statistic in r[score] for r in per_model.values()):
                finite = [v for v in values if v is not None and math.isfinite(v)]
                result[score][statistic] = float(np.mean(finite)) if len(finite) == len(values) else None
    return result


# --- outputs --------------------------------------------------------------------------------


def write_class_csv(classes: Sequence[ClassScore], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["wnid", "name", "images", "centre", "size"])
        for c in classes:
            writer.writerow([c.wnid, c.name, c.images, f"{c.centre:.6f}", f"{c.size:.6f}"])


PAPER_REFERENCE = {"centre": PAPER_CENTRE_MEAN, "size": PAPER_SIZE_MEAN}


def distribution_labels(classes: Sequence[ClassScore], score: str) -> dict[str, str]:
    """The title and legend entries of one histogram: how many classes and images, our mean and
    the paper's reference value on ImageNet val."""
    values = [getattr(c, score) for c in classes]
    mean = float(np.mean(values)) if values else float("nan")
    images = sum(c.images for c in classes)
    return {
        "title": f"per-class {score} score (n = {len(classes)} classes, {images} images)",
        "mean": f"mean {mean:.3f}",
        "reference": f"paper, ImageNet val: {PAPER_REFERENCE[score]:.3f}",
    }


def plot_distributions(classes: Sequence[ClassScore], path: Path) -> None:
    """Histograms of the per-class centre and size scores, side by side, with their means."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(9, 3.4), dpi=100)
    for axis, score, colour in zip(axes, ("centre", "size"), ("tab:blue", "tab:orange")):
        values = [getattr(c, score) for c in classes]
        labels = distribution_labels(classes, score)
        axis.hist(values, bins=min(30, max(5, len(values) // 3)), range=(0.0, 1.0), color=colour)
        axis.axvline(
            float(np.mean(values)) if values else float("nan"),
            color="black",
            linestyle="--",
            linewidth=1,
            label=labels["mean"],
        )
        axis.axvline(PAPER_REFERENCE[score], color="tab:red", linestyle=":", linewidth=1.5, label=labels["reference"])
        axis.set_title(labels["title"], fontsize=10)
        axis.set_xlabel(f"{score} score")
        axis.set_ylabel("classes")
        axis.legend(fontsize=8, loc="best", framealpha=0.9)
    figure.tight_layout()
    # no timestamps or software tags in the file, so re-runs give the same bytes
    figure.savefig(path, format="png", metadata={"Software": None})
    plt.close(figure)


@dataclass
class ScoreReport:
    images: list[ImageScore]
    classes: list[ClassScore]
    summary: dict
    correlations: dict | None = None
    box_issues: list[Issue] = field(default_factory=list)  # boxes clipped or dropped to fit their image
    unscored: list[Issue] = field(default_factory=list)  # images left out of the scores, and why

    def to_json(self) -> dict:
        payload: dict = {"summary": self.summary}
        if self.correlations is not None:
            payload["accuracy_correlations"] = self.correlations
        if self.box_issues:
            payload["box_issues"] = {
                "by_reason": dict(sorted(Counter(i.reason for i in self.box_issues).items())),
                "rows": [i.to_json() for i in self.box_issues],
            }
        if self.unscored:
            payload["unscored"] = {
                "by_reason": count_by_reason(self.unscored),
                "rows": [i.to_json() for i in self.unscored],
            }
        return payload


def check_score_range(scores: Sequence[ImageScore]) -> None:
    """Both scores lie in [0, 1] by construction for boxes inside their image; a score outside says
    the boxes and sizes do not belong together, and is refused rather than averaged in."""
    bad = [s for s in scores if not (0.0 <= s.centre <= 1.0 and 0.0 <= s.size <= 1.0)]
    if bad:
        first = bad[0]
        raise InputError(
            f"{len(bad)} images score outside [0, 1] (first: {first.image_id}, centre {first.centre:.3f}, "
            f"size {first.size:.3f}): their boxes do not fit the image sizes; check --sizes-from"
        )


def compute_scores(
    items: Sequence[ImageBoxes],
    accuracy: dict[str, float] | dict[str, dict[str, float]] | None = None,
    controls: dict[str, dict[str, float]] | None = None,
    box_issues: Sequence[Issue] = (),
    unscored: Sequence[Issue] = (),
) -> ScoreReport:
    """`accuracy`: one per-class accuracy {wnid: acc}, or several by model name {name: {wnid: acc}}
    (with `controls` by the same names, for partial correlations). `unscored`: rows of images already
    left out (no size); an image whose boxes were all dropped joins them as `no-box-to-score`."""
    images = [score_image(item) for item in items if item.boxes]
    left_out = list(unscored) + [
        Issue(item.image_id, "no-box-to-score", "no box of the image is left inside it", "validate", key=item.image_id)
        for item in items
        if not item.boxes
    ]
    check_score_range(images)
    classes = score_classes(images)
    correlations = None
    if accuracy is not None:
        several = bool(accuracy) and all(isinstance(v, dict) for v in accuracy.values())
        correlations = correlate_models(classes, accuracy if several else {"accuracy": accuracy}, controls)  # type: ignore[dict-item]
    summary = summarise(classes, images)
    if box_issues:
        summary["boxes_clipped"] = sum(1 for i in box_issues if i.reason == "box-outside-image")
        summary["boxes_dropped"] = sum(1 for i in box_issues if i.reason != "box-outside-image")
    if left_out:
        summary["images_unscored"] = len(left_out)
    return ScoreReport(
        images, classes, summary, correlations, list(box_issues), sorted(left_out, key=lambda i: i.sort_key)
    )
