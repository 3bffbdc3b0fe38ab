"""`hsi scgs --predictions`: M read from an `hsi eval` predictions table of the same model."""

from __future__ import annotations

from pathlib import Path

import pytest
from scgs_factory import scgs_command

from builder.augment.source import open_source
from builder.core.classes import class_of
from builder.core.manifest import Manifest
from evaluation.model_formats.labels import config_wnids
from evaluation.model_formats.models import sha256_of
from evaluation.predicting.predictions import write_predictions
from hsi.cli import main

pytest.importorskip("diffusers")


def write_table(path: Path, source_dir: Path, checkpoint_sha256: str) -> int:
    """A predictions table of the train split in which every third sample is predicted wrong."""
    source = open_source(source_dir)
    wnids = config_wnids(source.manifest.to_json())
    rows, wrong = [], 0
    for i, sample in enumerate(source.samples()):
        predicted = (sample.label + 1) % len(wnids) if i % 3 == 0 else sample.label
        wrong += predicted != sample.label
        rows.append(
            {
                "key": sample.key,
                "status": "ok",
                "label_class": class_of(wnids[sample.label]).index,
                "pred_class": class_of(wnids[predicted]).index,
                "meta": sample.meta,
            }
        )
    write_predictions(path, rows, [], {"model": {"checkpoint_sha256": checkpoint_sha256}})
    return wrong


def test_misclassified_set_from_a_predictions_table(planted_source, erm_checkpoint, tiny_pipeline, tmp_path):
    table = tmp_path / "predictions.parquet"
    wrong = write_table(table, planted_source, sha256_of(erm_checkpoint))
    command = scgs_command(planted_source, tmp_path / "out", erm_checkpoint, tiny_pipeline, "--predictions", str(table))
    assert main(command) == 0
    summary = Manifest.read(tmp_path / "out" / "planted-spurious-scgs").augment
    assert summary["misclassified_from"] == "predictions" and summary["misclassified"] == wrong
    assert summary["train_samples"] == Manifest.read(planted_source).split("train").num_samples


def test_predictions_of_another_model_are_refused(planted_source, erm_checkpoint, tiny_pipeline, tmp_path, capsys):
    table = tmp_path / "predictions.parquet"
    write_table(table, planted_source, "0" * 64)
    command = scgs_command(planted_source, tmp_path / "out", erm_checkpoint, tiny_pipeline, "--predictions", str(table))
    assert main(command) != 0
    assert "were made with weights 000000000000" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
