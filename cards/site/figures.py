"""The leaderboard's figures (matplotlib Figures; `png_bytes` writes one): every model's
accuracy-vs-size curves in one figure (a panel per group, the models offset on x so their
intervals do not hide each other, the chance line drawn), and a position x size heat map per
model, with each cell's n, when the config has more than two placements.

Each figure is a `matplotlib.figure.Figure` of its own (no pyplot global state, as
evaluation.analysis.plots draws). Names from the data go into the figure as plain text: `$` is escaped, so
a model called `$\\frac$` is text, not mathtext that fails to parse.
"""

from __future__ import annotations

import io

from builder.core.taxonomy import sorted_groups

from .collect import ModelEval

MAX_LABEL = 48  # characters of a model's name in a legend or a panel title


def plain(text: str) -> str:
    """A string from the data as matplotlib text: no mathtext, one line, not too long."""
    text = " ".join(str(text).split())
    text = text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"
    return text.replace("$", r"\$")


def png_bytes(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def _chance(models: list[ModelEval]) -> float | None:
    classes = {m.run["classes"] for m in models}
    classes.discard(None)
    if len(classes) != 1:
        return None
    (count,) = classes
    return 1.0 / count if isinstance(count, int) and count > 0 else None


def _interval(estimate: dict) -> tuple[float, float, float]:
    """(value, distance down to low, distance up to high); no interval draws no bar."""
    value = estimate["value"]
    low = estimate["low"] if estimate["low"] is not None else value
    high = estimate["high"] if estimate["high"] is not None else value
    return value, max(value - low, 0.0), max(high - value, 0.0)


def accuracy_vs_size(models: list[ModelEval]):
    """One figure: a panel per group, top-1 against object size, a curve per model (None when no
    model has group metadata)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    grouped = [m for m in models if m.metrics["has_groups"]]
    if not grouped:
        return None
    every = [c for m in grouped for c in m.metrics["by_group_size"] if c["top1"] and c["top1"]["value"] is not None]
    groups = sorted_groups(c["group"] for c in every)
    sizes = sorted({c["size"] for c in every})
    if not groups:
        return None
    figure = Figure(figsize=(min(3.2 * len(groups), 16), 3.8 + 0.25 * ((len(grouped) + 2) // 3)))
    axes = figure.subplots(1, len(groups), sharey=True, squeeze=False)[0]
    spread = 0.12 * (len(grouped) - 1)  # models side by side around each size
    reach = []
    for n, model in enumerate(grouped):
        shift = (n / (len(grouped) - 1) - 0.5) * spread if len(grouped) > 1 else 0.0
        for ax, group in zip(axes, groups):
            cells = sorted(
                (c for c in model.metrics["by_group_size"] if c["group"] == group and c["top1"]),
                key=lambda c: c["size"],
            )
            points = [
                (sizes.index(c["size"]) + shift, *_interval(c["top1"])) for c in cells if c["top1"]["value"] is not None
            ]
            if not points:
                continue
            x, y, down, up = (list(v) for v in zip(*points))
            reach += [v - d for v, d in zip(y, down)] + [v + u for v, u in zip(y, up)]
            ax.errorbar(x, y, yerr=[down, up], marker="o", capsize=3, color=f"C{n % 10}")
    chance = _chance(grouped)
    bottom, top = min([*reach, *([chance] if chance is not None else [])]), max(reach)
    pad = max(0.03, 0.06 * (top - bottom))
    for ax, group in zip(axes, groups):
        ax.set_title(plain(group), fontsize=10)
        ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
        ax.set_xlim(-0.5, len(sizes) - 0.5)
        ax.set_xlabel("object size (px)")
        ax.grid(alpha=0.3)
        if chance is not None:
            ax.axhline(chance, color="gray", linestyle=":", linewidth=1)
    axes[0].set_ylabel("top-1 accuracy")
    axes[0].set_ylim(max(-0.02, bottom - pad), min(1.02, top + pad))
    handles = [Line2D([], [], color=f"C{n % 10}", marker="o") for n in range(len(grouped))]
    labels = [plain(m.name) for m in grouped]
    if chance is not None:
        handles.append(Line2D([], [], color="gray", linestyle=":", linewidth=1))
        labels.append(f"chance (1/{round(1 / chance)})")
    rows = (len(labels) + 2) // 3
    figure.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, frameon=False)
    figure.tight_layout(rect=(0, min(0.5, 0.04 + 0.07 * rows), 1, 1))
    return figure


def placements(model: ModelEval) -> list[str]:
    return sorted({c["position"] for c in model.metrics.get("by_position_size", [])})


def position_heat_maps(models: list[ModelEval]):
    """One figure: a panel per model whose config has more than two placements, top-1 by position
    (rows) and size (columns), each cell's value and n written in it, one shared colour scale."""
    import numpy as np
    from matplotlib.figure import Figure

    shown = [m for m in models if len(placements(m)) > 2]
    if not shown:
        return None
    columns = min(3, len(shown))
    rows = (len(shown) + columns - 1) // columns
    most = max(len(placements(m)) for m in shown)
    figure = Figure(figsize=(4.6 * columns, (0.45 * most + 1.6) * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    image = None
    for ax, model in zip(axes, shown):
        cells = model.metrics["by_position_size"]
        positions = placements(model)
        sizes = sorted({c["size"] for c in cells})
        grid = np.full((len(positions), len(sizes)), np.nan)
        counts = {}
        for c in cells:
            if c["top1"] and c["top1"]["value"] is not None:
                i, j = positions.index(c["position"]), sizes.index(c["size"])
                grid[i, j] = c["top1"]["value"]
                counts[(i, j)] = c["top1"]["n"]
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
        ax.set_yticks(range(len(positions)), [plain(p) for p in positions])
        for (i, j), value in np.ndenumerate(grid):
            if np.isfinite(value):
                n = counts.get((i, j))
                label = f"{value:.2f}" + (f"\nn={n}" if n is not None else "")
                colour = "white" if value < 0.6 else "black"
                ax.text(j, i, label, ha="center", va="center", color=colour, fontsize=8)
        ax.set_xlabel("object size (px)")
        ax.set_title(plain(model.name), fontsize=9)
    for ax in axes[len(shown) :]:
        ax.set_visible(False)
    figure.colorbar(image, ax=list(axes[: len(shown)]), label="top-1", shrink=0.9)
    return figure
