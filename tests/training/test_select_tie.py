"""`--select worst-group` keeps the epoch with the best validation worst group; a tie there (the
worst group often stays at 0 for several epochs) goes to the higher mean accuracy, not the first
epoch."""

from __future__ import annotations

from training.loop import improves


def scores(worst: float, mean: float) -> dict:
    return {"worst_group": worst, "mean": mean}


def test_a_worst_group_tie_is_broken_by_the_mean():
    assert improves(scores(0.0, 0.74), scores(0.0, 0.51), "worst-group")
    assert not improves(scores(0.0, 0.51), scores(0.0, 0.74), "worst-group")


def test_a_better_worst_group_wins_over_a_better_mean():
    assert improves(scores(0.25, 0.60), scores(0.0, 0.90), "worst-group")
    assert not improves(scores(0.0, 0.90), scores(0.25, 0.60), "worst-group")


def test_a_full_tie_keeps_the_earlier_epoch():
    assert not improves(scores(0.5, 0.8), scores(0.5, 0.8), "worst-group")
    assert not improves(scores(0.5, 0.8), scores(0.5, 0.8), "mean")


def test_mean_selection_ignores_the_worst_group():
    assert improves(scores(0.0, 0.81), scores(0.9, 0.80), "mean")
    assert not improves(scores(0.9, 0.80), scores(0.0, 0.81), "mean")
