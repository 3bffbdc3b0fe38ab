"""The report's plots show what they claim: axes scaled to the numbers, chance drawn and named, groups
side by side, the expected share distinct from the intervals, legends off the data, n on the heat map.

The metrics are planted with the magnitudes of a real ImageNet model (background-class shares of a
few percent), where a 0-1 axis makes every bar invisible."""

from __future__ import annotations

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from evaluation.analysis import plots

GROUPS = ("CeO", "CoO", "CeR", "CoR")
SIZES = (56, 84, 112)


def estimate(value, spread=0.02, n=40):
    if value is None:
        return {"value": None, "low": None, "high": None, "n": 0, "sources": 0}
    return {"value": value, "low": max(value - spread, 0.0), "high": value + spread, "n": n, "sources": n}


def planted_metrics(top1=0.25, shares=(0.044, 0.02, 0.0, 0.031, 0.012, None), k=1000) -> dict:
    """Every group at every size near `top1` (within 0.05); background-class shares per (R group,
    size) as given (None: a cell without errors)."""
    cells = [(g, s) for g in ("CeR", "CoR") for s in SIZES]
    background_rows = [
        {
            "group": g,
            "size": s,
            "samples": 60,
            "errors": 0 if share is None else 45,
            "share_of_errors": estimate(share, 0.015, 45),
            "expected_share_of_errors": None if share is None else 0.004,
        }
        for (g, s), share in zip(cells, shares)
    ]
    positions = ("center", "top-right", "top-left", "bottom-left")
    return {
        "has_groups": True,
        "label_space_size": k,
        "groups_summary": {"groups": list(GROUPS)},
        "by_group_size": [
            {"group": g, "size": s, "top1": estimate(top1 + 0.01 * i - 0.02 * j)}
            for i, g in enumerate(GROUPS)
            for j, s in enumerate(SIZES)
        ],
        "by_position_size": [
            {"position": p, "size": s, "top1": estimate(0.3 + 0.1 * j, n=36 + 8 * i + j)}
            for i, p in enumerate(positions)
            for j, s in enumerate(SIZES)
        ],
        "background_class": {"chance_share_of_errors": round(1 / (k - 1), 6), "by_group_size": background_rows},
    }


def drawn(name: str, metrics: dict):
    """The figure, its axes and a renderer, after a full draw (so extents are the saved ones)."""
    fig = plots.figure(metrics, name, "planted model on planted data")
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return fig, fig.axes[0], canvas.get_renderer()


def legend_labels(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def test_background_class_axis_follows_small_shares_and_names_expected_and_chance(tmp_path):
    metrics = planted_metrics()
    fig, ax, renderer = drawn("background_class_share", metrics)
    bottom, top = ax.get_ylim()
    assert bottom == 0 and 0.059 < top < 0.2  # the highest interval end is 0.059: on the axis, with room
    labels = legend_labels(ax)
    assert any("expected" in label for label in labels) and any("chance" in label for label in labels)
    chance = [line for line in ax.get_lines() if line.get_label().startswith("chance")]
    assert len(chance) == 1 and chance[0].get_ydata()[0] == pytest.approx(1 / 999, rel=1e-3)
    # the expected marker is not drawn like an interval cap: its own marker and colour
    expected = next(c for c in ax.collections if c.get_label().startswith("expected"))
    assert expected.get_paths()[0].vertices.shape[0] > 2  # a closed shape (diamond), not a flat tick
    caps = [line for line in ax.get_lines() if line.get_marker() == "_"]
    assert caps and all(tuple(expected.get_facecolor()[0][:3]) != line.get_color() for line in caps)
    legend = ax.get_legend().get_window_extent(renderer)
    bars = [patch.get_window_extent(renderer) for patch in ax.patches]
    assert len(bars) == 6 and not any(legend.overlaps(bar) for bar in bars)
    assert not legend.overlaps(ax.get_window_extent(renderer))  # beside the axes, not over the data
    # each bar carries its count; the cell without errors says so
    texts = [t.get_text() for t in ax.texts]
    assert "2/45" in texts and "no errors" in texts
    assert legend.x1 <= fig.bbox.x1  # and the legend is inside the saved image
    fig.savefig(tmp_path / "share.png")


def test_accuracy_groups_are_offset_chance_drawn_and_axis_scaled():
    fig, ax, renderer = drawn("accuracy_vs_size", planted_metrics(top1=0.2))
    groups = [c for c in ax.containers if c.get_label() in GROUPS]  # one errorbar container per group
    assert [c.get_label() for c in groups] == list(GROUPS)
    xs = [tuple(c.lines[0].get_xdata()) for c in groups]
    for column in range(len(SIZES)):
        assert len({x[column] for x in xs}) == len(GROUPS)  # four groups, four x positions at each size
    assert [tick.get_text() for tick in ax.get_xticklabels()] == [str(s) for s in SIZES]
    bottom, top = ax.get_ylim()
    assert bottom == 0 and 0.25 < top < 0.4  # highest interval end 0.25, not a 0-1 axis
    assert any(label == "chance (1/1000)" for label in legend_labels(ax))
    legend = ax.get_legend().get_window_extent(renderer)
    assert not legend.overlaps(ax.get_window_extent(renderer))


def test_chance_comes_from_the_background_class_section_of_an_older_report():
    metrics = planted_metrics(k=10)
    del metrics["label_space_size"]
    assert plots.label_space_size(metrics) == 10
    _, ax, _ = drawn("accuracy_vs_size", metrics)
    assert "chance (1/10)" in legend_labels(ax)
    metrics["background_class"] = None
    assert plots.label_space_size(metrics) is None
    _, ax, _ = drawn("accuracy_vs_size", metrics)
    assert not any("chance" in label for label in legend_labels(ax))  # unknown K: no line made up


def test_heat_map_cells_carry_their_sample_count():
    metrics = planted_metrics()
    _, ax, _ = drawn("position_size_heatmap", metrics)
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == len(metrics["by_position_size"])
    for row in metrics["by_position_size"]:
        assert f"{row['top1']['value']:.2f}\nn={row['top1']['n']}" in texts
