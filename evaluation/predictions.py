"""`predictions.parquet`: one row per sample, the only input of every analysis.

Columns: the prediction (key, shard, status, detail, cls, label_class, pred_class, top5_class,
top5_prob, correct, correct_top5, prob_label, prob_background_class, paired_class_index,
prob_paired_class), then every field of the sample's `json` (builder.schema's fields; keys outside
the schema go to `extra_json`). Error rows (an undecodable sample, a broken shard) have status set
to the reason and nulls elsewhere. The run's metadata (model spec, checkpoint sha256,
preprocessing, label space, data revision, toolkit version) is stored as JSON under the
schema-metadata key `hsi`.
"""

from __future__ import annotations

import json
from pathlib import Path

from builder.formats.composites import COMPOSITE_FIELDS

PREDICTIONS_NAME = "predictions.parquet"
METADATA_KEY = b"hsi"


def _schema():
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
    meta = [(name, pa.int64() if kind is int else pa.string()) for name, (kind, _, _) in COMPOSITE_FIELDS.items()]
    clash = {name for name, _ in prediction} & {name for name, _ in meta}
    assert not clash, f"prediction columns shadow sample fields: {clash}"
    return pa.schema([*prediction, *meta, ("extra_json", pa.string())])


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


def flatten_row(row: dict) -> dict:
    meta = row.get("meta") or {}
    flat = {name: row.get(name) for name in PREDICTION_COLUMNS}
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

    schema = _schema()
    records = [flatten_row(r) for r in rows] + [flatten_row(error_row(e)) for e in errors]
    table = pa.Table.from_pylist(records, schema=schema)
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata, sort_keys=True).encode("utf-8")})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


def read_predictions(path: Path):
    """(pandas DataFrame, metadata dict) of a predictions file."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise ValueError(f"{Path(path).name} is not an hsi predictions file (no '{METADATA_KEY.decode()}' metadata)")
    return table.to_pandas(), json.loads(raw)
