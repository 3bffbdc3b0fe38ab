"""JTT's upsampling: each error sample appears 1 + lambda_up times per epoch, the others once."""

from __future__ import annotations

from collections import Counter

import pytest

from evaluation.model_formats.models import Preprocessing
from evaluation.predicting.data import SourceSplit
from training.data import TrainSamples
from training.loop import TrainError
from training.methods.jtt import error_set_summary, upsample_counts


def test_error_samples_appear_one_plus_lambda_times(small_planted):
    plain = TrainSamples(
        SourceSplit(str(small_planted), None, "train"), Preprocessing((64, 64)), seed=0, shuffle_buffer=50
    )
    keys = [s["key"] for s in plain]
    errors = keys[::7]
    repeated = TrainSamples(
        SourceSplit(str(small_planted), None, "train"),
        Preprocessing((64, 64)),
        seed=0,
        shuffle_buffer=50,
        repeats=upsample_counts(errors, 5),
    )
    counts = Counter(s["key"] for s in repeated)
    assert set(counts) == set(keys)
    assert all(counts[k] == (6 if k in errors else 1) for k in keys)
    assert len(keys) == len(set(keys))


def test_error_set_summary_and_bad_lambda():
    summary = error_set_summary({"b": "own|x", "a": "paired|x", "c": "paired|x"}, 20, "train-pass")
    assert summary["size"] == 3 and summary["groups"] == {"own|x": 1, "paired|x": 2}
    assert summary["keys"] == ["a", "b", "c"]
    with pytest.raises(TrainError, match="--jtt-upweight"):
        upsample_counts(["a"], -1)
