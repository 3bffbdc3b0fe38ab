"""Extract's bar counts images as they finish, inside a shard (issue 44: a run of one shard, 256
images by default, sat at 0 until its end, because the bar moved only when a shard finished)."""

from __future__ import annotations

from fake_imagenet import extract_args, write_tree

import builder.core.runner as runner
from hsi.cli import main


class RecordingBar:
    """tqdm's interface as run_shards uses it, keeping the count after every update."""

    made: list[RecordingBar] = []

    def __init__(self, total=None, desc=None, unit=None, disable=False, smoothing=None):
        self.total, self.desc, self.unit, self.n, self.counts = total, desc, unit, 0, []
        RecordingBar.made.append(self)

    def update(self, n=1):
        if n:
            self.n += n
            self.counts.append(self.n)

    def close(self):
        pass


def test_a_one_shard_run_counts_every_batch_of_images(tmp_path, monkeypatch):
    tree = write_tree(tmp_path / "imagenet", count=6)
    monkeypatch.setattr(runner, "tqdm", RecordingBar)
    RecordingBar.made.clear()
    assert main(extract_args(tree.root, tmp_path / "out", "--batch-size", "2")) == 0
    (bar,) = RecordingBar.made
    assert bar.total == 6 and bar.unit == "img"
    # three batches of two images, each counted when it is done, all within the one shard
    assert bar.counts == [2, 4, 6]
