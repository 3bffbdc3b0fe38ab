"""Property tests for the one typed manifest loader: whatever JSON a hostile `_info.json` holds, the
loader either refuses it with a `ManifestError` naming a field or returns a manifest that writes
back to the same JSON; it never crashes with anything else."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from builder.core.manifest import Manifest, ManifestError

SHA = "0" * 64
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


def valid_manifest() -> dict:
    shard = {"filename": "val-00000.tar", "num_samples": 3, "bytes": 10240, "sha256": SHA}
    entry = {"name": "val", "num_samples": 3, "filenames": ["val-00000.tar"], "shard_lengths": [3], "shards": [shard]}
    return {
        "stage": "compose",
        "tool": {"name": "hard-spurious-imagenet", "version": "0"},
        "fingerprint": "f",
        "schema_version": 2,
        "errors": {"total": 0, "by_reason": {}},
        "splits": {"val": entry},
        "config": "c",
    }


PATHS = [
    ("stage",),
    ("splits",),
    ("errors",),
    ("errors", "total"),
    ("errors", "by_reason"),
    ("splits", "val"),
    ("splits", "val", "num_samples"),
    ("splits", "val", "shards"),
    ("splits", "val", "shards", 0),
    ("splits", "val", "shards", 0, "num_samples"),
    ("splits", "val", "shards", 0, "filename"),
    ("splits", "val", "shards", 0, "bytes"),
    ("splits", "val", "shards", 0, "sha256"),
    ("fingerprint",),
    ("schema_version",),
    ("tool",),
    ("config",),
    ("class_names",),
]


def replaced(data: dict, path: tuple, value) -> dict:
    data = json.loads(json.dumps(data))
    target = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return data


@settings(max_examples=200, deadline=None)
@given(path=st.sampled_from(PATHS), value=json_values)
def test_any_field_replaced_by_any_json_is_refused_or_round_trips(path, value):
    data = replaced(valid_manifest(), path, value)
    try:
        manifest = Manifest.from_json(data)
    except ManifestError as exc:
        assert str(exc)  # a message naming what is wrong
        return
    assert Manifest.from_json(manifest.to_json()).to_json() == manifest.to_json()


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_a_manifest_that_is_any_json_at_all_is_refused_cleanly(value):
    try:
        Manifest.from_json(value)
    except ManifestError:
        return
    raise AssertionError(f"{value!r} was accepted as a manifest")


def test_the_valid_manifest_round_trips():
    data = valid_manifest()
    assert Manifest.from_json(data).to_json() == data
