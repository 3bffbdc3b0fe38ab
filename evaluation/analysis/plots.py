"""Plots from the metrics dict (matplotlib, Agg): accuracy vs object size per group with intervals
(the paper's main figure), a position x size heat map when a config has more than two placements,
and the share of errors naming the background's class per group and size.

Every axis is scaled to the numbers it shows (a share of 0.04 on a 0-1 axis is an invisible bar),
chance is drawn where the label space is known, and legends sit outside the data."""

from __future__ import annotations

GROUP_DODGE = 0.09  # x offset between groups at one size (ticks are 1 apart): intervals side by side
CHANCE_STYLE = {"color": "0.35", "linestyle": "--", "linewidth": 1}


def headless_pyplot():
    """matplotlib's pyplot on the Agg backend: plots are files, never windows (no display on a cluster)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(width: float, height: float):
    """A figure of its own, outside pyplot's global state: nothing to close, no backend to switch, and
    it shows itself in a notebook (what `Evaluation.figure` returns). Constrained layout keeps a
    legend placed beside the axes inside the saved image."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots()


def _yerr(estimates: list[dict]):
    low = [e["value"] - e["low"] if e.get("low") is not None else 0.0 for e in estimates]
    high = [e["high"] - e["value"] if e.get("high") is not None else 0.0 for e in estimates]
    return [low, high]


def _upper_limit(values, headroom: float = 0.12) -> float:
    """The top of a y-axis from 0 that shows `values` (None skipped) with room above the highest;
    at most a little over 1, since every quantity plotted here is a share."""
    top = max([v for v in values if v is not None] + [0.0])
    return min(max(top * (1 + headroom), top + 0.01, 0.02), 1.05)


def label_space_size(metrics: dict) -> int | None:
    """K, the classes a prediction could name: recorded in the metrics, else recovered from the
    background-class chance 1/(K-1) of an older eval.json; None when neither is there."""
    if metrics.get("label_space_size"):
        return int(metrics["label_space_size"])
    chance = (metrics.get("background_class") or {}).get("chance_share_of_errors")
    return round(1 + 1 / chance) if chance else None


def _legend_beside(ax, order: list[str] | None = None) -> None:
    """The legend right of the axes, never over the data; `order`: label prefixes, in the order shown."""
    handles, labels = ax.get_legend_handles_labels()
    if order:
        rank = [next((n for n, prefix in enumerate(order) if label.startswith(prefix)), len(order)) for label in labels]
        handles, labels = zip(*[(h, lab) for _, h, lab in sorted(zip(rank, handles, labels), key=lambda t: t[0])])
    ax.legend(
        handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False
    )


def accuracy_vs_size(metrics: dict, title: str):
    fig, ax = _figure(6.4, 4)
    groups = metrics["groups_summary"]["groups"]
    sizes = sorted({r["size"] for r in metrics["by_group_size"]})
    highs = []
    for n, group in enumerate(groups):
        rows = sorted((r for r in metrics["by_group_size"] if r["group"] == group), key=lambda r: r["size"])
        estimates = [r["top1"] for r in rows]
        # sizes as categories, each group nudged sideways so equal intervals do not hide each other
        offset = (n - (len(groups) - 1) / 2) * GROUP_DODGE
        drawn = ax.errorbar(
            [sizes.index(r["size"]) + offset for r in rows],
            [e["value"] for e in estimates],
            yerr=_yerr(estimates),
            marker="o",
            markersize=5,
            capsize=3,
            label=group,
        )
        for artist in drawn.get_children():
            artist.set_clip_on(False)  # a point at 0 sits on the axis, whole, not cut in half
        highs += [e["high"] if e.get("high") is not None else e["value"] for e in estimates]
    k = label_space_size(metrics)
    if k:
        ax.axhline(1 / k, **CHANCE_STYLE, label=f"chance (1/{k})")
        highs.append(1 / k)
    ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
    ax.set_xlim(-0.5, len(sizes) - 0.5)
    ax.set_xlabel("object size (px on the canvas)")
    ax.set_ylabel("top-1 accuracy")
    ax.set_ylim(0, _upper_limit(highs))
    ax.set_title(title, fontsize=9)
    _legend_beside(ax, [*groups, "chance"])
    ax.grid(alpha=0.3)
    return fig


def position_size_heatmap(metrics: dict, title: str):
    import numpy as np

    rows = metrics["by_position_size"]
    positions = sorted({r["position"] for r in rows})
    sizes = sorted({r["size"] for r in rows})
    grid = np.full((len(positions), len(sizes)), np.nan)
    counts = {}
    for r in rows:
        cell = positions.index(r["position"]), sizes.index(r["size"])
        grid[cell] = r["top1"]["value"]
        counts[cell] = r["top1"]["n"]
    fig, ax = _figure(1.4 * len(sizes) + 2.5, 0.55 * len(positions) + 1.5)
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
    ax.set_yticks(range(len(positions)), positions)
    for (i, j), value in np.ndenumerate(grid):
        if np.isfinite(value):
            colour = "white" if value < 0.6 else "black"
            # n beside the value: 0.50 of 4 samples and 0.50 of 400 are not the same finding
            ax.text(j, i, f"{value:.2f}\nn={counts[i, j]}", ha="center", va="center", color=colour, fontsize=8)
    ax.set_xlabel("object size (px)")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="top-1")
    return fig


def background_class_share(metrics: dict, title: str):
    import numpy as np

    section = metrics["background_class"]
    rows = section["by_group_size"]
    labels = [f"{r['group']}/{r['size']}" for r in rows]
    shares = [r["share_of_errors"] for r in rows]
    values = [s["value"] if s["value"] is not None else 0.0 for s in shares]
    fig, ax = _figure(max(5.5, 0.7 * len(rows) + 3.5), 3.8)
    x = np.arange(len(rows))
    ax.bar(
        x,
        values,
        width=0.6,
        color="tab:red",
        alpha=0.8,
        label="errors naming the background's class\n(over each bar: how many of its errors)",
    )
    ax.errorbar(
        x,
        values,
        yerr=_yerr([s if s["value"] is not None else {"value": 0} for s in shares]),
        fmt="none",
        ecolor="black",
        elinewidth=1,
        capsize=3,
        label="95% interval",
    )
    expected = [r["expected_share_of_errors"] for r in rows]
    if any(e is not None for e in expected):
        # a diamond of another colour: a flat black tick reads as one more interval cap
        ax.scatter(
            x,
            [e if e is not None else np.nan for e in expected],
            marker="D",
            s=30,
            color="tab:blue",
            edgecolor="white",
            linewidth=0.5,
            label="expected from the controls' errors",
            zorder=3,
        )
    chance = section.get("chance_share_of_errors")
    if chance:
        ax.axhline(chance, **CHANCE_STYLE, label=f"chance, 1/(K-1) = {chance:.4f}")
    tops = [s["high"] if s.get("high") is not None else s["value"] for s in shares] + expected + [chance]
    upper = _upper_limit(tops, headroom=0.25)  # room for the counts written over the bars
    for i, (row, share) in enumerate(zip(rows, shares)):
        if share["value"] is None:
            text = "no errors"
        else:
            text = f"{round(share['value'] * row['errors'])}/{row['errors']}"
        top = share["high"] if share.get("high") is not None else values[i]
        ax.text(i, top + upper * 0.015, text, ha="center", va="bottom", fontsize=6.5)
    ax.set_xticks(x, labels, rotation=45, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylim(0, upper)
    ax.set_ylabel("share of errors")
    ax.set_title(title, fontsize=9)
    _legend_beside(ax, ["errors naming", "95%", "expected", "chance"])
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
