"""Predictions made anywhere (JAX, TensorFlow, a VLM, a spreadsheet), scored by the toolkit:
`hsi.open(source)` gives one split as a `Dataset` (its samples' metadata as a DataFrame, its groups,
`.eval(predictions)`), and `hsi.score(predictions, data)` is the same in one call (the CLI form is
`hsi eval DATA --predictions FILE`).

The data's shards are verified by their sha256, as `hsi eval` verifies them, and read for their
metadata only; each prediction is matched to its sample by key (or by order, for an array), and
from there the rows are the rows a model run writes (`predict.scored_row`), analysed by the same
`analyse`: the same metrics, reports and plots as `hsi eval` gives the model that made them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from builder import __version__
from builder.core.errors import UsageError
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.model_formats.declared import declared_preprocessing, unknown_preprocessing
from evaluation.predicting.given import GivenPredictions, prediction_rows, read_array, read_table
from evaluation.predicting.predictions import PREDICTIONS_NAME, write_predictions

from .result import Evaluation

NO_TOP5_NOTE = "the predictions give no top-5: top-5 counts the predicted class only (top-5 = top-1)"


class Dataset:
    """One split of a Hard-Spurious-ImageNet source opened for evaluation (`hsi.open`).

    `source` is a release folder (pick its `config`, default: the release's default), a composed
    dataset folder, or `hf://datasets/OWNER/NAME[@REVISION]`; `split` defaults to test when there
    is one, else the first. Nothing is read but the manifest until the samples are needed; then
    every shard is verified by its sha256 once, and its samples' metadata kept (never the images).
    `limit` keeps the first `limit` samples in manifest order, the ones `hsi eval --limit` reads.
    """

    def __init__(
        self, source, config: str | None = None, split: str | None = None, announce=print, limit: int | None = None
    ):
        from evaluation.model_formats.labels import config_wnids
        from evaluation.predicting.data import SourceSplit, default_split, read_dataset_manifest

        self.source = source
        self.split = split or default_split(source, config)
        self._where = SourceSplit(source, config, self.split)
        self.manifest = read_dataset_manifest(self._where)
        self.wnids = config_wnids(self.manifest)
        self._requested_config = config
        self._announce = announce
        self.limit = limit
        self._plan = None
        self._records: tuple[list[dict], list[dict]] | None = None

    def __repr__(self) -> str:
        return f"<Dataset {self.config}/{self.split}: {len(self)} samples from {self.source}>"

    @property
    def config(self) -> str:
        return str(self.manifest.get("config"))

    @property
    def fingerprint(self) -> str | None:
        return self.manifest.get("fingerprint")

    def __len__(self) -> int:
        split = (self.manifest.get("splits") or {}).get(self.split) or {}
        return int(split.get("num_samples") or 0)

    def _verified(self):
        """The run plan with every shard proved by sha256 (once), and the samples' records."""
        from evaluation.model_formats.labels import resolve_label_space
        from evaluation.model_formats.models import Preprocessing
        from evaluation.predicting.data import EvalBatches
        from evaluation.predicting.predict import RunPlan, verify_plan

        if self._records is None:
            dataset = EvalBatches(self._where, Preprocessing(), 1, self.limit)
            plan = RunPlan(dataset, self.manifest, self.wnids, resolve_label_space(1000, None, self.wnids))
            verify_plan(plan, self.split, self.limit, self._announce)
            self._plan, self._records = plan, dataset.records()
        return self._plan, self._records

    @property
    def shard_files(self) -> list[str]:
        """The shards read, each proved by its sha256 (for a hub source, the checked cached copies)."""
        return list(self._verified()[0].dataset.stream.shards)

    @property
    def samples(self) -> list[dict]:
        """Each readable sample's record: key, shard, cls and its json metadata (`meta`)."""
        return self._verified()[1][0]

    @property
    def errors(self) -> list[dict]:
        """The samples (or shards) that could not be read, each with its reason."""
        return self._verified()[1][1]

    @property
    def keys(self) -> list[str]:
        """The sample keys, in the order an array of predictions is read in (`eval(array)`)."""
        return [sample["key"] for sample in self.samples]

    @property
    def metadata(self):
        """The samples' metadata as a DataFrame, one row a sample in `keys` order: key, shard, cls,
        and every field of its json (wnid, class_name, group, size, position, tier, background,
        background_class_index, source_id, box_x/y/w/h, ...)."""
        import pandas as pd

        return pd.DataFrame(
            [{"key": s["key"], "shard": s["shard"], "cls": s["cls"], **s["meta"]} for s in self.samples]
        )

    @property
    def groups(self) -> list[str]:
        """The groups this split holds (CeO, CoO, CeR, CoR in the paper's order), [] without group metadata."""
        from evaluation.analysis.metrics import group_sort_key

        found = {s["meta"].get("group") for s in self.samples} - {None}
        return sorted(found, key=group_sort_key)

    def stream(self, **options):
        """The split as a training stream (`hsi.stream(source, config, split, **options)`)."""
        from builder.formats.stream import stream

        return stream(self.source, self._requested_config, self.split, **options)

    def eval(
        self,
        predictions,
        *,
        outputs: str | None = None,
        bootstrap: BootstrapSettings | None = None,
        preprocessing: str | Mapping | None = None,
    ) -> Evaluation:
        """Score `predictions`: a DataFrame or a .csv/.parquet file keyed by sample (its columns:
        the evaluate guide's "From Python"), or an array in `keys` order: (N,) class indices or (N, 1000) scores
        (`outputs`: "probabilities" or "logits"; by default rows that are non-negative and sum to 1
        are probabilities, others logits).

        `preprocessing` declares how the images were prepared for the model that made them, as
        `hsi eval --preprocessing` does: "resize=256,crop_pct=0.875,size=224,..." or a mapping of
        resize, crop_pct, size, interpolation, mean, std. It is recorded as declared, not checked;
        without it the preprocessing is recorded as unknown."""
        import numpy as np
        import pandas as pd

        declared = preprocessing_section(preprocessing)  # refused before any shard is read
        if isinstance(predictions, (pd.DataFrame, str, Path)):
            if outputs is not None:
                raise UsageError("outputs= is for an array of scores, not a table of predictions")
            given = read_table(predictions)
        elif isinstance(predictions, (np.ndarray, list, tuple)) or hasattr(predictions, "__array__"):
            given = read_array(predictions, self.keys, outputs)
        else:
            raise UsageError(
                f"predictions are a DataFrame, a .csv/.parquet path or an array, not a {type(predictions).__name__}"
            )
        return self._score(given, bootstrap or BootstrapSettings(), declared)

    def _score(self, given: GivenPredictions, bootstrap: BootstrapSettings, preprocessing: dict) -> Evaluation:
        from .pipeline import analyse

        plan, (samples, errors) = self._verified()
        rows = prediction_rows(given, samples, errors, plan.wnids)
        metadata = self._metadata(plan, given, preprocessing)
        with tempfile.TemporaryDirectory(prefix="hsi-score-") as tmp:
            path = write_predictions(Path(tmp) / PREDICTIONS_NAME, rows, errors, metadata)
            report = analyse(path, Path(tmp), bootstrap)
        return Evaluation(report, rows, errors, metadata, bootstrap)

    def _metadata(self, plan, given: GivenPredictions, preprocessing: dict) -> dict:
        from evaluation.predicting.predict import is_partial, source_display_name

        notes = [] if given.has_top5 else [NO_TOP5_NOTE]
        if given.note:
            notes.append(given.note)
        space, answers = plan.space.to_json(), {}
        if given.texts is not None:  # answers in words, mapped into the data's classes
            from evaluation.predicting.text_answers import ANSWERS_NOTE, answer_space, answers_record
            from evaluation.zero_shot.answers import AnswerVocabulary

            space = answer_space(plan.wnids).to_json()
            answers = {"answers": answers_record(AnswerVocabulary(plan.wnids), None, f"the pred_text of {given.spec}")}
            notes.append(ANSWERS_NOTE)
        return {
            "model": {
                "spec": given.spec,
                "checkpoint": given.checkpoint[0],
                "checkpoint_sha256": given.checkpoint[1],
                "declared_classes": None,
                "identity": None,  # predictions made elsewhere: the model is not known here
            },
            "preprocessing": preprocessing,
            "label_space": space,
            "data": {
                "source": source_display_name(self.source),
                "config": plan.manifest.get("config"),
                "split": self.split,
                "fingerprint": plan.manifest.get("fingerprint"),
                "num_samples": plan.dataset.num_samples,
                "limit": self.limit,
                "partial": is_partial(self.limit, plan.dataset.num_samples),
                "verified": plan.verified,
            },
            "run": {"scored_from": given.spec},
            "toolkit": {"name": "hard-spurious-imagenet", "version": __version__},
            "notes": notes,
            **answers,
        }


def preprocessing_section(declaration: str | Mapping | None, flag: str = "preprocessing=") -> dict:
    """The preprocessing section of scored predictions: what their maker declares (checked field by
    field, recorded as declared), else unknown."""
    if declaration is None:
        return unknown_preprocessing()
    return declared_preprocessing(declaration, flag)


def open_dataset(
    source, config: str | None = None, split: str | None = None, announce: Callable[[str], None] = print
) -> Dataset:
    """One split of a release folder, a composed dataset folder or hf://, for evaluation (`hsi.open`)."""
    return Dataset(source, config, split, announce)


def score(
    predictions,
    data,
    *,
    config: str | None = None,
    split: str | None = None,
    outputs: str | None = None,
    bootstrap: BootstrapSettings | None = None,
    preprocessing: str | Mapping | None = None,
    announce: Callable[[str], None] = print,
) -> Evaluation:
    """Score `predictions` (a DataFrame, a .csv or .parquet file, or an array in the data's key
    order) on `data` (a `Dataset` from `hsi.open`, a release folder, a composed dataset folder or
    hf://): the metrics `hsi eval` gives the model that made them. `preprocessing` declares how
    their images were prepared (see `Dataset.eval`); without it, it is recorded as unknown."""
    preprocessing_section(preprocessing)  # a bad declaration is refused before the data is opened
    if isinstance(data, Dataset):
        if config is not None or split is not None:
            raise UsageError("an opened Dataset has its config and split: pass config= and split= to hsi.open")
        return data.eval(predictions, outputs=outputs, bootstrap=bootstrap, preprocessing=preprocessing)
    dataset = Dataset(data, config, split, announce)
    return dataset.eval(predictions, outputs=outputs, bootstrap=bootstrap, preprocessing=preprocessing)


__all__ = ["Dataset", "Evaluation", "open_dataset", "preprocessing_section", "score"]
