"""The per-class score table and the distribution plots, beside the paper's figures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from builder.core.csv_cells import write_table
from validation.scores.boxes import PAPER_CENTRE_MEAN, PAPER_SIZE_MEAN, ClassScore


def write_class_csv(classes: Sequence[ClassScore], path: Path) -> None:
    rows = [[c.wnid, c.name, c.images, f"{c.centre:.6f}", f"{c.size:.6f}"] for c in classes]
    write_table(path, ["wnid", "name", "images", "centre", "size"], rows, terminator="\n")


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
