"""Predicting: one row per sample in `predictions.parquet`, the only input of every analysis.

`data` reads a split through the training reader, preprocessed and batched; `verified_shards` proves
each shard by its manifest's sha256 first; `predict` runs a model over the batches into rows;
`extra_sets` classifies the clean photos and the backgrounds alone beside the composites; `given`
turns predictions made outside the toolkit into the same rows; `predictions` writes and reads the
table. Builds on `model_formats`; knows nothing of metrics or reports.
"""
