"""Predictions made anywhere (JAX, TensorFlow, a VLM, a spreadsheet), scored by the toolkit
(`hsi.score`, `hsi eval DATA --predictions FILE`).

The predictions name each sample by its key and give its class (an ImageNet index or a wnid),
optionally its top-5 and probabilities. The data's shards are verified by their sha256 and read for
their metadata only, each key is matched to its sample, and from there the rows are the rows a
model run writes (`predict.scored_row`), analysed by the same `analyse`: the same metrics, reports
and plots as `hsi eval` gives the model that made them.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path

from builder import __version__
from builder.core.errors import InputError, printable
from builder.core.owned import OwnedFolder
from builder.core.untrusted import read_parquet

from .bootstrap import BootstrapSettings
from .eval_folder import EVAL_KIND, ModelFolder
from .models import sha256_of
from .predictions import IMAGENET_CLASSES, PREDICTIONS_NAME, write_predictions

WHAT = "predictions file"
PROBABILITY_FIELDS = ("prob_label", "prob_background_class", "prob_paired_class")
NO_TOP5_NOTE = "the predictions give no top-5: top-5 counts the predicted class only (top-5 = top-1)"


class Evaluation:
    """One scored set of predictions: the report `hsi eval` builds, with its tables as DataFrames,
    and `save` to write the files `hsi eval` writes for a model."""

    def __init__(self, report: dict, rows: list[dict], errors: list[dict], metadata: dict, bootstrap):
        self.report = report
        self._rows, self._errors, self._metadata, self._bootstrap = rows, errors, metadata, bootstrap

    def to_dict(self) -> dict:
        """The eval.json payload."""
        return self.report

    @property
    def metrics(self) -> dict:
        """The numbers of eval.json's `metrics`: top-1 and top-5 by group x size, group, size, tier and
        more, each with its bootstrap interval."""
        return self.report["metrics"]

    @property
    def worst_group(self) -> dict | None:
        """The group of lowest top-1 with its interval ({group, value, low, high}), None without groups."""
        return (self.metrics.get("groups_summary") or {}).get("worst_group")

    def table(self, metric: str = "top1"):
        """The group x size table of `metric` (top1 or top5) as a DataFrame: groups as rows, sizes as columns."""
        import pandas as pd

        cells = self.metrics.get("by_group_size") or []
        frame = pd.DataFrame([{"group": c["group"], "size": c["size"], metric: c[metric]["value"]} for c in cells])
        if frame.empty:
            return frame
        return frame.pivot(index="group", columns="size", values=metric).reindex(
            index=list(dict.fromkeys(c["group"] for c in cells)), columns=list(dict.fromkeys(c["size"] for c in cells))
        )

    def save(self, directory: Path, name: str = "") -> Path:
        """predictions.parquet, eval.json, eval.md and plots/ into `directory` (an `hsi eval` output
        folder, claimed as one), in its model folder `name` ("" for its root); returns that folder."""
        from .pipeline import analyse

        with OwnedFolder(Path(directory), EVAL_KIND) as owned:
            folder = ModelFolder(owned, name)
            folder.check_writable(PREDICTIONS_NAME)
            with folder.writing(PREDICTIONS_NAME) as path:
                write_predictions(path, self._rows, self._errors, self._metadata)
            self.report = analyse(folder.path / PREDICTIONS_NAME, folder, self._bootstrap)
            return folder.path


def score(
    predictions,
    data,
    *,
    config: str | None = None,
    split: str | None = None,
    bootstrap: BootstrapSettings | None = None,
    announce: Callable[[str], None] = print,
) -> Evaluation:
    """Score `predictions` (a DataFrame, or a CSV or parquet file) on `data` (a release folder, a
    composed dataset folder or hf://): the metrics `hsi eval` gives the model that made them."""
    from .pipeline import analyse

    bootstrap = bootstrap or BootstrapSettings()
    given, spec, checkpoint = _given(predictions)
    plan, split = _plan(data, config, split, announce)
    samples, errors = plan.dataset.records()
    rows = _rows(given, samples, errors, plan.wnids, spec)
    metadata = _metadata(plan, data, split, spec, checkpoint, top5=given["top5"] is not None)
    with tempfile.TemporaryDirectory(prefix="hsi-score-") as tmp:
        path = write_predictions(Path(tmp) / PREDICTIONS_NAME, rows, errors, metadata)
        report = analyse(path, Path(tmp), bootstrap)
    return Evaluation(report, rows, errors, metadata, bootstrap)


def _plan(data, config, split, announce):
    """The data's split, its shards proved by sha256 as `hsi eval` proves them."""
    from .data import EvalBatches, SourceSplit, default_split, read_dataset_manifest
    from .labels import config_wnids, resolve_label_space
    from .models import Preprocessing
    from .predict import RunPlan, verify_plan

    split = split or default_split(data, config)
    where = SourceSplit(data, config, split)
    manifest = read_dataset_manifest(where)
    wnids = config_wnids(manifest)
    plan = RunPlan(EvalBatches(where, Preprocessing(), 1), manifest, wnids, resolve_label_space(1000, None, wnids))
    verify_plan(plan, split, None, announce)
    return plan, split


def _metadata(plan, data, split: str, spec: str, checkpoint: tuple[str | None, str | None], top5: bool) -> dict:
    from .predict import source_display_name

    return {
        "model": {
            "spec": spec,
            "checkpoint": checkpoint[0],
            "checkpoint_sha256": checkpoint[1],
            "declared_classes": None,
        },
        "preprocessing": {"description": "made by whoever made the predictions (not known here)", "cropped": False},
        "label_space": plan.space.to_json(),
        "data": {
            "source": source_display_name(data),
            "config": plan.manifest.get("config"),
            "split": split,
            "fingerprint": plan.manifest.get("fingerprint"),
            "num_samples": plan.dataset.num_samples,
            "limit": None,
            "partial": False,
            "verified": plan.verified,
        },
        "run": {"scored_from": spec},
        "toolkit": {"name": "hard-spurious-imagenet", "version": __version__},
        "notes": [] if top5 else [NO_TOP5_NOTE],
    }


def _rows(given: dict, samples: list[dict], errors: list[dict], wnids, spec: str) -> list[dict]:
    """The prediction row of every sample, or one line naming the first key without its sample or
    the first sample without its prediction."""
    from .predict import scored_row

    index = given["index"]
    known = {s["key"] for s in samples} | {e["key"] for e in errors if e.get("key") is not None}
    unknown = [key for key in index if key not in known]
    if unknown:
        raise InputError(
            f"{spec}: key {printable(unknown[0])} names no sample of this data"
            + (f" ({len(unknown)} such keys)" if len(unknown) > 1 else "")
        )
    missing = [s["key"] for s in samples if s["key"] not in index]
    if missing:
        raise InputError(
            f"{spec}: no prediction for sample {printable(missing[0])}"
            + (f" ({len(missing)} samples have none)" if len(missing) > 1 else "")
        )
    rows = []
    for sample in samples:
        at = index[sample["key"]]
        top = given["top5"][at] if given["top5"] is not None else [given["pred"][at]]
        top_probs = given["top5_prob"][at] if given["top5_prob"] is not None else None
        row = scored_row(sample, wnids, top, top_probs, lambda _: None)
        for name in PROBABILITY_FIELDS:
            if given[name] is not None:
                row[name] = given[name][at]
        rows.append(row)
    rows.sort(key=lambda r: r["key"])
    return rows


def _given(predictions) -> tuple[dict, str, tuple[str | None, str | None]]:
    """The predictions checked: ({index: key -> row, pred, top5, top5_prob, prob_*}, the spec the
    reports name them by, (file name, sha256))."""
    import pandas as pd

    if isinstance(predictions, pd.DataFrame):
        frame, spec, checkpoint = predictions, "predictions:DataFrame", (None, None)
    else:
        path = Path(predictions)
        spec = f"predictions:{printable(path.name)}"
        if not path.is_file():
            raise InputError(f"{printable(str(path))}: no such {WHAT}")
        if path.suffix.lower() == ".csv":
            try:
                frame = pd.read_csv(path, dtype=str, keep_default_na=False)
            except (ValueError, UnicodeDecodeError) as error:
                raise InputError(
                    f"{printable(str(path))}: not a readable CSV ({printable(str(error))[:120]})"
                ) from None
        elif path.suffix.lower() == ".parquet":
            frame = read_parquet(path, WHAT).to_pandas()
        else:
            raise InputError(f"{printable(str(path))}: a {WHAT} is a .csv or .parquet file")
        checkpoint = (printable(path.name), sha256_of(path))
    return _checked(frame, spec), spec, checkpoint


def _checked(frame, spec: str) -> dict:
    columns = set(frame.columns)
    if "key" not in columns:
        raise InputError(f"{spec}: no column key (the sample key each prediction is for)")
    kinds = [name for name in ("pred_class", "pred_wnid") if name in columns]
    if len(kinds) != 1:
        raise InputError(f"{spec}: give the predicted class as one column, pred_class (0-999) or pred_wnid")
    keys = [_key(value, n, spec) for n, value in enumerate(frame["key"])]
    index: dict[str, int] = {}
    for n, key in enumerate(keys):
        if key in index:
            raise InputError(f"{spec}: key {printable(key)} appears twice (rows {index[key]} and {n})")
        index[key] = n
    where = [f"{spec}: row {n} ({printable(key)})" for n, key in enumerate(keys)]
    by_wnid = kinds[0] == "pred_wnid"
    pred = [_class(value, by_wnid, f"{where[n]}: {kinds[0]}") for n, value in enumerate(frame[kinds[0]])]
    top5_column = next((name for name in ("top5_class", "top5_wnid") if name in columns), None)
    top5 = None
    if top5_column is not None:
        top5 = []
        for n, value in enumerate(frame[top5_column]):
            what = f"{where[n]}: {top5_column}"
            classes = [_class(item, top5_column == "top5_wnid", what) for item in _items(value)]
            if not 1 <= len(classes) <= 5:
                raise InputError(f"{what} lists {len(classes)} classes; top-5 lists 1 to 5")
            if classes[0] != pred[n]:
                raise InputError(f"{what}: its first class {classes[0]} is not the predicted class {pred[n]}")
            top5.append(classes)
    given = {"index": index, "pred": pred, "top5": top5, "top5_prob": None}
    if "top5_prob" in columns:
        given["top5_prob"] = [
            [_probability(p, f"{where[n]}: top5_prob") for p in _items(value)]
            for n, value in enumerate(frame["top5_prob"])
        ]
    for name in PROBABILITY_FIELDS:
        given[name] = None
        if name in columns:
            given[name] = [_probability(v, f"{where[n]}: {name}", empty=True) for n, v in enumerate(frame[name])]
    return given


def _key(value, n: int, spec: str) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(f"{spec}: row {n} has no key (got {printable(repr(value))[:60]})")
    return value


def _items(value) -> list:
    """A list cell: a list or array as it is, a text split on ';'."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(";") if item.strip()]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return list(value)


def _class(value, by_wnid: bool, what: str) -> int:
    """An ImageNet class index from an index 0-999 or a wnid, or one line naming the value."""
    from builder.core.classes import class_of, is_known_wnid

    if by_wnid:
        if not isinstance(value, str) or not is_known_wnid(value.strip()):
            raise InputError(f"{what}: {printable(repr(value))[:60]} is not an ImageNet-1k wnid")
        return class_of(value.strip()).index
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number == int(number) and 0 <= number < IMAGENET_CLASSES):
        raise InputError(f"{what}: {printable(repr(value))[:60]} is not an ImageNet class index 0-999")
    return int(number)


def _probability(value, what: str, empty: bool = False) -> float | None:
    if empty and (value is None or value == "" or (isinstance(value, float) and math.isnan(value))):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and 0 <= number <= 1):
        raise InputError(f"{what}: {printable(repr(value))[:60]} is not a probability in [0, 1]")
    return number


__all__ = ["Evaluation", "score"]
