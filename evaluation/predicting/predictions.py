"""`predictions.parquet`: one row per sample, the only input of every analysis.

Columns: the prediction (key, shard, status, detail, cls, label_class, pred_class, top5_class,
top5_prob, correct, correct_top5, prob_label, prob_background_class, paired_class_index,
prob_paired_class), then every field of the sample's `json` (builder.schema's fields; keys outside
the schema go to `extra_json`). Error rows (an undecodable sample, a broken shard) have status set
to the reason and nulls elsewhere. The run's metadata (model spec, checkpoint sha256,
preprocessing, label space, data revision, toolkit version) is stored as JSON under the
schema-metadata key `hsi`.

A predictions table is read back as someone else's file (`hsi eval --from`, `hsi scgs
--predictions`, `hsi train --report`): every column the schema names must have its type (a table written
before `background_fill_score` or `background_status` existed lacks it: it reads as null), every
class index lies in ImageNet-1k's 0-999 (the space every label space maps into), every probability
and fill score is a finite number in [0, 1], a field with a closed set of values (`background_status`)
holds one of them or null, no sample key appears twice, and `correct` / `correct_top5` are not taken
from the table but derived again from pred_class, top5_class and label_class. Whatever breaks a rule
is one line naming the file, the column and the first offending row.

Two kinds of run add columns, named by their metadata: a zero-shot model's prompt sets
(`zero_shot`: each set's prediction columns `<column>__<set>`, evaluation.zero_shot.record) and
answers in words (`answers`: `pred_text`, the answer as given, and `answer_status`, mapped,
unmapped or ambiguous; an answer that maps to no single class has pred_class -1 and counts wrong).
"""

from __future__ import annotations

import json
from pathlib import Path

from builder.core.errors import printable
from builder.core.untrusted import Fields, UntrustedInput, check_string, read_parquet
from builder.formats.composites import COMPOSITE_FIELDS, FIELD_CHOICES
from evaluation.model_formats.identity import checked_identity
from evaluation.model_formats.models import PREPROCESSING_STATUSES
from evaluation.zero_shot.answers import ANSWER_STATUSES, MAPPED, NO_CLASS
from evaluation.zero_shot.record import SET_COLUMNS, checked_set_names, record_set_names, set_column

PREDICTIONS_NAME = "predictions.parquet"
METADATA_KEY = b"hsi"
WHAT = "predictions table"
IMAGENET_CLASSES = 1000
# Columns holding an ImageNet-1k class index (or, for cls/label, a config label, which is never larger).
CLASS_COLUMNS = (
    "cls",
    "label_class",
    "pred_class",
    "top5_class",
    "paired_class_index",
    "class_index",
    "label",
    "background_class_index",
)
PROBABILITY_COLUMNS = ("top5_prob", "prob_label", "prob_background_class", "prob_paired_class")
FILL_SCORE_COLUMNS = ("background_fill_score",)  # a fill score in [0, 1] (builder.formats.fill_scores)
# Columns a table written before they existed lacks: read as nulls (the sample had no such value).
LATER_COLUMNS = ("background_fill_score", "background_status")
DERIVED_COLUMNS = ("correct", "correct_top5")  # never read from a table: derived from the classes
ROW_COLUMNS = ("key", "status", "label_class", "pred_class")  # what any reader of the rows needs
OK_ROW_VALUES = ("key", "label_class", "pred_class", "top5_class")  # what an ok row must hold for an analysis
ANSWER_COLUMNS = ("pred_text", "answer_status")  # a run of answers in words
MAX_ANSWER_CHARACTERS = 1000  # an answer is stored up to here: far past any class name, short of an essay


def predictions_schema(extra: tuple[str, ...] = ()):
    """The table's columns; `extra`: the columns a run adds (`extra_columns`), after the prediction's."""
    import pyarrow as pa

    prediction = [
        ("key", pa.string()),
        ("shard", pa.string()),
        ("status", pa.string()),
        ("detail", pa.string()),
        ("cls", pa.int64()),
        ("label_class", pa.int64()),
        ("pred_class", pa.int64()),
        ("top5_class", pa.list_(pa.int64())),
        ("top5_prob", pa.list_(pa.float32())),
        ("correct", pa.bool_()),
        ("correct_top5", pa.bool_()),
        ("prob_label", pa.float32()),
        ("prob_background_class", pa.float32()),
        ("paired_class_index", pa.int64()),
        ("prob_paired_class", pa.float32()),
    ]
    arrow = {int: pa.int64(), float: pa.float64(), str: pa.string()}
    meta = [(name, arrow[kind]) for name, (kind, _, _) in COMPOSITE_FIELDS.items()]
    clash = {name for name, _ in prediction} & {name for name, _ in meta}
    assert not clash, f"prediction columns shadow sample fields: {clash}"
    types = dict(prediction)
    added = [(name, types[name.split("__", 1)[0]] if "__" in name else pa.string()) for name in extra]
    return pa.schema([*prediction, *added, *meta, ("extra_json", pa.string())])


def extra_columns(set_names: tuple[str, ...], answers: bool) -> tuple[str, ...]:
    """The columns of each prompt set (`<column>__<set>`) and of answers in words, in table order."""
    columns = tuple(set_column(column, name) for name in set_names for column in SET_COLUMNS)
    return columns + (ANSWER_COLUMNS if answers else ())


def run_columns(metadata: dict) -> tuple[str, ...]:
    """The extra columns of a run this process made, from its metadata."""
    sets = record_set_names(metadata["zero_shot"]) if metadata.get("zero_shot") else ()
    return extra_columns(sets, bool(metadata.get("answers")))


PREDICTION_COLUMNS = (
    "key",
    "shard",
    "status",
    "detail",
    "cls",
    "label_class",
    "pred_class",
    "top5_class",
    "top5_prob",
    "correct",
    "correct_top5",
    "prob_label",
    "prob_background_class",
    "paired_class_index",
    "prob_paired_class",
)


def flatten_row(row: dict, extra: tuple[str, ...] = ()) -> dict:
    meta = row.get("meta") or {}
    flat = {name: row.get(name) for name in (*PREDICTION_COLUMNS, *extra)}
    for name in COMPOSITE_FIELDS:
        flat[name] = meta.get(name)
    extra = {k: v for k, v in meta.items() if k not in COMPOSITE_FIELDS}
    flat["extra_json"] = json.dumps(extra, sort_keys=True) if extra else None
    return flat


def error_row(error: dict) -> dict:
    return {
        "key": error.get("key"),
        "shard": error.get("shard"),
        "status": error["reason"],
        "detail": error.get("detail"),
    }


def write_predictions(path: Path, rows: list[dict], errors: list[dict], metadata: dict) -> Path:
    """Write rows (sorted by key) and error rows atomically, with `metadata` in the schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    extra = run_columns(metadata)
    schema = predictions_schema(extra)
    records = [flatten_row(r, extra) for r in rows] + [flatten_row(error_row(e), extra) for e in errors]
    table = pa.Table.from_pylist(records, schema=schema)
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata, sort_keys=True).encode("utf-8")})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


def read_predictions(path: Path):
    """(pandas DataFrame, metadata dict) of a predictions file, for an analysis: every column of the
    schema, complete ok rows, and the run's metadata that the reports are rendered from."""
    table = PredictionsTable(path)
    schema = predictions_schema(table.extra)
    every = tuple(name for name in schema.names if name not in (*DERIVED_COLUMNS, *LATER_COLUMNS))
    frame = table.frame(required=every, ok_values=OK_ROW_VALUES)
    for name in LATER_COLUMNS:
        if name not in frame:
            frame[name] = None
    check_run_metadata(Fields(table.metadata, table.where, METADATA_KEY.decode()))
    return frame, table.metadata


def read_prediction_rows(path: Path, required: tuple[str, ...] = ROW_COLUMNS):
    """(pandas DataFrame, metadata dict) of a predictions file for a reader of its rows only (the
    misclassified set of `hsi scgs`): the `required` columns, every value checked, metadata any object."""
    table = PredictionsTable(path)
    return table.frame(required=required, ok_values=()), table.metadata


def check_run_metadata(meta: Fields) -> None:
    """The `hsi` metadata the reports are rendered from: a model spec, the data's source, config and
    split, a label space of 1-1000 classes, the preprocessing's description, notes as text."""
    model = meta.object("model")
    model.string("spec")
    model.string("checkpoint", None)
    model.string("checkpoint_sha256", None)
    checked_identity(model)  # an in-memory model's, when it was one
    data = meta.object("data")
    for key in ("source", "split"):
        data.string(key)
    for key in ("config", "fingerprint"):
        data.string(key, None)
    data.integer("limit", None, low=1)
    space = meta.object("label_space")
    space.integer("classes", low=1, high=IMAGENET_CLASSES)
    space.string("description")
    preprocessing = meta.object("preprocessing")
    preprocessing.string("description")
    preprocessing.string("status", None, choices=PREPROCESSING_STATUSES)  # null: written before it existed
    if preprocessing.boolean("cropped", False):  # null: not known (predictions made elsewhere)
        preprocessing.number("crop_pct", low=0, high=1)
    for n, note in enumerate(meta.list("notes", [])):
        check_string(note, lambda problem, n=n: meta.error(problem, f"notes[{n}]"))
    for key in ("run", "toolkit"):
        meta.object(key, None)


class PredictionsTable:
    """One predictions file read through the untrusted layer: its table and its `hsi` metadata."""

    def __init__(self, path: Path):
        self.where = printable(str(path))
        self.table = read_parquet(Path(path), WHAT)
        raw = (self.table.schema.metadata or {}).get(METADATA_KEY)
        if raw is None:
            raise self.error(f"is not an hsi predictions table (no '{METADATA_KEY.decode()}' schema metadata)")
        try:
            self.metadata = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
            reason = error.msg if isinstance(error, json.JSONDecodeError) else type(error).__name__
            raise self.error(
                f"its '{METADATA_KEY.decode()}' schema metadata is not JSON ({printable(reason)})"
            ) from None
        Fields(self.metadata, self.where, METADATA_KEY.decode())  # an object, or one line saying what it is
        if not is_utf8(self.metadata):
            raise self.error(f"its '{METADATA_KEY.decode()}' schema metadata holds text that is not UTF-8")
        self.keys: list | None = None
        meta = Fields(self.metadata, self.where, METADATA_KEY.decode())
        self.set_names = checked_set_names(meta.object("zero_shot")) if meta.has("zero_shot") else ()
        self.answers = meta.has("answers")
        self.extra = extra_columns(self.set_names, self.answers)

    def error(self, problem: str, column: str | None = None) -> UntrustedInput:
        return UntrustedInput(f"{self.where}: {'column ' + column + ': ' if column else ''}{problem}")

    def row(self, index: int) -> str:
        """The row at `index` as a message names it: counted from 1, with its key."""
        key = self.keys[index] if self.keys is not None else None
        return f"row {index + 1}" + (f" ({printable(str(key))})" if key is not None else "")

    def frame(self, required: tuple[str, ...], ok_values: tuple[str, ...]):
        """The table as a DataFrame: columns conformed to the schema's types, values checked, the
        derived columns derived."""
        import pyarrow as pa

        names = self.table.column_names
        missing = [name for name in required if name not in names]
        if missing:
            raise self.error(
                f"{WHAT} has no column {', '.join(missing)}: pass a predictions.parquet that `hsi eval` wrote, unedited"
            )
        if len(set(names)) != len(names):
            raise self.error(f"{WHAT} names a column twice")
        schema = predictions_schema(self.extra)
        columns = {}
        # the key first, so that every later message can name the offending row's sample
        for name in sorted(names, key=lambda name: name != "key"):
            column = self.table.column(name)
            if name in schema.names and name not in DERIVED_COLUMNS:
                column = _conform(self, name, column, schema.field(name).type)
            columns[name] = column
            if name == "key":
                self.keys = column.to_pylist()
        columns = {name: columns[name] for name in names}
        self._check_values(columns, ok_values)
        columns.update(self._derived(columns))
        table = pa.table(list(columns.values()), names=list(columns))
        return table.to_pandas()

    def _check_values(self, columns: dict, ok_values: tuple[str, ...]) -> None:
        import pyarrow.compute as pc

        status = columns.get("status")
        if status is not None:
            at = _first(pc.is_null(status))
            if at is not None:
                raise self.error(f"{self.row(at)} has no status (ok, or the reason it is an error row)", "status")
            ok = pc.equal(status, "ok")
            for name in ok_values:
                if name in columns:
                    at = _first(pc.and_(ok, pc.is_null(columns[name])))
                    if at is not None:
                        raise self.error(f"{self.row(at)} is an ok row without a value", name)
        answered = ("pred_class", "top5_class") if self.answers else ()  # -1: an answer naming no single class
        for name in (*CLASS_COLUMNS, *self._set_columns(("pred_class", "top5_class"))):
            if name in columns:
                low, expected = (NO_CLASS, "a class index 0-999, or -1") if name in answered else (0, "")
                self._check_range(
                    name, columns[name], low, IMAGENET_CLASSES - 1, expected or "an ImageNet-1k class index 0-999"
                )
        for name in (*PROBABILITY_COLUMNS, *self._set_columns(PROBABILITY_COLUMNS)):
            if name in columns:
                self._check_range(name, columns[name], 0.0, 1.0 + 1e-6, "a probability in [0, 1]")
        for name in FILL_SCORE_COLUMNS:
            if name in columns:
                self._check_range(name, columns[name], 0.0, 1.0, "a fill score in [0, 1]")
        for name, allowed in FIELD_CHOICES.items():
            if name in columns:
                self._check_choices(name, columns[name], allowed)
        if self.keys is not None:
            self._check_unique_keys()
        if "top5_class" in columns and "pred_class" in columns:
            self._check_top5(columns["top5_class"], columns["pred_class"])
        for name in self.set_names:
            top5, pred = set_column("top5_class", name), set_column("pred_class", name)
            if top5 in columns and pred in columns:
                self._check_top5(columns[top5], columns[pred], top5)
        if self.answers and "answer_status" in columns and "pred_class" in columns:
            self._check_answers(columns["answer_status"], columns["pred_class"])

    def _set_columns(self, names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(set_column(column, name) for name in self.set_names for column in names)

    def _check_answers(self, status, pred) -> None:
        """Every ok row's answer_status is mapped, unmapped or ambiguous, and its pred_class is -1
        exactly when the answer is not mapped."""
        import pyarrow as pa
        import pyarrow.compute as pc

        ok = pc.fill_null(pc.equal(self.table.column("status"), "ok"), False)
        known = pc.is_in(status, value_set=pa.array(ANSWER_STATUSES))
        at = _first(pc.and_(ok, pc.invert(pc.fill_null(known, False))))
        if at is not None:
            value = printable(repr(status[at].as_py()))
            raise self.error(
                f"{self.row(at)} holds {value}, which is not one of {', '.join(ANSWER_STATUSES)}", "answer_status"
            )
        mapped = pc.equal(status, MAPPED)
        no_class = pc.equal(pred, NO_CLASS)
        at = _first(pc.and_(ok, pc.not_equal(mapped, pc.invert(no_class))))
        if at is not None:
            raise self.error(
                f"{self.row(at)}: pred_class {pred[at].as_py()} does not fit its answer_status {status[at].as_py()!r} "
                "(-1 exactly when the answer is not mapped)",
                "pred_class",
            )

    def _check_choices(self, name: str, column, allowed: tuple[str, ...]) -> None:
        """Every value of `column` is one of `allowed` or null."""
        import pyarrow as pa
        import pyarrow.compute as pc

        known = pc.or_(pc.is_null(column), pc.is_in(column, value_set=pa.array(allowed)))  # is_in(null) is false
        at = _first(pc.invert(known))
        if at is not None:
            value = printable(repr(column[at].as_py()))[:60]
            raise self.error(f"{self.row(at)} holds {value}, which is not one of {', '.join(allowed)} or null", name)

    def _check_range(self, name: str, column, low, high, expected: str) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        values = pc.list_flatten(column) if _is_list(column.type) else column
        parents = pc.list_parent_indices(column) if _is_list(column.type) else None
        bad = pc.or_(pc.less(values, low), pc.greater(values, high))
        if pa.types.is_floating(values.type):
            bad = pc.or_(bad, pc.invert(pc.is_finite(values)))
        at = _first(bad)
        if at is not None:
            value = values[at].as_py()
            row = parents[at].as_py() if parents is not None else at
            raise self.error(f"{self.row(row)} holds {printable(repr(value))}, which is not {expected}", name)

    def _check_unique_keys(self) -> None:
        seen: dict = {}
        for index, key in enumerate(self.keys or []):
            if key is None:
                continue
            if key in seen:
                raise self.error(
                    f"the {WHAT} has two rows for sample {printable(str(key))} (rows {seen[key]} and {index}); "
                    "pass the predictions.parquet of one `hsi eval` run, unedited",
                    "key",
                )
            seen[key] = index

    def _check_top5(self, top5, pred, column: str = "top5_class") -> None:
        import pyarrow.compute as pc

        lengths = pc.list_value_length(top5)
        at = _first(pc.or_(pc.less(lengths, 1), pc.greater(lengths, 5)))
        if at is not None:
            raise self.error(f"{self.row(at)} lists {lengths[at].as_py()} classes; top-5 lists 1 to 5", column)
        first = pc.list_element(top5, 0)  # every list holds one class at least (checked above)
        at = _first(pc.not_equal(first, pred))
        if at is not None:
            predicted = column.replace("top5_class", "pred_class")
            raise self.error(f"{self.row(at)}: {predicted} {pred[at].as_py()} is not the first of its {column}", column)

    def _derived(self, columns: dict) -> dict:
        """correct and correct_top5 from the classes (null on error rows and where a class is missing);
        a note in the metadata says how many rows the table's own columns contradicted."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = self.table.num_rows
        if "status" not in columns or "label_class" not in columns or "pred_class" not in columns:
            return {}
        ok = pc.equal(columns["status"], "ok")
        label = columns["label_class"]
        correct = pc.if_else(ok, pc.equal(columns["pred_class"], label), pa.scalar(None, pa.bool_()))
        derived = {"correct": correct}
        if "top5_class" in columns:
            top5 = columns["top5_class"]
            hits = np.zeros(rows, dtype=bool)
            flat = pc.list_flatten(top5)
            parents = np.asarray(pc.list_parent_indices(top5), dtype=np.int64)
            if len(flat):
                equal = pc.fill_null(pc.equal(flat, pc.take(label, pa.array(parents))), False)
                hits[parents[equal.to_numpy(zero_copy_only=False)]] = True
            valid = pc.and_(ok, pc.and_(pc.is_valid(top5), pc.is_valid(label)))
            derived["correct_top5"] = pc.if_else(valid, pa.array(hits), pa.scalar(None, pa.bool_()))
        differing = 0
        for name, values in derived.items():
            stored = columns.get(name)
            if stored is not None and stored.type == pa.bool_():
                same = pc.fill_null(pc.equal(stored, values), False)
                both_null = pc.and_(pc.is_null(stored), pc.is_null(values))
                differing += rows - pc.sum(pc.or_(same, both_null)).as_py() if rows else 0
            elif stored is not None:
                differing += rows
        if differing:
            notes = self.metadata.get("notes")
            self.metadata["notes"] = [
                *(notes if isinstance(notes, list) else []),
                f"correct and correct_top5 are derived from pred_class, top5_class and label_class: the "
                f"table's own columns said otherwise in {differing} cells",
            ]
        return derived


def is_utf8(data: object) -> bool:
    """Whether every text in parsed JSON can be written as UTF-8: JSON's \\ud800 escapes parse to
    lone surrogates, which no table or report can hold."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _refuse_constant(name: str) -> float:
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)


def _first(mask) -> int | None:
    """The index of the first true value of a boolean (chunked) array, or None."""
    import pyarrow.compute as pc

    index = pc.index(pc.fill_null(mask, False), True).as_py()
    return None if index < 0 else index


def _is_list(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


def _family(kind) -> str:
    """The kind of values an arrow type holds, as the schema's columns are read: integer, number,
    text, boolean, nothing (an all-null column), or the type itself for anything else."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        return _family(kind.value_type)
    if pa.types.is_null(kind):
        return "nothing"
    if pa.types.is_integer(kind):
        return "integer"
    if pa.types.is_floating(kind):
        return "number"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "text"
    if pa.types.is_boolean(kind):
        return "boolean"
    if _is_list(kind):
        return f"list of {_family(kind.value_type)}"
    return str(kind)


def _conform(table: PredictionsTable, name: str, column, target):
    """`column` as the schema's `target` type, or one line: the column holds other kinds of values, or
    a number where an integer belongs (57.7, inf) in its first offending row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    have, want = _family(column.type), _family(target)
    if have == want or have == "nothing":
        pass
    elif want.endswith("integer") and have == want.replace("integer", "number"):
        values = pc.list_flatten(column) if _is_list(column.type) else column
        whole = pc.and_(pc.is_finite(values), pc.equal(pc.floor(values), values))
        at = _first(pc.invert(whole))
        if at is not None:
            row = pc.list_parent_indices(column)[at].as_py() if _is_list(column.type) else at
            value = printable(repr(values[at].as_py()))
            raise table.error(f"{table.row(row)} holds {value}, which is not an integer", name)
    elif not (want.endswith("number") and have == want.replace("number", "integer")):
        raise table.error(f"holds {have} values, where the {WHAT} holds {want} values", name)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    try:
        return column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:  # an integer beyond int64, say
        raise table.error(f"its values do not fit {target} ({printable(str(error).splitlines()[0])})", name) from None
