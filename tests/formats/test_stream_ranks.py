"""`stream()` under DDP (issue 10.16): every rank yields the same number of samples per epoch, and
`len()` is that per-rank count; `uneven="drop"` never repeats a sample, `uneven="pad"` covers all."""

from __future__ import annotations

from collections import Counter

import pytest
from release_factory import composite_json, jpeg, make_composed_dataset

from builder.core.shard_write import write_shard
from builder.core.shards import shard_filename
from builder.formats.composites import composite_members
from builder.formats.stream import stream

torch = pytest.importorskip("torch")

LENGTHS = [9, 1, 4, 7, 2, 6, 3, 8, 5, 1, 2, 6, 4]  # 13 shards of uneven sizes, 58 samples


def uneven_dataset(root):
    """A composed dataset whose split `test` has the 13 shards of LENGTHS (manifest rewritten to match)."""
    from builder.core.manifest import Manifest, SplitEntry

    dataset = make_composed_dataset(root, splits={"test": 1})
    (dataset / "test-00000.tar").unlink()
    stats, index = [], 0
    for number, length in enumerate(LENGTHS):
        samples = []
        for _ in range(length):
            meta = composite_json("hard-spurious-imagenet", "test", index, 0, 0, 0)
            samples.append((f"test_{index:06d}", composite_members(jpeg(index), 0, meta)))
            index += 1
        stats.append(write_shard(dataset / shard_filename("test", number), samples))
    manifest = Manifest.read(dataset)
    manifest.splits["test"] = SplitEntry("test", stats, counts=manifest.splits["test"].counts)
    manifest.write(dataset)
    return dataset


def read_ranks(dataset, world: int, workers: int, **options) -> list[list[str]]:
    keys = []
    for rank in range(world):
        data = stream(dataset, split="test", rank=rank, world_size=world, **options)
        loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers)
        keys.append([sample["key"] for sample in loader])
        assert len(data) == len(keys[-1]), (rank, len(data), len(keys[-1]))
    return keys


@pytest.mark.parametrize("shuffle_buffer", [0, 5])
def test_four_ranks_two_workers_drop_gives_equal_counts_and_no_duplicates(tmp_path, shuffle_buffer):
    dataset = uneven_dataset(tmp_path)
    per_rank = read_ranks(dataset, 4, 2, shuffle_buffer=shuffle_buffer, seed=1)
    assert [len(keys) for keys in per_rank] == [14, 14, 14, 14]  # 58 // 4; the old split gave 16/15/12/15
    everything = [key for keys in per_rank for key in keys]
    assert len(set(everything)) == len(everything) == 56  # only 58 % 4 = 2 samples dropped


def test_four_ranks_two_workers_pad_yields_every_sample_at_least_once(tmp_path):
    dataset = uneven_dataset(tmp_path)
    per_rank = read_ranks(dataset, 4, 2, uneven="pad", shuffle_buffer=3, seed=2)
    assert [len(keys) for keys in per_rank] == [15, 15, 15, 15]
    counts = Counter(key for keys in per_rank for key in keys)
    assert set(counts) == {f"test_{i:06d}" for i in range(sum(LENGTHS))}
    assert sum(counts.values()) == 60 and max(counts.values()) == 2


def test_len_is_per_rank_and_a_single_reader_reads_everything(tmp_path):
    dataset = uneven_dataset(tmp_path)
    assert len(stream(dataset, split="test")) == 58
    assert len(stream(dataset, split="test", rank=0, world_size=4)) == 14
    assert len(stream(dataset, split="test", rank=3, world_size=4, uneven="pad")) == 15
    assert sorted(s["key"] for s in stream(dataset, split="test")) == [f"test_{i:06d}" for i in range(58)]
    with pytest.raises(ValueError, match="uneven='even'"):
        stream(dataset, split="test", uneven="even")
