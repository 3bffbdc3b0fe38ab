"""DFR: the balanced refits are averaged into one head; the C grid is scored on the other half."""

from __future__ import annotations

import numpy as np

from training.groups import balanced_indices
from training.methods.dfr import averaged_head, fit_linear, tune_c


def planted_features(n=240, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    spurious = np.where(rng.random(n) < 0.8, y, rng.integers(0, 3, n))
    x = np.concatenate(
        [np.eye(3)[y] * 1.0 + rng.normal(0, 0.5, (n, 3)), np.eye(3)[spurious] * 3.0 + rng.normal(0, 0.3, (n, 3))],
        axis=1,
    )
    groups = np.array([f"{s == c}|{c}" for s, c in zip(spurious, y)])
    return x, y, groups


def test_refits_are_averaged_over_fresh_balanced_subsamples():
    x, y, groups = planted_features()
    w, b = averaged_head(x, y, groups, 0.3, 4, 3, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    fits = [fit_linear(x[idx], y[idx], 0.3, 3) for idx in (balanced_indices(groups, rng) for _ in range(4))]
    assert np.allclose(w, np.mean([f[0] for f in fits], axis=0))
    assert np.allclose(b, np.mean([f[1] for f in fits], axis=0))
    assert not np.allclose(fits[0][0], fits[1][0])  # each refit saw another subsample


def test_tuning_picks_a_grid_value_and_scores_every_c():
    x, y, groups = planted_features()
    best, scores = tune_c(x, y, groups, [1.0, 0.1, 0.01], 3, np.random.default_rng(0))
    assert best in (1.0, 0.1, 0.01) and set(scores) == {"1.0", "0.1", "0.01"}
    assert scores[str(best)] == max(scores.values())
    w, b = fit_linear(x, y, 1.0, 4)  # class 3 absent: never predicted
    assert (x @ w.T + b).argmax(1).max() < 3
