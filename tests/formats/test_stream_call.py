"""`stream()` as the README documents it: the keywords users pass, through `builder.formats.stream`
and through the `hf_scripts.stream` re-export kept for one release."""

from __future__ import annotations

import inspect

import pytest
from release_factory import make_composed_dataset

from builder.core.shard_read import ShardReadError, collect_read_errors
from builder.formats.stream import ShardStream, stream

DOCUMENTED = [
    "source",
    "config",
    "split",
    "shuffle_buffer",
    "seed",
    "transform",
    "keep_json",
    "rank",
    "world_size",
    "handler",
    "uneven",
]


def test_the_signature_lists_the_documented_parameters_with_their_defaults():
    parameters = inspect.signature(stream).parameters
    assert list(parameters) == DOCUMENTED
    assert [parameters[name].default for name in ("config", "split", "shuffle_buffer", "seed", "uneven")] == [
        None,
        "test",
        0,
        0,
        "drop",
    ]
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in DOCUMENTED[3:])


def test_the_documented_call_reads_through_both_import_paths(tmp_path):
    pytest.importorskip("torch")
    from hf_scripts.stream import stream as deprecated_stream

    assert deprecated_stream is stream
    dataset = make_composed_dataset(tmp_path, splits={"test": 8}, shard_size=4)
    errors: list[ShardReadError] = []
    data = deprecated_stream(
        dataset,
        shuffle_buffer=3,
        seed=5,
        rank=1,
        world_size=2,
        transform=lambda picture: picture.size,
        keep_json=True,
        handler=collect_read_errors(errors),
    )
    assert isinstance(data, ShardStream)
    samples = list(data)
    assert len(samples) == len(data) == 4  # rank 1 of 2 reads half of the 8 samples
    assert all(sample["image"] == (32, 32) and sample["json"]["group"] == sample["group"] for sample in samples)
    again = [
        s["key"]
        for s in stream(str(dataset), "hard-spurious-imagenet", "test", shuffle_buffer=3, seed=5, rank=1, world_size=2)
    ]
    assert [s["key"] for s in samples] == again  # same seed, same rank: same order
    assert errors == []


def test_a_stream_pickles_as_spawned_dataloader_workers_receive_it(tmp_path):
    """`stream` is a class now: an instance travels to spawn-started workers by pickle, settings and
    epoch included, and reads the same samples there."""
    import pickle

    pytest.importorskip("torch")
    dataset = make_composed_dataset(tmp_path, splits={"test": 8}, shard_size=4)
    data = stream(dataset, shuffle_buffer=3, seed=5, rank=0, world_size=2)
    data.set_epoch(2)
    copy = pickle.loads(pickle.dumps(data))
    assert (copy.epoch, copy.seed, copy.shards, len(copy)) == (2, 5, data.shards, 4)
    assert [s["key"] for s in copy] == [s["key"] for s in data]
