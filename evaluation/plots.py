"""Plots from the metrics dict (matplotlib, Agg): accuracy vs object size per group with intervals
(the paper's main figure), a position x size heat map when a config has more than two placements,
and the share of errors naming the background's class per group and size."""

from __future__ import annotations


def headless_pyplot():
    """matplotlib's pyplot on the Agg backend: plots are files, never windows (no display on a cluster)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(width: float, height: float):
    """A figure of its own, outside pyplot's global state: nothing to close, no backend to switch, and
    it shows itself in a notebook (what `Evaluation.figure` returns)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def _yerr(estimates: list[dict]):
    low = [e["value"] - e["low"] if e.get("low") is not None else 0.0 for e in estimates]
    high = [e["high"] - e["value"] if e.get("high") is not None else 0.0 for e in estimates]
    return [low, high]


def accuracy_vs_size(metrics: dict, title: str):
    fig, ax = _figure(5.5, 4)
    for group in metrics["groups_summary"]["groups"]:
        rows = sorted((r for r in metrics["by_group_size"] if r["group"] == group), key=lambda r: r["size"])
        estimates = [r["top1"] for r in rows]
        ax.errorbar(
            [r["size"] for r in rows],
            [e["value"] for e in estimates],
            yerr=_yerr(estimates),
            marker="o",
            capsize=3,
            label=group,
        )
    ax.set_xlabel("object size (px on the canvas)")
    ax.set_ylabel("top-1 accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def position_size_heatmap(metrics: dict, title: str):
    import numpy as np

    rows = metrics["by_position_size"]
    positions = sorted({r["position"] for r in rows})
    sizes = sorted({r["size"] for r in rows})
    grid = np.full((len(positions), len(sizes)), np.nan)
    for r in rows:
        grid[positions.index(r["position"]), sizes.index(r["size"])] = r["top1"]["value"]
    fig, ax = _figure(1.4 * len(sizes) + 2.5, 0.45 * len(positions) + 1.5)
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
    ax.set_yticks(range(len(positions)), positions)
    for (i, j), value in np.ndenumerate(grid):
        if np.isfinite(value):
            ax.text(
                j, i, f"{value:.2f}", ha="center", va="center", color="white" if value < 0.6 else "black", fontsize=8
            )
    ax.set_xlabel("object size (px)")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="top-1")
    fig.tight_layout()
    return fig


def background_class_share(metrics: dict, title: str):
    rows = metrics["background_class"]["by_group_size"]
    labels = [f"{r['group']}/{r['size']}" for r in rows]
    shares = [r["share_of_errors"] for r in rows]
    values = [s["value"] if s["value"] is not None else 0.0 for s in shares]
    fig, ax = _figure(max(4, 0.7 * len(rows) + 2), 3.8)
    ax.bar(
        range(len(rows)),
        values,
        yerr=_yerr([s if s["value"] is not None else {"value": 0} for s in shares]),
        capsize=3,
        color="tab:red",
        alpha=0.8,
        label="errors naming the background's class",
    )
    expected = [r["expected_share_of_errors"] for r in rows]
    if any(e is not None for e in expected):
        ax.scatter(
            range(len(rows)),
            [e if e is not None else float("nan") for e in expected],
            marker="_",
            s=300,
            color="black",
            label="expected from the controls",
            zorder=3,
        )
    ax.set_xticks(range(len(rows)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("share of errors")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


# name -> drawer, in the order the report lists them
DRAWERS = {
    "accuracy_vs_size": accuracy_vs_size,
    "position_size_heatmap": position_size_heatmap,
    "background_class_share": background_class_share,
}


def available_plots(metrics: dict) -> list[str]:
    """The plots this config allows: the heat map needs more than two placements, the background-class
    plot samples on another class's background."""
    if not metrics.get("has_groups"):
        return []
    names = ["accuracy_vs_size"]
    if len({r["position"] for r in metrics["by_position_size"]}) > 2:
        names.append("position_size_heatmap")
    if metrics.get("background_class") and metrics["background_class"]["by_group_size"]:
        names.append("background_class_share")
    return names


def figure(metrics: dict, name: str, title: str):
    """One plot as a matplotlib Figure."""
    return DRAWERS[name](metrics, title)


def write_plots(metrics: dict, folder, title: str, subfolder: str = "plots") -> list[str]:
    """The plots this config allows, written as `subfolder/NAME.png` through `folder.writing` (a
    ModelFolder: no link followed, no user's file replaced); returns their file names."""
    files = []
    for name in available_plots(metrics):
        with folder.writing(f"{subfolder}/{name}.png") as path:
            figure(metrics, name, title).savefig(path, dpi=120)
        files.append(f"{name}.png")
    return files
