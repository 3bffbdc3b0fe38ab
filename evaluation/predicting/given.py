"""Predictions given from outside the toolkit, checked and turned into the rows a model run writes.

They come as a table (a DataFrame, a CSV or a parquet file) naming each sample by its `key`, or
as an array in the order of an opened dataset's samples (`hsi.open(...).eval(array)`):

- table columns: `key`; the predicted class as `pred_class` (an ImageNet index 0-999) or
  `pred_wnid`; optionally `top5_class`/`top5_wnid` (a list, or `;`-separated text, best first),
  `top5_prob`, the probabilities `prob_label`, `prob_background_class`, `prob_paired_class`, or a
  whole 1000-way vector per sample in `probs` (parquet or DataFrame only), from which all of those
  follow.
- answers in words: a `pred_text` column (instead of a predicted class), each answer mapped to a
  class of the data's label space by name (predicting.text_answers); an empty or missing answer
  maps to nothing. Non-text cells are refused.
- an array: (N,) predicted class indices, or (N, 1000) scores over the ImageNet classes in index
  order: probabilities when every row is non-negative and sums to 1 (within 1e-3), otherwise
  logits, turned into probabilities by a softmax; `outputs=` says which and is then checked; or
  (N,) answers in words (strings, None for no answer).

Every refusal is one line naming the column, the row and its key.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builder.core.errors import InputError, printable, shown
from builder.core.untrusted import read_parquet

from .predictions import IMAGENET_CLASSES

WHAT = "predictions file"
GIVEN_SPEC_PREFIX = "predictions:"  # how reports name predictions made outside the toolkit: no model ran here
PROBABILITY_FIELDS = ("prob_label", "prob_background_class", "prob_paired_class")
ARRAY_OUTPUTS = ("logits", "probabilities")
SUMS_TO_ONE = 1e-3  # float32 softmax rows sum to 1 well within this
TOP5_SUM_SLACK = 1e-6  # five probabilities of one distribution sum to at most 1, give or take rounding
# What a number written as text may look like: ASCII digits only (no `_`, no other scripts' digits).
INTEGER_TEXT = re.compile(r"[0-9]+")
DECIMAL_TEXT = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


@dataclass
class GivenPredictions:
    """Checked predictions: by sample key, the predicted class, the top-5 (None: not given) and the
    probabilities that were given (a 1000-way `vectors` array gives them all)."""

    spec: str  # how reports name them: predictions:FILE, predictions:DataFrame, predictions:array
    index: dict[str, int]  # key -> row
    pred: list[int]
    top5: list[list[int]] | None = None
    top5_prob: list[list[float]] | None = None
    fields: dict[str, list[float | None]] | None = None  # PROBABILITY_FIELDS given as columns
    vectors: np.ndarray | None = None  # N x 1000 probabilities
    checkpoint: tuple[str | None, str | None] = (None, None)  # (file name, sha256)
    note: str | None = None  # how an array was read (logits or probabilities)
    texts: list[str | None] | None = None  # answers in words, mapped to classes when the data is known

    @property
    def has_top5(self) -> bool:
        return self.top5 is not None or self.vectors is not None


def read_table(predictions) -> GivenPredictions:
    """A DataFrame, or a .csv or .parquet file of predictions, checked."""
    import pandas as pd

    from evaluation.model_formats.models import sha256_of

    if isinstance(predictions, pd.DataFrame):
        return checked_table(predictions, f"{GIVEN_SPEC_PREFIX}DataFrame")
    path = Path(predictions)
    spec = f"{GIVEN_SPEC_PREFIX}{printable(path.name)}"
    if not path.is_file():
        raise InputError(f"{printable(str(path))}: no such {WHAT}")
    if path.suffix.lower() == ".csv":
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (ValueError, UnicodeDecodeError) as error:
            raise InputError(f"{printable(str(path))}: not a readable CSV ({printable(str(error))[:120]})") from None
        if "probs" in frame.columns:
            raise InputError(f"{spec}: a 1000-way probs column needs parquet or a DataFrame, not CSV")
    elif path.suffix.lower() == ".parquet":
        frame = read_parquet(path, WHAT).to_pandas()
    else:
        raise InputError(f"{printable(str(path))}: a {WHAT} is a .csv or .parquet file")
    given = checked_table(frame, spec)
    given.checkpoint = (printable(path.name), sha256_of(path))
    return given


def checked_table(frame, spec: str) -> GivenPredictions:
    columns = set(frame.columns)
    if "key" not in columns:
        raise InputError(f"{spec}: no column key (the sample key each prediction is for)")
    # rows are counted from 1, as whoever made the file counts its predictions
    keys = [_key(value, n, spec) for n, value in enumerate(frame["key"], start=1)]
    index = keyed(keys, spec)
    where = [f"{spec}: row {n} ({shown(key, quote=False)})" for n, key in enumerate(keys, start=1)]
    if "probs" in columns:
        return _from_vectors(frame, columns, index, where, spec)
    if "pred_text" in columns:
        return _from_texts(frame, columns, index, where, spec)
    kinds = [name for name in ("pred_class", "pred_wnid") if name in columns]
    if len(kinds) != 1:
        raise InputError(
            f"{spec}: give the predicted class as one column, pred_class (0-999) or pred_wnid, or a 1000-way probs, "
            "or answers in words as pred_text"
        )
    by_wnid = kinds[0] == "pred_wnid"
    pred = [_class(value, by_wnid, f"{where[n]}: {kinds[0]}") for n, value in enumerate(frame[kinds[0]])]
    given = GivenPredictions(spec, index, pred)
    top5_column = next((name for name in ("top5_class", "top5_wnid") if name in columns), None)
    if top5_column is not None:
        given.top5 = []
        for n, value in enumerate(frame[top5_column]):
            what = f"{where[n]}: {top5_column}"
            classes = [_class(item, top5_column == "top5_wnid", what) for item in _items(value)]
            if not 1 <= len(classes) <= 5:
                raise InputError(f"{what} lists {len(classes)} classes; top-5 lists 1 to 5")
            if classes[0] != pred[n]:
                raise InputError(f"{what}: its first class {classes[0]} is not the predicted class {pred[n]}")
            given.top5.append(classes)
    if "top5_prob" in columns:
        given.top5_prob = [
            _top5_probabilities([_probability(p, f"{where[n]}: top5_prob") for p in _items(value)], f"{where[n]}")
            for n, value in enumerate(frame["top5_prob"])
        ]
    given.fields = {
        name: [_probability(v, f"{where[n]}: {name}", empty=True) for n, v in enumerate(frame[name])]
        for name in PROBABILITY_FIELDS
        if name in columns
    }
    return given


def _from_vectors(frame, columns: set, index: dict[str, int], where: list[str], spec: str) -> GivenPredictions:
    """A `probs` column of 1000-way probability vectors: everything else follows from it."""
    extra = sorted(columns & {"pred_class", "pred_wnid", "top5_class", "top5_wnid", "top5_prob", *PROBABILITY_FIELDS})
    if extra:
        raise InputError(f"{spec}: probs gives every class's probability; drop {', '.join(extra)}")
    rows = []
    for n, value in enumerate(frame["probs"]):
        vector = np.asarray(_items(value) if isinstance(value, str) else value, dtype=np.float64)
        if vector.shape != (IMAGENET_CLASSES,):
            raise InputError(f"{where[n]}: probs holds {vector.size} values, not one per ImageNet class (1000)")
        rows.append(vector)
    vectors = np.stack(rows) if rows else np.zeros((0, IMAGENET_CLASSES))
    _check_probabilities(vectors, [w + ": probs" for w in where])
    return _vectors_given(spec, index, vectors)


def _from_texts(frame, columns: set, index: dict[str, int], where: list[str], spec: str) -> GivenPredictions:
    """A `pred_text` column of answers in words: the classes follow from mapping them."""
    extra = sorted(columns & {"pred_class", "pred_wnid", "top5_class", "top5_wnid", "top5_prob", *PROBABILITY_FIELDS})
    if extra:
        raise InputError(f"{spec}: pred_text is the answer, mapped to a class by name; drop {', '.join(extra)}")
    texts = [_text(value, f"{where[n]}: pred_text") for n, value in enumerate(frame["pred_text"])]
    return GivenPredictions(spec, index, [], texts=texts)


def _text(value, what: str) -> str | None:
    """An answer as given: text, or None for a missing one (empty, null, NaN); anything else is refused."""
    if isinstance(value, str):
        return value or None
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    raise InputError(f"{what}: {shown(value)} is not text; an answer in words is a string (empty for none)")


def read_array(array, keys: list[str], outputs: str | None = None) -> GivenPredictions:
    """Predictions as an array in the order of `keys` (an opened dataset's samples)."""
    spec = f"{GIVEN_SPEC_PREFIX}array"
    if _is_texts(array):
        if outputs is not None:
            raise InputError(f"{spec}: outputs= is for a (samples, {IMAGENET_CLASSES}) array, not answers in words")
        if len(array) != len(keys):
            raise InputError(
                f"{spec}: {len(array)} answers for {len(keys)} samples; give one a sample, in the dataset's key order"
            )
        texts = [_text(v, f"{spec}: sample {n} ({printable(keys[n])})") for n, v in enumerate(list(array))]
        return GivenPredictions(spec, keyed(keys, spec), [], texts=texts)
    values = np.asarray(array)
    if values.ndim not in (1, 2) or len(values) != len(keys):
        raise InputError(
            f"{spec}: shape {values.shape} for {len(keys)} samples; give (samples,) class indices or "
            f"(samples, {IMAGENET_CLASSES}) scores, in the order of the dataset's keys"
        )
    index = keyed(keys, spec)
    if values.ndim == 1:
        if outputs is not None:
            raise InputError(f"{spec}: outputs= is for a (samples, {IMAGENET_CLASSES}) array, not class indices")
        pred = [_class(v, False, f"{spec}: sample {n} ({printable(keys[n])})") for n, v in enumerate(values.tolist())]
        return GivenPredictions(spec, index, pred)
    if values.shape[1] != IMAGENET_CLASSES:
        raise InputError(f"{spec}: {values.shape[1]} scores a sample; one per ImageNet class ({IMAGENET_CLASSES})")
    if outputs is not None and outputs not in ARRAY_OUTPUTS:
        raise InputError(f"{spec}: outputs must be one of {', '.join(ARRAY_OUTPUTS)}, got {outputs!r}")
    scores = values.astype(np.float64)
    if not np.isfinite(scores).all():
        row = int(np.flatnonzero(~np.isfinite(scores).all(axis=1))[0])
        raise InputError(f"{spec}: sample {row} ({printable(keys[row])}) has a score that is not a finite number")
    looks_like_probabilities = bool(len(scores)) and _are_probabilities(scores)
    if outputs == "probabilities" or (outputs is None and looks_like_probabilities):
        _check_probabilities(scores, [f"{spec}: sample {n} ({printable(keys[n])})" for n in range(len(keys))])
        note = "the array's rows were read as probabilities"
    else:
        shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
        scores = shifted / shifted.sum(axis=1, keepdims=True)
        note = "the array's rows were read as logits (softmax applied)"
    given = _vectors_given(spec, index, scores)
    given.note = note
    return given


def _is_texts(array) -> bool:
    """A one-dimensional sequence whose items are text (or missing): answers in words."""
    if isinstance(array, np.ndarray):
        return array.ndim == 1 and (array.dtype.kind == "U" or (array.dtype.kind == "O" and _has_text(array)))
    return isinstance(array, (list, tuple)) and _has_text(array)


def _has_text(items) -> bool:
    return any(isinstance(item, str) for item in items)


def _vectors_given(spec: str, index: dict[str, int], vectors: np.ndarray) -> GivenPredictions:
    """Predicted class and top-5 (ties to the lower index, as a model run's stable sort) from vectors."""
    top = np.argsort(-vectors, axis=1, kind="stable")[:, :5]
    return GivenPredictions(
        spec,
        index,
        [int(row[0]) for row in top],
        [[int(c) for c in row] for row in top],
        [[float(vectors[n, c]) for c in row] for n, row in enumerate(top)],
        vectors=vectors,
    )


def _are_probabilities(scores: np.ndarray) -> bool:
    return bool((scores >= 0).all() and (np.abs(scores.sum(axis=1) - 1) <= SUMS_TO_ONE).all())


def _check_probabilities(vectors: np.ndarray, where: list[str]) -> None:
    for n, vector in enumerate(vectors):
        if not np.isfinite(vector).all() or (vector < 0).any() or (vector > 1).any():
            raise InputError(f"{where[n]}: a probability is not a number in [0, 1]")
        if abs(float(vector.sum()) - 1) > SUMS_TO_ONE:
            raise InputError(f"{where[n]}: the probabilities sum to {vector.sum():.4f}, not 1")


def keyed(keys: list[str], spec: str) -> dict[str, int]:
    index: dict[str, int] = {}
    for n, key in enumerate(keys):
        if key in index:
            raise InputError(f"{spec}: key {shown(key, quote=False)} appears twice (rows {index[key] + 1} and {n + 1})")
        index[key] = n
    return index


def prediction_rows(given: GivenPredictions, samples: list[dict], errors: list[dict], wnids) -> list[dict]:
    """The prediction row of every sample (sorted by key), or one line naming the first key without
    its sample or the first sample without its prediction."""
    from .predict import scored_row

    known = {s["key"] for s in samples} | {e["key"] for e in errors if e.get("key") is not None}
    unknown = [key for key in given.index if key not in known]
    if unknown:
        raise InputError(
            f"{given.spec}: key {printable(unknown[0])} names no sample of this data"
            + (f" ({len(unknown)} such keys)" if len(unknown) > 1 else "")
        )
    missing = [s["key"] for s in samples if s["key"] not in given.index]
    if missing:
        raise InputError(
            f"{given.spec}: no prediction for sample {printable(missing[0])}"
            + (f" ({len(missing)} samples have none)" if len(missing) > 1 else "")
        )
    if given.texts is not None:
        from evaluation.zero_shot.answers import AnswerVocabulary

        from .text_answers import answer_rows

        ordered = sorted(samples, key=lambda s: s["key"])
        answers = [given.texts[given.index[s["key"]]] for s in ordered]
        return answer_rows(answers, ordered, wnids, AnswerVocabulary(wnids))
    rows = []
    for sample in samples:
        at = given.index[sample["key"]]
        top = given.top5[at] if given.top5 is not None else [given.pred[at]]
        top_probs = given.top5_prob[at] if given.top5_prob is not None else None
        vector = given.vectors[at] if given.vectors is not None else None

        def prob_of(class_index, vector=vector):
            return None if vector is None or class_index is None else float(vector[class_index])

        row = scored_row(sample, wnids, top, top_probs, prob_of)
        for name, values in (given.fields or {}).items():
            row[name] = values[at]
        rows.append(row)
    rows.sort(key=lambda r: r["key"])
    return rows


def _key(value, n: int, spec: str) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(f"{spec}: row {n} has no key (got {shown(value)})")
    return value


def _top5_probabilities(probabilities: list, where: str) -> list:
    """The top-5's probabilities: best first (non-increasing), and at most 1 together (they are five of
    one distribution; TOP5_SUM_SLACK allows for float32 rounding)."""
    for n in range(1, len(probabilities)):
        if probabilities[n] > probabilities[n - 1]:
            raise InputError(
                f"{where}: top5_prob is not best first: {probabilities[n]:.6g} (place {n + 1}) is above "
                f"{probabilities[n - 1]:.6g} (place {n}); list the top-5 in falling order"
            )
    total = math.fsum(probabilities)
    if total > 1 + TOP5_SUM_SLACK:
        raise InputError(f"{where}: top5_prob sums to {total:.6g}, more than 1; give probabilities of one distribution")
    return probabilities


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
            raise InputError(f"{what}: {shown(value)} is not an ImageNet-1k wnid")
        return class_of(value.strip()).index
    number = _integer(value)
    if number is None or not 0 <= number < IMAGENET_CLASSES:
        raise InputError(f"{what}: {shown(value)} is not an ImageNet class index 0-999 (a decimal integer)")
    return number


def _integer(value) -> int | None:
    """An integer as given: an int (never a bool), or text of ASCII digits only. Python's own int()
    and float() take `5_0` as 50, Arabic-Indic digits `١٢` as 12 and True as 1; none of them is a
    class index someone wrote down on purpose."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, str) and INTEGER_TEXT.fullmatch(value):
        return int(value)
    return None


def _number(value) -> float:
    """A real number as given: an int or float (never a bool), or decimal ASCII text; NaN otherwise."""
    if isinstance(value, (bool, np.bool_)):
        return math.nan
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, str) and DECIMAL_TEXT.fullmatch(value):
        return float(value)
    return math.nan


def _probability(value, what: str, empty: bool = False) -> float | None:
    if empty and (value is None or value == "" or (isinstance(value, float) and math.isnan(value))):
        return None
    number = _number(value)
    if not (math.isfinite(number) and 0 <= number <= 1):
        raise InputError(f"{what}: {shown(value)} is not a probability in [0, 1] (a decimal number)")
    return number


__all__ = ["GivenPredictions", "read_table", "read_array", "checked_table", "prediction_rows", "PROBABILITY_FIELDS"]
