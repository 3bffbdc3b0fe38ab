"""Evaluation: model specs -> predictions.parquet -> metrics with bootstrap intervals over source
images -> eval.json, eval.md, plots, leaderboards (and the card's results section), and the bias
probes (`probes/`). It measures only: training lives in the `training` package.

Every analysis reads predictions only, so it can be recomputed without the model."""
