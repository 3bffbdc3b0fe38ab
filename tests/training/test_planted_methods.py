"""The planted spurious set, small: DFR and JTT beat ERM's worst-group accuracy (the benchmark's
full version, benchmarks/spurious_methods.py, checks the margins over 3 seeds)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from spurious_methods import QUICK, run_benchmark  # noqa: E402


def test_dfr_and_jtt_beat_erm_on_the_worst_group(tmp_path):
    summaries = run_benchmark(tmp_path, seeds=QUICK["seeds"], epochs=QUICK["epochs"], per_class=QUICK["per_class"],
                              methods=("erm", "jtt", "dfr"))
    worst = {m: s["worst_group"]["mean"] for m, s in summaries.items()}
    assert worst["erm"] < worst["dfr"] and worst["erm"] < worst["jtt"], worst
