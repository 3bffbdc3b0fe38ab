"""Evaluation: model specs -> predictions.parquet -> metrics with bootstrap intervals over source
images -> eval.json, eval.md, plots, leaderboards (and the card's results section), and the bias
probes (`probes/`). It measures only: training lives in the `training` package.

One subpackage a job, each importing only those below it (an import-linter contract):
`zero_shot` (CLIP-style specs, text classifiers) <- `model_formats` (a spec -> a classifier) <-
`predicting` (predictions.parquet) <- `analysis` (metrics, eval.json, plots) <- `ranking` (entries,
leaderboards) <- `orchestration` (whole evaluations: `hsi eval`, `hsi.evaluate`, `hsi.score`,
`hsi leaderboard verify`) <- `probes`.

Every analysis reads predictions only, so it can be recomputed without the model."""
