"""A killed run resumes to the same weights bit for bit; a seed gives the same weights; bad input is refused."""

from __future__ import annotations

import pytest
from planted_spurious import compose_planted
from settings_factory import small_run

from training.groups import GroupMetadataError
from training.loop import TrainError, fit


def states_equal(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(sa[k].equal(sb[k]) for k in sa)


def test_resume_after_a_kill_equals_an_uninterrupted_run_and_seeds_are_deterministic(small_planted, tmp_path):
    quiet = dict(announce=lambda _: None)
    straight = fit(small_run(small_planted, tmp_path / "a"), **quiet)
    killed = fit(small_run(small_planted, tmp_path / "b"), stop_after_epoch=1, **quiet)
    assert killed.stopped_early and len(killed.history) == 1
    after_one = {k: v.clone() for k, v in killed.model.state_dict().items()}
    resumed = fit(small_run(small_planted, tmp_path / "b"), resume=True, **quiet)  # a new model, state from disk only
    assert states_equal(straight.model, resumed.model) and straight.history == resumed.history
    # the timings of every epoch, the killed process's first one carried in last.pt (issue 30)
    epochs = straight.history[-1]["epoch"]
    assert len(straight.epoch_seconds) == len(resumed.epoch_seconds) == epochs > 1
    assert resumed.epoch_seconds[0] == killed.epoch_seconds[0] and all(s > 0 for s in resumed.epoch_seconds)
    again = fit(small_run(small_planted, tmp_path / "c"), stop_after_epoch=1, **quiet)
    assert all(again.model.state_dict()[k].equal(v) for k, v in after_one.items())  # same seed, same weights
    other = fit(small_run(small_planted, tmp_path / "d", seed=1), stop_after_epoch=1, **quiet)
    assert not all(other.model.state_dict()[k].equal(v) for k, v in after_one.items())
    with pytest.raises(TrainError, match=r"settings changed \(lr: 0.05 -> 0.01\).*new --out"):
        fit(small_run(small_planted, tmp_path / "b", lr=0.01), resume=True, **quiet)
    with pytest.raises(TrainError, match="--resume to continue it or --overwrite"):
        fit(small_run(small_planted, tmp_path / "b"), **quiet)


def test_bad_input_is_refused_with_what_to_pass(small_planted, tmp_path):
    with pytest.raises(TrainError, match="cannot train on 'nope'.*--train-split"):
        fit(small_run(small_planted, tmp_path / "e", train_split="nope"))
    with pytest.raises(TrainError, match="no 'held' split.*--holdout train:0.1:val"):
        fit(small_run(small_planted, tmp_path / "f", val_split="held"))
    only_own = compose_planted(tmp_path / "own", per_class=8, majority=1.0, holdout=0.25)
    with pytest.raises(GroupMetadataError, match=r"train split has no sample of the groups \['paired\|.*--select mean"):
        fit(
            small_run(only_own, tmp_path / "g", epochs=1, select="worst-group", train_split="test", val_split="train"),
            announce=lambda _: None,
        )
