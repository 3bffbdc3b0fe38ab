"""The proof in small: on a planted spurious set, DFR and JTT each beat ERM's worst-group accuracy.

The set (tests/planted_spurious.py, the toolkit's own compose stage): 4 classes, a 32 px canvas,
16 px objects whose red tells the class (steps of 30), flat backgrounds whose colour tells it too;
train 80% on the own class's background (about 5 minority samples per class: with 90%, JTT's error
set missed whole minority groups in 1 of 3 seeds), val (half of train's photos) and test balanced.
timm's tiny test_efficientnet from scratch, 8 epochs, one torch thread; DFR retrains the last layer
of this very ERM run; JTT T = 6, lambda_up = 20. Measured with these settings: ERM's worst group 0%
in each of seeds 0-3, DFR's 100% in each, JTT's 54.2, 50.0, 100, 100, 33.3% in seeds 0-4; the
20-point margin asserted here stays clear of all of them (this test runs seed 0).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from planted_spurious import compose_planted

from training.loop import TrainSettings
from training.run import MethodOptions, RunControl, run_seed

MARGIN = 0.2


@pytest.mark.slow
def test_dfr_and_jtt_beat_erm_on_the_worst_group(tmp_path):
    dataset = compose_planted(
        tmp_path / "data", per_class=48, canvas=32, sizes=(16,), step=30, majority=0.8, holdout=0.5
    )
    base = TrainSettings(
        source=str(dataset),
        out=str(tmp_path / "runs"),
        model="test_efficientnet",
        epochs=8,
        batch_size=16,
        lr=0.03,
        weight_decay=1e-4,
        device="cpu",
        shuffle_buffer=512,
        select="mean",
    )
    quiet = RunControl(announce=lambda _: None)
    erm = run_seed(base, MethodOptions("erm"), tmp_path / "erm", quiet)
    dfr = run_seed(base, MethodOptions("dfr", dfr_refits=5, erm_run=tmp_path / "erm"), tmp_path / "dfr", quiet)
    jtt = run_seed(
        replace(base, select="worst-group"),
        MethodOptions("jtt", jtt_epochs=6, jtt_upweight=20),
        tmp_path / "jtt",
        quiet,
    )
    worst = {name: run["test"]["worst_group"] for name, run in (("erm", erm), ("dfr", dfr), ("jtt", jtt))}
    assert worst["erm"] + MARGIN < worst["dfr"], worst
    assert worst["erm"] + MARGIN < worst["jtt"], worst
    assert erm["test"]["mean"] - worst["erm"] >= 0.2, erm["test"]  # the set really is spurious for ERM
    assert dfr["info"]["erm_best_epoch"] == erm["info"]["best_epoch"]  # DFR's backbone is that ERM run
    assert jtt["info"]["error_set_size"] > 0
