"""M: the train samples whose top-1 prediction is wrong, with their true and predicted labels,
from the ERM model itself or from a predictions table of the same model (`hsi eval`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from builder.augment.classifier import ScgsClassifier, predict_labels
from builder.augment.sampling import Misclassified
from builder.augment.source import SourceConfig
from builder.core.errors import InputError
from builder.core.runner import report_progress


class PredictionsMismatch(InputError):
    """The predictions table is not of this config's train split."""


@dataclass(frozen=True)
class PredictedRow:
    """One row of a predictions table, in the config's labels."""

    key: str
    label: int
    predicted: int


@dataclass(frozen=True)
class TrainPredictions:
    misclassified: list[Misclassified]
    train_samples: int
    source: str  # "classifier" or "predictions"

    @property
    def accuracy(self) -> float:
        return 1 - len(self.misclassified) / self.train_samples if self.train_samples else 0.0


def misclassified_from_classifier(
    source: SourceConfig, classifier: ScgsClassifier, batch_size: int
) -> TrainPredictions:
    """The classifier's top-1 on every train sample, in batches (images are not kept)."""
    wrong: list[Misclassified] = []
    total = 0
    pending: list = []

    def flush() -> None:
        if not pending:
            return
        predicted = predict_labels(classifier, np.stack([s.pixels for s in pending]), batch_size)
        wrong.extend(Misclassified(s.key, s.shard, s.label, int(p)) for s, p in zip(pending, predicted) if p != s.label)
        report_progress(len(pending))
        pending.clear()

    for sample in source.train_samples():
        total += 1
        pending.append(sample)
        if len(pending) >= batch_size:
            flush()
    flush()
    return TrainPredictions(wrong, total, "classifier")


def misclassified_from_predictions(source: SourceConfig, rows: Sequence[PredictedRow]) -> TrainPredictions:
    """M from a table: it must hold exactly the train split's keys, with the same labels."""
    by_key: dict[str, PredictedRow] = {}
    for row in rows:
        if row.key in by_key:
            raise PredictionsMismatch(
                f"the predictions table has two rows for sample {row.key}: pass the predictions.parquet of one "
                f"`hsi eval {source.folder} --split train` run, unedited"
            )
        by_key[row.key] = row
    train = {s.key: (s.shard, s.label) for s in source.train_samples()}
    missing = sorted(set(train) - set(by_key))
    extra = sorted(set(by_key) - set(train))
    if missing or extra:
        raise PredictionsMismatch(
            f"the predictions table does not match {source.config}'s train split: {len(missing)} of its "
            f"{len(train)} samples have no row"
            + (f" (first: {missing[0]})" if missing else "")
            + f", {len(extra)} rows are of other samples"
            + (f" (first: {extra[0]})" if extra else "")
            + f"; run `hsi eval {source.folder} --split train` with the same model and pass its predictions.parquet"
        )
    relabelled = [key for key, (_, label) in train.items() if by_key[key].label != label]
    if relabelled:
        raise PredictionsMismatch(
            f"the predictions table gives other labels than {source.config}'s train split for {len(relabelled)} "
            f"samples (first: {relabelled[0]}); it was made on another config"
        )
    wrong = [
        Misclassified(key, shard, label, by_key[key].predicted)
        for key, (shard, label) in sorted(train.items())
        if by_key[key].predicted != label
    ]
    return TrainPredictions(wrong, len(train), "predictions")
