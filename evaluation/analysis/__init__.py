"""Analysis: figures from predictions alone, so any of them can be recomputed without the model.

`bootstrap` gives the intervals over source images, `metrics` every accuracy table and summary,
`report` the eval.json and eval.md of one evaluation, `plots` its figures. Nothing here loads a
model or reads the data.
"""
