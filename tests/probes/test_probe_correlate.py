"""The cross-model table and Spearman correlations with bootstrap intervals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from builder.core.owned import OwnedFolder
from evaluation.probes import correlate


def _eval(cor: float, worst: float, share: float | None = 0.4, clean: float | None = 0.8) -> dict:
    metrics = {
        "overall": {"top1": {"value": 0.6}},
        "by_group": [{"group": "CeO", "top1": {"value": 0.9}}, {"group": "CoR", "top1": {"value": cor}}],
        "by_group_size": [{"group": "CoR", "size": 56, "top1": {"value": cor / 2}}],
        "groups_summary": {"worst_group": {"group": "CoR", "value": worst}},
        "background_class": {"overall": {"share_of_errors": {"value": share}}} if share is not None else None,
    }
    return {"metrics": metrics, **({"clean": {"top1": {"value": clean}}} if clean is not None else {})}


def _probes(shape: float, spectral: float, degenerate: bool = False) -> dict:
    return {
        "shape": {"shape_bias": shape},
        "spectral": {"spectral_bias": spectral, "lpp": 0.5, "hpp": 0.2},
        "critical_band": {
            "fit": {"A": 1, "mu": 2, "sigma": 1},
            "bandwidth_octaves": 2.4,
            "centre_frequency": 7.0,
            "peak_noise_sensitivity": 0.1,
            "degenerate": ["flat"] if degenerate else [],
        },
    }


def test_eval_values_read_from_eval_json():
    values = correlate.eval_values(_eval(0.3, 0.3))
    assert values["CoR_top1"] == 0.3 and values["CoR@56_top1"] == 0.15 and values["worst_group"] == "CoR"
    assert values["background_class_share"] == 0.4 and values["clean_top1"] == 0.8 and values["top1"] == 0.6
    bare = correlate.eval_values(_eval(0.3, 0.3, share=None, clean=None))
    assert bare["background_class_share"] is None and bare["clean_top1"] is None


def test_degenerate_critical_band_fits_are_left_out():
    assert correlate.bias_values(_probes(0.2, 0.3, degenerate=True))["cb_bandwidth"] is None
    assert correlate.bias_values(_probes(0.2, 0.3))["cb_bandwidth"] == 2.4


def test_fewer_than_three_models_give_no_number(tmp_path):
    rows = correlate.table_rows([("a", _probes(0.1, 0.2), _eval(0.3, 0.3)), ("b", _probes(0.2, 0.1), _eval(0.4, 0.4))])
    result = correlate.correlations(rows)
    assert result["pairs"] == [] and "at least 3 models" in result["note"]
    with OwnedFolder(tmp_path, "probe") as out:
        text = correlate.write_correlations(out, result).read_text()
    assert "at least 3 models" in text and "rho" not in text.split("\n", 4)[-1]


def test_spearman_with_bootstrap_intervals(tmp_path):
    shape = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    cor = [0.2, 0.3, 0.35, 0.5, 0.55, 0.7]  # rank-identical to shape
    spectral = [0.6, 0.1, 0.5, 0.2, 0.4, 0.3]
    entries = [(f"m{i}", _probes(s, p), _eval(c, c)) for i, (s, p, c) in enumerate(zip(shape, spectral, cor))]
    rows = correlate.table_rows(entries)
    result = correlate.correlations(rows, resamples=200, seed=1)
    pair = next(p for p in result["pairs"] if p["bias"] == "shape_bias" and p["metric"] == "CoR_top1")
    assert pair["rho"] == pytest.approx(1.0) and pair["n"] == 6
    assert pair["low"] is not None and pair["low"] <= pair["rho"] <= pair["high"] <= 1.0
    other = next(p for p in result["pairs"] if p["bias"] == "spectral_bias" and p["metric"] == "CoR_top1")
    from scipy.stats import spearmanr

    assert other["rho"] == pytest.approx(spearmanr(spectral, cor).statistic)
    assert other["low"] < other["high"]
    constant = next(p for p in result["pairs"] if p["bias"] == "lpp")
    assert constant["rho"] is None and "constant" in constant["note"]
    again = correlate.correlations(rows, resamples=200, seed=1)
    assert json.dumps(again, sort_keys=True) == json.dumps(result, sort_keys=True)
    with OwnedFolder(tmp_path, "probe") as out:
        csv_path, md_path = correlate.write_table(out, rows)
    assert "CoR@56_top1" in csv_path.read_text() and "m5" in md_path.read_text()
    assert np.isfinite(pair["p"])


def test_vectorised_rank_correlation_equals_scipy_spearman():
    from scipy.stats import spearmanr

    from validation.scores.correlations import vectorised_spearman

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 4, (50, 7)).astype(float), rng.normal(size=(50, 7))  # ties in a
    got = vectorised_spearman(a, b)
    want = [spearmanr(x, y).statistic for x, y in zip(a, b)]
    np.testing.assert_allclose(got, want, equal_nan=True)


def _zoo(count: int) -> list[dict]:
    shape = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6][:count]
    cor = [0.2, 0.3, 0.35, 0.5, 0.55, 0.7][:count]
    return correlate.table_rows(
        [(f"timm:model{i}", _probes(s, 0.5 - s / 2), _eval(c, c)) for i, (s, c) in enumerate(zip(shape, cor))]
    )


def test_scatter_is_one_figure_with_a_panel_per_bias_holding_every_model(tmp_path):
    rows = _zoo(6)
    result = correlate.correlations(rows, resamples=50, seed=0)
    with OwnedFolder(tmp_path, "probe") as out:
        path, note = correlate.write_scatter(out, rows, result)
    assert path == tmp_path / correlate.SCATTER_PNG and path.stat().st_size > 1000 and note is None
    fig = correlate.scatter_figure(rows, result)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    # every bias the probes measured (lpp and hpp are constant here, still measured), one panel each
    assert [ax.get_xlabel() for ax in panels] == list(correlate.BIASES)
    for ax in panels:
        (points,) = ax.collections
        assert len(points.get_offsets()) == 6  # all six models in the panel, not one point per panel
        assert "n=6" in ax.get_title()
    shape = panels[0]
    assert "Spearman rho 1.00" in shape.get_title() and shape.get_ylabel() == "worst_group_top1"


def test_fewer_than_three_models_get_no_scatter_and_an_earlier_one_is_removed(tmp_path):
    with OwnedFolder(tmp_path, "probe") as out:
        path, _ = correlate.write_scatter(out, _zoo(3), None)
        assert path.is_file()
        path, note = correlate.write_scatter(out, _zoo(2), None)
    assert path is None and not (tmp_path / correlate.SCATTER_PNG).exists()
    assert "2 model(s)" in note and "at least 3" in note and "probe_table.md" in note


def test_models_on_the_same_spot_share_one_readable_label():
    entries = [
        (f"tiny{i}.pth (timm:test_efficientnet)", _probes(s, 0.3), _eval(0.0, 0.0))
        for i, s in enumerate([0.5, 0.6, 0.5])
    ]
    fig = correlate.scatter_figure(correlate.table_rows(entries))
    shape = next(ax for ax in fig.axes if ax.get_xlabel() == "shape_bias")
    assert sorted(t.get_text() for t in shape.texts) == ["tiny0.pth, tiny2.pth", "tiny1.pth"]
    assert correlate.short_name("timm:resnet50") == "resnet50"
