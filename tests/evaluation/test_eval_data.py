"""Evaluation data and bad input: stream()'s shards, undecodable samples and broken shards as counted
rows, configs without group metadata, --limit, the canvas resized but never cropped, CUDA OOM."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import torch
from eval_cli import eval_args
from parts_factory import rehash_parts
from PIL import Image
from trusted_code import trusting

from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from evaluation.model_formats.models import LoadedModel, ModelOptions, Preprocessing, load_model
from evaluation.predicting.data import prepare_image
from evaluation.predicting.predict import run_predictions
from hsi.cli import main

RAW = ModelOptions(mean=(0, 0, 0), std=(1, 1, 1))


def copy_dataset(dataset, target):
    shutil.copytree(dataset, target)
    return target


def rewrite_shard(path, change):
    samples = [change(key, dict(members)) for key, members in iter_shard(path)]
    write_shard(path, [s for s in samples if s is not None])


def test_bad_samples_and_broken_shards_are_counted_rows_and_the_run_goes_on(
    paper_set, planted_corner, tmp_path, capsys
):
    dataset = copy_dataset(paper_set, tmp_path / "hard-spurious-imagenet")
    shards = sorted(dataset.glob("val-*.tar"))
    assert len(shards) == 3
    first_key = next(iter_shard(shards[0]))[0]
    rewrite_shard(shards[0], lambda k, m: (k, {**m, "jpg": b"not a jpeg"}) if k == first_key else (k, m))
    data = shards[2].read_bytes()
    shards[2].write_bytes(data[: len(data) // 2 + 100])  # cut mid-member: the tar breaks off
    rehash_parts(dataset)  # a manifest that vouches for the damage: eval refuses a shard that differs from it
    out = tmp_path / "out"
    assert main(eval_args(dataset, f"ts:{planted_corner}", str(out), workers=2)) == 0
    report = json.loads((out / "ts_planted_corner.pt" / "eval.json").read_text())
    errors = report["metrics"]["errors"]
    assert errors["by_reason"] == {"undecodable-sample": 1, "unreadable-shard": 1}
    bad_sample = next(r for r in errors["rows"] if r["reason"] == "undecodable-sample")
    assert bad_sample["key"] == first_key and bad_sample["shard"] == "val-00000.tar"
    broken = next(r for r in errors["rows"] if r["reason"] == "unreadable-shard")
    assert broken["shard"] == "val-00002.tar" and "after" in broken["detail"]
    samples = report["metrics"]["samples"]
    assert 47 <= samples < 71  # 23 + 24 whole, plus what the cut shard gave before it broke
    assert "error rows" in capsys.readouterr().out
    assert "## Error rows" in (out / "ts_planted_corner.pt" / "eval.md").read_text()


def test_a_config_without_group_metadata_is_plain_accuracy_and_says_so(paper_set, planted_corner, tmp_path):
    dataset = copy_dataset(paper_set, tmp_path / "plain")

    def strip(key, members):
        meta = json.loads(members["json"])
        members["json"] = json.dumps(
            {"wnid": meta["wnid"], "class_index": meta["class_index"], "source_id": meta["source_id"]}
        ).encode()
        return key, members

    for shard in sorted(dataset.glob("val-*.tar")):
        rewrite_shard(shard, strip)
    rehash_parts(dataset)
    out = tmp_path / "out"
    assert main(eval_args(dataset, f"ts:{planted_corner}", str(out))) == 0
    report = json.loads((out / "ts_planted_corner.pt" / "eval.json").read_text())
    metrics = report["metrics"]
    assert metrics["has_groups"] is False and "by_group" not in metrics
    assert metrics["overall"]["top1"]["value"] == 0.75 and metrics["samples"] == 72
    assert any("no group metadata" in note for note in report["notes"])
    assert "only plain accuracy is reported" in (out / "ts_planted_corner.pt" / "eval.md").read_text()
    assert not (out / "ts_planted_corner.pt" / "plots").exists()


def test_limit_reads_the_same_samples_whatever_the_worker_count(paper_set, planted_corner):
    model = load_model(f"ts:{planted_corner}", replace(RAW, trust=trusting(planted_corner)))
    keys = [
        [
            r["key"]
            for r in run_predictions(
                model, paper_set, split="val", workers=w, batch_size=7, limit=30, progress=False
            ).rows
        ]
        for w in (0, 2)
    ]
    assert keys[0] == keys[1] and len(keys[0]) == 30
    everything = run_predictions(model, paper_set, split="val", workers=2, batch_size=7, progress=False)
    assert len(everything.rows) == 72 and len({r["key"] for r in everything.rows}) == 72


def test_the_canvas_is_resized_to_the_input_size_never_cropped_by_default():
    canvas = Image.fromarray(np.random.default_rng(0).integers(0, 255, (224, 224, 3), dtype=np.uint8))
    as_is = prepare_image(canvas, Preprocessing((224, 224)))
    assert np.array_equal(as_is, np.asarray(canvas))
    resized = prepare_image(canvas, Preprocessing((160, 160), interpolation="bicubic"))
    assert np.array_equal(resized, np.asarray(canvas.resize((160, 160), Image.BICUBIC)))
    cropped = prepare_image(canvas, Preprocessing((224, 224), crop_pct=0.875))
    expected = np.asarray(canvas.resize((256, 256), Image.BICUBIC))[16:240, 16:240]
    assert np.array_equal(cropped, expected)


class OutOfMemoryAbove(torch.nn.Module):
    """Raises CUDA's out-of-memory error for batches above `limit`, as a full GPU would."""

    def __init__(self, inner, limit):
        super().__init__()
        self.inner, self.limit, self.sizes = inner, limit, []

    def forward(self, x):
        self.sizes.append(len(x))
        if len(x) > self.limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return self.inner(x)


def test_out_of_memory_halves_the_batch_and_says_so(paper_set, planted_corner):
    plain = load_model(f"ts:{planted_corner}", replace(RAW, trust=trusting(planted_corner)))
    reference = run_predictions(plain, paper_set, split="val", workers=0, batch_size=16, progress=False)
    wrapped = OutOfMemoryAbove(plain.module, 5)
    messages = []
    loaded = LoadedModel("planted-oom", wrapped, plain.preprocessing)
    run = run_predictions(
        loaded, paper_set, split="val", workers=0, batch_size=16, progress=False, announce=messages.append
    )
    assert messages == [
        "hsi eval: out of memory on cpu; batch halved to 8",
        "hsi eval: out of memory on cpu; batch halved to 4",
    ]
    assert run.metadata["run"]["batch_halved_to"] == 4 and max(wrapped.sizes[3:]) <= 4

    def strip(rows):
        return [{k: v for k, v in r.items()} for r in rows]

    assert strip(run.rows) == strip(reference.rows)
