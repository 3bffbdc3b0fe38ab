"""Plant fill scores in parts that tests/parts_factory.py wrote: rewrite the `fill_scores` of chosen
parts (any value, hostile ones included), or turn parts into schema-1 parts (extracted before fill
scores: no `fill_scores` key, no fill.png), then make the manifest vouch for the rewritten shards.

    plant_fill_scores(parts_dir, {"ILSVRC2012_val_00000001": 0.2, "ILSVRC2012_val_00000002": None})
    as_schema_1(parts_dir)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from parts_factory import rewrite_parts


def planted(score: float) -> dict[str, float]:
    """Scores whose one number is `score`: texture `score`, an invisible seam, no colour step."""
    return {"texture": score, "seam": 1.0, "step": 0.0, "score": score}


def plant_fill_scores(parts_dir: Path, scores: Mapping[str, object], *, raw: bool = False) -> None:
    """Give the parts named in `scores` those fill scores: a number -> `planted(number)`, None ->
    null (nothing filled); with `raw`, the value as it is (a hostile one). The manifest's summary is
    recomputed only when every value is a plain one."""

    def change(key: str, meta: dict, members: dict) -> tuple[dict, dict]:
        if key in scores:
            value = scores[key]
            meta["fill_scores"] = value if raw or value is None else planted(float(value))  # type: ignore[arg-type]
        return meta, members

    rewrite_parts(parts_dir, change, summary="drop" if raw else "recompute")


def as_schema_1(parts_dir: Path, keys: set[str] | None = None) -> None:
    """Turn the parts named in `keys` (default: all) into parts extracted before fill scores."""

    def change(key: str, meta: dict, members: dict) -> tuple[dict, dict]:
        if keys is None or key in keys:
            meta.pop("fill_scores", None)
            meta["schema_version"] = 1
            members.pop("fill.png", None)
        return meta, members

    rewrite_parts(parts_dir, change, summary="recompute" if keys is not None else "drop")
    if keys is None:
        path = Path(parts_dir) / "_info.json"
        data = json.loads(path.read_text("utf-8"))
        data["schema_version"] = 1
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", "utf-8")
