"""The options a model is loaded with in one run: a zero-shot spec's text classifiers depend on the
data (their classes are the data's, unless `--classes` names others) and are built on the run's
device, so a spec's options are completed from the run before loading. Other specs load as given.
"""

from __future__ import annotations

from dataclasses import replace

from evaluation.model_formats.labels import config_wnids
from evaluation.model_formats.models import ModelOptions, is_zero_shot_spec
from evaluation.predicting.data import SourceSplit, read_dataset_manifest


def options_for_run(
    spec: str, options: ModelOptions, source, config: str | None, split: str, device: str
) -> ModelOptions:
    """`options` with the data's classes and the device, for a zero-shot `spec`; as given otherwise."""
    if not is_zero_shot_spec(spec):
        return options
    wnids = config_wnids(read_dataset_manifest(SourceSplit(source, config, split)))
    return replace(options, data_classes=tuple(wnids), device=device)
