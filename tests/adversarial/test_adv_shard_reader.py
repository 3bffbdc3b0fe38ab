"""One shard reader (issue 41, part 3): every reader of shards refuses a member name present twice,
a json nested past `MAX_JSON_DEPTH` and an npy header declaring more than its member holds, naming
the shard and the member; a parts manifest whose counts are not its shards' is refused; `hsi train`
proves the test split before its first step. Each test failed before its fix: compose took the last
of two json members (composites labelled goldfish instead of tripod), died in RecursionError or a
28 GiB allocation leaving a partial folder, and wrote composites from a manifest with false counts
with "errors: 0"; `hsi verify` died in a datasets traceback; training scored a changed test shard."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from parts_factory import compose_args, fake_images, rehash_parts, write_parts
from release_factory import rewrite_release_shard, tar_members, two_releases, write_tar

from builder.core.shard_read import (
    MAX_JSON_DEPTH,
    ShardReadError,
    collect_read_errors,
    iter_shard,
    nests_deeper,
    npy_member_problem,
)
from builder.core.shard_read import tar_members as reader_members
from builder.core.shard_write import write_shard
from builder.formats.parts import decode_canvas
from hsi.cli import main

TRIPOD, GOLDFISH = "n04485082", "n01443537"
FIRST = "ILSVRC2012_val_00000001"  # the first parts sample (a tripod: images sort by id, tripods first)
DEEP = b"[" * 100_000 + b"]" * 100_000


def make_parts(tmp_path: Path) -> Path:
    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images([TRIPOD, GOLDFISH], per_class=2)}, shard_size=4)  # one shard of 4
    return parts


def one_line_refusal(capsys, args, status: int = 2) -> str:
    assert main([str(a) for a in args]) == status
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("hsi "), err
    return lines[0]


def edit_parts_shard(parts: Path, edit) -> None:
    """Rewrite the parts shard's members with `edit([(name, bytes)])`, and make the manifest vouch
    for the new bytes (true hashes: only the reader can tell)."""
    shard = parts / "val-00000.tar"
    write_tar(shard, edit(tar_members(shard)))
    rehash_parts(parts)


def npy_declaring(shape: tuple[int, ...], pixels: bytes) -> bytes:
    """A version 1 npy whose header declares `shape` of uint8, followed by `pixels`."""
    header = f"{{'descr': '|u1', 'fortran_order': False, 'shape': {shape}, }}".encode()
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + pixels


def assert_composed_nothing(tmp_path: Path) -> None:
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# -- compose --parts on hostile parts ---------------------------------------------------------------------------


def test_a_json_member_present_twice_is_refused_not_the_last_one_taken(tmp_path, capsys):
    parts = make_parts(tmp_path)

    def second_json(members):
        at = next(i for i, (name, _) in enumerate(members) if name == f"{FIRST}.json")
        meta = json.loads(members[at][1])
        assert meta["wnid"] == TRIPOD
        goldfish = {**meta, "wnid": GOLDFISH, "class_index": 1}
        return [*members[: at + 1], (f"{FIRST}.json", json.dumps(goldfish).encode()), *members[at + 1 :]]

    edit_parts_shard(parts, second_json)
    line = one_line_refusal(capsys, compose_args(parts, tmp_path / "out", "--no-progress"))
    assert f"val-00000.tar: member '{FIRST}.json' appears twice" in line
    assert_composed_nothing(tmp_path)


def test_a_json_nested_100000_deep_is_refused_in_one_line(tmp_path, capsys):
    parts = make_parts(tmp_path)

    def deep_json(members):
        return [(n, DEEP if n == f"{FIRST}.json" else data) for n, data in members]

    edit_parts_shard(parts, deep_json)
    line = one_line_refusal(capsys, compose_args(parts, tmp_path / "out", "--no-progress"))
    assert f"val-00000.tar: member '{FIRST}.json' nests deeper than {MAX_JSON_DEPTH} levels" in line
    assert_composed_nothing(tmp_path)


def test_a_canvas_npy_declaring_a_huge_shape_is_refused_before_any_allocation(tmp_path, capsys):
    parts = make_parts(tmp_path)

    def huge_canvas(members):
        return [
            (n, npy_declaring((100_000, 100_000, 3), data[128:]) if n == f"{FIRST}.canvas.npy" else data)
            for n, data in members
        ]

    edit_parts_shard(parts, huge_canvas)
    line = one_line_refusal(capsys, compose_args(parts, tmp_path / "out", "--no-progress"))
    assert f"val-00000.tar: member '{FIRST}.canvas.npy' declares shape (100000, 100000, 3) of uint8" in line
    assert "holds 150528 bytes" in line
    assert_composed_nothing(tmp_path)


@pytest.mark.parametrize("lie", [-1, +1])
def test_a_parts_manifest_with_true_hashes_and_false_counts_is_refused(tmp_path, capsys, lie):
    parts = make_parts(tmp_path)
    path = parts / "_info.json"
    data = json.loads(path.read_text())
    entry = data["splits"]["val"]
    entry["shards"][0]["num_samples"] += lie  # consistent everywhere, so only the shard can tell
    entry["num_samples"] += lie
    entry["shard_lengths"][0] += lie
    path.write_text(json.dumps(data))
    line = one_line_refusal(capsys, compose_args(parts, tmp_path / "out", "--no-progress"))
    assert f"parts shard val-00000.tar holds 4 samples but its manifest says {4 + lie}" in line
    assert_composed_nothing(tmp_path)


# -- the reader itself: iter_shard and tar_members ---------------------------------------------------------------


def test_every_reading_of_a_shard_refuses_a_member_present_twice(tmp_path):
    ours = tmp_path / "val-00000.tar"  # laid out as ShardWriter writes: read from the headers alone
    write_shard(ours, [("a", {"cls": b"1", "json": b"{}"}), ("b", {"cls": b"2"})])
    doubled = tmp_path / "val-00001.tar"
    members = tar_members(ours)
    write_tar(doubled, [*members, members[0]])  # a.cls again, after b
    for reading in (lambda p: list(iter_shard(p)), reader_members):
        with pytest.raises(ShardReadError, match=r"val-00001.tar: member 'a.cls' appears twice"):
            reading(doubled)
    assert [m.name for m in reader_members(ours)] == ["a.cls", "a.json", "b.cls"]


def test_a_sample_whose_members_are_not_together_is_refused(tmp_path):
    path = tmp_path / "val-00002.tar"
    write_tar(path, [("a.cls", b"1"), ("b.cls", b"2"), ("a.json", b"{}")])  # a would be two samples
    errors: list[ShardReadError] = []
    assert list(iter_shard(path, collect_read_errors(errors))) == [("a", {"cls": b"1"}), ("b", {"cls": b"2"})]
    assert [(e.reason, e.key) for e in errors] == [("duplicate-member", "a")]
    assert "member 'a.json' belongs to sample 'a', which ended earlier in the shard" in str(errors[0])


def test_the_reader_refuses_deep_json_and_npy_headers_naming_shard_and_member(tmp_path):
    canvas = io.BytesIO()
    np.save(canvas, np.zeros((4, 4, 3), np.uint8))
    good = canvas.getvalue()
    path = tmp_path / "val-00003.tar"
    members = [
        ("a.json", DEEP),
        ("b.canvas.npy", npy_declaring((10**6, 10**6), good[128:])),
        ("c.canvas.npy", good),
        ("c.json", b'{"x": "' + b"[" * 500 + b'"}'),  # brackets inside a string do not nest
    ]
    write_tar(path, members)
    errors: list[ShardReadError] = []
    assert list(iter_shard(path, collect_read_errors(errors))) == [
        ("a", {}),
        ("b", {}),
        ("c", {"canvas.npy": good, "json": members[3][1]}),
    ]
    assert [(e.reason, e.shard, e.key) for e in errors] == [
        ("deep-json", "val-00003.tar", "a"),
        ("oversized-array", "val-00003.tar", "b"),
    ]
    assert all("\n" not in str(e) for e in errors)
    assert "val-00003.tar: member 'b.canvas.npy' declares shape (1000000, 1000000) of uint8" in str(errors[1])
    with pytest.raises(ShardReadError, match=r"val-00003.tar: member 'a.json' nests deeper than"):
        list(iter_shard(path))


def test_the_bounds_themselves():
    assert not nests_deeper(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH)
    assert nests_deeper(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1))
    assert not nests_deeper(b'["\\"' + b"[" * 200 + b'"]')  # an escaped quote does not end the string
    assert not nests_deeper(b"[]" * 1000)  # many brackets, shallow
    canvas = io.BytesIO()
    np.save(canvas, np.zeros((224, 224, 3), np.uint8))
    data = canvas.getvalue()
    assert npy_member_problem(data, "a.canvas.npy") is None
    assert "holds 150527 bytes" in npy_member_problem(data[:-1], "a.canvas.npy")
    assert "6000-byte npy header" in npy_member_problem(data[:8] + (6000).to_bytes(2, "little"), "a.npy")
    # not an npy, or objects: np.load refuses those itself, within the member's size (a row, as before)
    assert npy_member_problem(b"\0" * 200, "a.canvas.npy") is None
    with pytest.raises(ValueError):
        decode_canvas(b"\0" * 200)
    with pytest.raises(ValueError, match="declares shape"):  # decode_canvas, whoever calls it, bounds it too
        decode_canvas(npy_declaring((100_000, 100_000, 3), data[128:]))


# -- hsi verify on a release with such a shard ----------------------------------------------------------------


def doubled_json(members):
    at = next(i for i, (name, _) in enumerate(members) if name.endswith(".json"))
    meta = json.loads(members[at][1])
    goldfish = json.dumps({**meta, "class_name": "goldfish"}).encode()
    return [*members[: at + 1], (members[at][0], goldfish), *members[at + 1 :]]


def deep_json(members):
    return [(name, DEEP if name.endswith(".json") else data) for name, data in members]


@pytest.mark.parametrize(
    "edit, says",
    [
        (doubled_json, "test_000000.json appears twice"),
        (deep_json, f"test_000000.json nests deeper than {MAX_JSON_DEPTH} levels"),
    ],
)
def test_verify_names_the_member_instead_of_a_datasets_traceback(tmp_path, capsys, edit, says):
    v1, _ = two_releases(tmp_path)
    rewrite_release_shard(v1, "test-00000.tar", edit)  # resealed: every hash true
    assert main(["verify", str(v1)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    failed = [line for line in captured.out.splitlines() if line.startswith("FAILED: ")]
    assert "members the shard reader refuses" in failed[0], captured.out  # (a viewer line may follow)
    assert f"test-00000.tar:{says}" in failed[0]
    assert "hard-spurious-imagenet/test: 3 shards hashed, not streamed (see its samples)" in captured.out


# -- hsi.stream ------------------------------------------------------------------------------------------------


def test_stream_refuses_a_sample_present_twice_naming_shard_and_member(tmp_path):
    from builder.formats.stream import StreamError, stream

    v1, _ = two_releases(tmp_path)

    def first_sample_again(members):  # after the second sample: the reader saw only one key at a time
        return [*members, *[(name, data) for name, data in members if name.startswith("test_000000.")]]

    rewrite_release_shard(v1, "test-00000.tar", first_sample_again)
    with pytest.raises(StreamError, match=r"test-00000.tar: member 'test_000000.cls' appears twice"):
        list(stream(str(v1), "hard-spurious-imagenet", "test"))


# -- hsi train proves the test split before its first step ---------------------------------------------------


def test_a_changed_test_shard_is_refused_before_any_training_step(tmp_path, capsys):
    from planted_spurious import compose_planted

    planted = compose_planted(tmp_path / "planted", per_class=16, canvas=32, sizes=(16,), majority=0.9, holdout=0.5)
    data, out = tmp_path / "data", tmp_path / "runs"
    shutil.copytree(planted, data)
    name = json.loads((data / "_info.json").read_text())["splits"]["test"]["filenames"][0]
    raw = bytearray((data / name).read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # size and manifest unchanged
    (data / name).write_bytes(bytes(raw))
    tiny = ["--model", "test_efficientnet", "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "1"]
    line = one_line_refusal(capsys, ["train", data, "--out", out, *tiny])
    assert f"{data / name} does not match the sha256 its manifest lists" in line
    assert "no training step was taken" in line
    assert not [p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")]


def test_tarfile_is_not_the_judge_of_duplicates(tmp_path):
    """tarfile's own index keeps the last of two members of a name (what compose took before)."""
    path = tmp_path / "val-00004.tar"
    write_tar(path, [("a.json", b"1"), ("a.json", b"2")])
    with tarfile.open(path) as tar:
        assert tar.extractfile("a.json").read() == b"2"
    with pytest.raises(ShardReadError, match="appears twice"):
        reader_members(path)


# -- the one writer's lock: `hsi validate` writes its report into a folder -------------------------------------


def test_validate_takes_the_folder_lock_a_compose_holds(tmp_path, capsys):
    from release_factory import make_composed_dataset

    from builder.core.locks import exclusive_folder

    dataset = make_composed_dataset(tmp_path / "out")
    before = {p.name: p.read_bytes() for p in dataset.iterdir() if p.is_file()}
    with exclusive_folder(dataset):  # a compose (or another validate) still writing it
        line = one_line_refusal(capsys, ["validate", dataset, "--no-previews"])
    assert f"{dataset} is being written by another hsi run" in line
    assert {p.name: p.read_bytes() for p in dataset.iterdir() if p.is_file()} == before
    assert main(["validate", str(dataset), "--no-previews"]) in (0, 1)  # released: it runs and reports
    assert (dataset / "validation.json").read_bytes() != before["validation.json"]


# -- validate and eval: the same refusals as rows -----------------------------------------------------------------


def test_validate_reports_each_refused_member_as_a_failure_row(tmp_path, capsys):
    from release_factory import make_composed_dataset

    dataset = make_composed_dataset(tmp_path / "out", splits={"test": 8})
    members = tar_members(dataset / "test-00000.tar")  # test_000000 .. test_000003
    late = [(name, data) for name, data in members if name.startswith("test_000000.")]
    write_tar(dataset / "test-00000.tar", [*deep_json(members[:3]), *members[3:], *late])
    assert main(["validate", str(dataset), "--no-previews"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"test-00000.tar/test_000000: deep-json: member 'test_000000.json' nests deeper than {MAX_JSON_DEPTH}" in err
    assert "test-00000.tar/test_000000: duplicate-member: member 'test_000000.cls' appears twice" in err


def test_eval_makes_a_shard_with_a_duplicated_member_an_unreadable_shard_row(tmp_path):
    from evaluation.predicting.data import EvalBatches, SourceSplit

    v1, _ = two_releases(tmp_path)
    rewrite_release_shard(v1, "test-00000.tar", doubled_json)
    batches = EvalBatches(SourceSplit(str(v1), "hard-spurious-imagenet", "test"), None, batch_size=4)
    rows, errors = batches.records()
    assert [(e["shard"], e["reason"]) for e in errors] == [("test-00000.tar", "unreadable-shard")]
    assert "member 'test_000000.json' appears twice" in errors[0]["detail"]
    assert sorted(r["key"] for r in rows) == ["test_000002", "test_000003", "test_000004"]  # the other shards


# -- eval and train take counts from the shards, as compose does -----------------------------------------------


def lie_about_counts(manifest_path: Path, split: str, lie: int) -> None:
    """Change the first shard's count by `lie` everywhere the manifest states it (its sha256 stay true)."""
    data = json.loads(manifest_path.read_text())
    entry = data["splits"][split]
    entry["shards"][0]["num_samples"] += lie
    entry["num_samples"] += lie
    entry["shard_lengths"][0] += lie
    manifest_path.write_text(json.dumps(data))


@pytest.mark.parametrize("lie", [-1, +1])
def test_eval_refuses_a_manifest_with_true_hashes_and_false_counts(tmp_path, capsys, lie):
    import timm
    import torch
    from release_factory import make_composed_dataset

    dataset = make_composed_dataset(tmp_path / "composed", splits={"test": 8}, shard_size=4)
    lie_about_counts(dataset / "_info.json", "test", lie)
    checkpoint, out = tmp_path / "test_resnet.pth", tmp_path / "eval"
    torch.save(timm.create_model("test_resnet", pretrained=False).state_dict(), checkpoint)
    model = ["--model", "timm:test_resnet", "--checkpoint", checkpoint]
    line = one_line_refusal(capsys, ["eval", dataset, *model, "--out", out, "--no-progress", "--workers", "0"])
    assert f"test-00000.tar holds 4 samples but its manifest says {4 + lie}" in line
    assert "nothing was evaluated" in line
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")]


def test_train_refuses_a_manifest_with_true_hashes_and_false_counts(tmp_path, capsys):
    from planted_spurious import compose_planted

    planted = compose_planted(tmp_path / "planted", per_class=16, canvas=32, sizes=(16,), majority=0.9, holdout=0.5)
    data, out = tmp_path / "data", tmp_path / "runs"
    shutil.copytree(planted, data)
    lie_about_counts(data / "_info.json", "test", +1)
    tiny = ["--model", "test_efficientnet", "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "1"]
    line = one_line_refusal(capsys, ["train", data, "--out", out, *tiny])
    assert "test-00000.tar holds" in line and "no training step was taken" in line
    assert not [p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")]
