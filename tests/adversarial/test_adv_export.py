"""`hsi export --imagefolder` and the build side's deletes by name, attacked (issue 21, points 2, 5, 9, 13).

A dataset handed over by someone else (from the Hub, say) is built here exactly as its author
would: shards plus an `_info.json` whose sha256s match them, so only the samples' metadata is
hostile. Each test says what it failed with before its fix."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

import pytest
from parts_factory import compose_args, fake_images, write_parts
from release_factory import composite_json, jpeg

from builder.compose.export import claim_folder, read_export_record
from builder.core.classes import class_of, imagenet_classes
from builder.core.errors import HsiError
from builder.core.locks import exclusive_folder
from builder.core.manifest import ErrorCounts, Manifest, SplitEntry
from builder.core.shard_write import write_shard
from builder.formats.composites import SCHEMA_VERSION, composite_members, count_composites
from hsi.cli import main

# A two-class subset (labels 0 and 1 in sorted wnid order, as the -10 subset numbers them): no
# placeholder folders beyond one per class, so these exports stay small.
PAIRS = {"n01443537": "n02437312", "n02437312": "n01443537"}


def sample(index: int, wnid: str, label: int | None = None, changes: dict | None = None) -> tuple[str, dict, bytes]:
    """(key, metadata, jpg) of one composite of class `wnid`, centre, own background, 56 px."""
    meta = composite_json("tiny", "val", index * 12, 0, class_of(wnid).index, 0)  # index*12: group CeO, size 56
    meta["label"] = sorted(PAIRS).index(wnid) if label is None else label
    meta.update(changes or {})
    return f"val_{index:06d}", meta, jpeg(index)


def write_dataset(folder: Path, samples, spec: dict | None = None, raw: dict | None = None) -> Path:
    """OUT/<config> as a stranger writes it: shards, and a manifest whose sha256s match them.
    `raw` adds samples by key with members given as they are (a json that does not parse)."""
    members = {key: composite_members(jpg, meta["label"], meta) for key, meta, jpg in samples}
    members.update(raw or {})
    stats = write_shard(folder / "val-00000.tar", list(members.items()))
    good = [meta for _, meta, _ in samples if meta["group"] == "CeO" and isinstance(meta["size"], int)]
    Manifest(
        stage="compose",
        config="tiny",
        tool={"name": "hard-spurious-imagenet", "version": "0.1.0"},
        fingerprint="tiny0000000000",
        spec=spec if spec is not None else {"name": "tiny", "subset": {"pairs": PAIRS}},
        splits={"val": SplitEntry("val", [stats], counts=count_composites(good))},
        errors=ErrorCounts(),
        schema_version=SCHEMA_VERSION,
    ).write(folder)
    return folder


def files_outside(root: Path, export: Path) -> dict[str, bytes | None]:
    """Every entry below `root` but the export folder (and its lock beside it), with a file's bytes."""
    skip = {export, export.with_name(f".{export.name}.lock")}
    return {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
        for p in sorted(root.rglob("*"))
        if not any(p == s or s in p.parents for s in skip)
    }


def tree(folder: Path) -> dict[str, bytes | None]:
    return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")}


# --- point 2: names from the samples never become paths outside the export ------------------------------------


HOSTILE = {  # key -> (changes to its metadata, the reason it is skipped with)
    1: ({"source_id": "../../../../../escaped"}, "unsafe-name"),
    2: ({"wnid": "../../../../../../outside/n01443537"}, "unsafe-name"),
    3: ({"size": "../../../.."}, "schema"),
    4: ({"size": -56}, "unsafe-name"),
    5: ({"source_id": "a/../../../../../../x"}, "unsafe-name"),
    6: ({"group": "../../../../gone"}, "group"),
    7: ({"label": 0, "wnid": "n02437312", "class_index": class_of("n02437312").index}, "label"),  # label of the other
}


@pytest.mark.parametrize("layout", ["paper", "groups"])
def test_hostile_sample_names_are_skipped_and_recorded_never_written_outside(tmp_path, capsys, layout):
    """Failed before: `../` in source_id, wnid or size wrote JPEGs (paper) and created folders
    (groups) outside the export; an unknown group or a json that does not parse was a traceback."""
    good = [sample(0, "n01443537"), sample(8, "n02437312"), sample(9, "n01443537")]
    hostile = [sample(n, "n01443537", changes=changes) for n, (changes, _) in HOSTILE.items()]
    broken = {"val_000099": {"cls": b"0", "jpg": jpeg(99), "json": b'{"wnid": "../../x", '}}
    dataset = write_dataset(tmp_path / "sets" / "tiny", good + hostile, raw=broken)
    folder = tmp_path / "exports" / "deep" / "folders"
    folder.parent.mkdir(parents=True)
    before = files_outside(tmp_path, folder)
    code = main(["export", str(dataset), "--imagefolder", str(folder), "--layout", layout])
    captured = capsys.readouterr()
    assert code == 0 and "Traceback" not in captured.err
    assert files_outside(tmp_path, folder) == before  # nothing written, nothing created outside
    record = json.loads((folder / "_export.json").read_text())
    expected = {f"val_{n:06d}": reason for n, (_, reason) in HOSTILE.items()}
    if layout == "groups":  # our layout names files by key, not source id; `/` in a group becomes `_`
        del expected["val_000001"], expected["val_000005"]
        expected["val_000006"] = "unsafe-name"  # `.._.._.._.._gone` would be a hidden folder
    expected["val_000099"] = "json-decode"
    assert {row["key"]: row["reason"] for row in record["skipped"]} == expected
    assert record["errors"]["total"] == len(expected)
    assert f"warning: skipped {len(expected)} samples" in captured.err
    exported = {row["key"] for row in record["files"]}
    assert {key for key, _, _ in good} <= exported and not exported & set(expected)
    for row in record["files"]:
        path = folder / row["path"]
        assert path.resolve().is_relative_to(folder.resolve())
        assert hashlib.sha256(path.read_bytes()).hexdigest() == row["sha256"]
    from torchvision.datasets import ImageFolder

    root = folder / "val" / "56" / ("Group_1" if layout == "paper" else "CeO")
    loaded = ImageFolder(str(root), allow_empty=True)  # the subset's labels: 0 and 1 by sorted wnid
    assert loaded.classes == sorted(PAIRS)
    assert (
        sorted(target for _, target in loaded.samples)
        == sorted(sorted(PAIRS).index(class_of(Path(row["path"]).parent.name).wnid) for row in record["files"])
        == ([0, 0, 1] if layout == "paper" else [0, 0, 0, 0, 1])
    )


def test_an_export_folder_or_record_that_is_a_link_is_refused_never_followed(tmp_path, capsys):
    """An export with a class folder swapped for a link to someone's folder, or a record that is a
    link, is refused with --overwrite and nothing is deleted (before: a linked `_export.json` was
    read through the link and the folder replaced)."""
    dataset = write_dataset(tmp_path / "sets" / "tiny", [sample(0, "n01443537"), sample(8, "n02437312")])
    folder = tmp_path / "folders"
    args = ["export", str(dataset), "--imagefolder", str(folder)]
    assert main(args) == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "photo.JPEG").write_bytes(b"someone's photo")
    wnid_folder = folder / "val" / "56" / "Group_1" / "n02437312"
    for path in wnid_folder.iterdir():
        path.unlink()
    wnid_folder.rmdir()
    wnid_folder.symlink_to(mine, target_is_directory=True)
    before_folder, before_mine = tree(folder), tree(mine)
    assert main([*args, "--overwrite"]) == 2
    message = capsys.readouterr().err
    assert "--overwrite would delete val/56/Group_1/n02437312 in" in message and "Traceback" not in message
    assert tree(folder) == before_folder and tree(mine) == before_mine
    # the record itself a link (to a copy of itself): claims nothing, refused
    wnid_folder.unlink()
    wnid_folder.mkdir()
    (tmp_path / "record.json").write_bytes((folder / "_export.json").read_bytes())
    (folder / "_export.json").unlink()
    (folder / "_export.json").symlink_to(tmp_path / "record.json")
    before_folder = tree(folder)
    assert main([*args, "--overwrite"]) == 2
    message = capsys.readouterr().err
    assert "is a link; links are never followed" in message
    assert tree(folder) == before_folder and (tmp_path / "record.json").is_file()
    # a link given as --imagefolder
    (tmp_path / "via").symlink_to(mine, target_is_directory=True)
    assert main(["export", str(dataset), "--imagefolder", str(tmp_path / "via"), "--overwrite"]) == 2
    assert tree(mine) == before_mine


def test_a_second_export_into_a_locked_folder_is_refused(tmp_path, capsys):
    """Failed before: export took no lock; two exports into one folder raced on its rename."""
    dataset = write_dataset(tmp_path / "sets" / "tiny", [sample(0, "n01443537")])
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    with exclusive_folder(tmp_path / "real" / "folders"):
        assert main(["export", str(dataset), "--imagefolder", str(tmp_path / "link" / "folders")]) == 2
    assert "is being written by another hsi run" in capsys.readouterr().err
    assert not (tmp_path / "real" / "folders").exists()


# --- point 9: an ImageNet model reads the export with ImageNet's class indices ----------------------------------


def test_a_partial_build_reads_with_imagenet_indices_in_torchvision_and_timm(tmp_path, capsys):
    """Failed before: the 3 present class folders were numbered 0-2 by ImageFolder and by timm's
    reader, so an ImageNet model was scored against wrong labels, without a word."""
    wnids = ["n01440764", "n02437312", "n04592741"]  # ImageNet indices 0, 354 and 998 or so
    samples = [
        sample(n, wnid, label=class_of(wnid).index) for n, wnid in enumerate(wnids * 2)
    ]  # label = class index: the full label space
    mislabelled = sample(20, "n02437312", label=7)  # its cls says 7: its folder would say 354
    dataset = write_dataset(tmp_path / "sets" / "tiny", [*samples, mislabelled], spec={"name": "tiny"})
    folder = tmp_path / "folders"
    assert main(["export", str(dataset), "--imagefolder", str(folder)]) == 0
    err = capsys.readouterr().err
    assert "warning: the images hold 3 of the dataset's 1000 classes" in err
    assert f"--class-map {folder}/classes.txt" in err and "allow_empty=True" in err
    every = [c.wnid for c in imagenet_classes()]
    assert (folder / "classes.txt").read_text().splitlines() == every
    assert json.loads((folder / "class_to_idx.json").read_text()) == {c.wnid: c.index for c in imagenet_classes()}
    record = json.loads((folder / "_export.json").read_text())
    truth = {row["path"].split("/")[-1]: class_of(row["path"].split("/")[-2]).index for row in record["files"]}
    index_of = {f"{meta['source_id']}_1_56.JPEG": meta["class_index"] for _, meta, _ in samples}
    assert truth == index_of and [row["reason"] for row in record["skipped"]] == ["label"]
    root = folder / "val" / "56" / "Group_1"
    from torchvision.datasets import ImageFolder

    loaded = ImageFolder(str(root), allow_empty=True)
    assert loaded.classes == every and len(loaded) == len(samples)
    assert {Path(path).name: target for path, target in loaded.samples} == index_of
    with pytest.raises(FileNotFoundError, match="Found no valid file"):
        ImageFolder(str(root))  # without allow_empty: refused loudly, never renumbered
    from timm.data.readers.reader_image_folder import ReaderImageFolder

    reader = ReaderImageFolder(str(root), class_map=str(folder / "classes.txt"))  # validate.py --class-map
    assert {Path(path).name: target for path, target in reader.samples} == index_of


# --- point 13: --overwrite deletes only files its record lists whose bytes still match ----------------------------


def test_overwrite_never_deletes_what_a_hand_written_record_lists(tmp_path, capsys):
    """Failed before: `export --overwrite` deleted every file a hand-written `_export.json` listed."""
    dataset = write_dataset(tmp_path / "sets" / "tiny", [sample(0, "n01443537")])
    photos = tmp_path / "photos"
    (photos / "trip").mkdir(parents=True)
    (photos / "a.JPEG").write_bytes(b"my photo a")
    (photos / "trip" / "b.JPEG").write_bytes(b"my photo b")
    rows = [
        {"path": p, "sha256": "0" * 64, "shard": "x", "key": "x", "split": "val"} for p in ("a.JPEG", "trip/b.JPEG")
    ]
    (photos / "_export.json").write_text(json.dumps({"files": rows}))
    before = tree(photos)
    assert main(["export", str(dataset), "--imagefolder", str(photos), "--overwrite"]) == 2
    message = capsys.readouterr().err
    assert "--overwrite would delete a.JPEG, trip/b.JPEG in" in message and "Traceback" not in message
    assert tree(photos) == before
    # a record that lists paths outside the folder is not one of ours: it claims nothing
    (tmp_path / "outside.txt").write_text("keep")
    for path in ("../outside.txt", "trip/../../outside.txt", "/etc/passwd"):
        rows = [{"path": path, "sha256": hashlib.sha256(b"keep").hexdigest()}]
        (photos / "_export.json").write_text(json.dumps({"files": rows}))
        assert main(["export", str(dataset), "--imagefolder", str(photos), "--overwrite"]) == 2
        message = capsys.readouterr().err
        assert "_export.json is not a record of ours" in message and "files[0].path" in message
        assert (tmp_path / "outside.txt").read_text() == "keep" and (photos / "a.JPEG").is_file()


def test_overwrite_refuses_an_exported_file_that_was_changed(tmp_path, capsys):
    """Failed before: a file of the export that the user edited afterwards was deleted with it."""
    dataset = write_dataset(tmp_path / "sets" / "tiny", [sample(0, "n01443537"), sample(8, "n02437312")])
    folder = tmp_path / "folders"
    args = ["export", str(dataset), "--imagefolder", str(folder)]
    assert main(args) == 0
    edited = sorted(folder.rglob("*.JPEG"))[0]
    edited.write_bytes(b"retouched by hand")
    (folder / "classes.txt").write_text("my own class list\n")
    before = tree(folder)
    assert main([*args, "--overwrite"]) == 2
    message = capsys.readouterr().err
    assert f"--overwrite would delete classes.txt, {edited.relative_to(folder).as_posix()} in" in message
    assert tree(folder) == before
    edited.unlink()
    (folder / "classes.txt").unlink()
    assert main([*args, "--overwrite"]) == 0  # only the export's own files left: replaced
    assert edited.is_file() and (folder / "classes.txt").read_text().splitlines() == sorted(PAIRS)


def test_compose_overwrite_keeps_a_users_state_record_for_a_shard_that_does_not_exist(tmp_path, capsys):
    """Failed before: `_state/val-00099.tar.json` matched the state-record pattern and was deleted."""
    write_parts(tmp_path / "parts", {"val": fake_images(["n01443537", "n02437312"], per_class=1)})
    args = compose_args(tmp_path / "parts", tmp_path / "out", "--sizes", "56", "--name", "small", "--no-progress")
    assert main(args) == 0
    dataset = tmp_path / "out" / "small"
    ours = dataset / "_state" / "val-00000.tar.json"
    assert ours.is_file()
    planted = {
        "val-00099.tar.json": ours.read_text(),  # a copy of ours, for a shard that is not there
        "val-00098.tar.json": "my notes",
        "val-00097.tar.json.12.tmp": "half",
    }
    for name, text in planted.items():
        (dataset / "_state" / name).write_text(text)
    assert main([*args, "--overwrite"]) == 2
    message = capsys.readouterr().err
    assert "--overwrite would delete _state/val-00097.tar.json.12.tmp, _state/val-00098.tar.json, " in message
    assert "_state/val-00099.tar.json in" in message
    assert {name: (dataset / "_state" / name).read_text() for name in planted} == planted
    (dataset / "_state" / "val-00099.tar.json").unlink()
    (dataset / "_state" / "val-00097.tar.json.12.tmp").unlink()
    ours.write_text("not a record")  # a record of a shard that exists, but not ours
    assert main([*args, "--overwrite"]) == 2
    assert "_state/val-00000.tar.json, _state/val-00098.tar.json in" in capsys.readouterr().err
    (dataset / "_state" / "val-00098.tar.json").unlink()
    ours.unlink()
    assert main([*args, "--overwrite"]) == 0 and ours.is_file()


# --- point 5: a linked config folder reaches the same lock ----------------------------------------------------


def test_compose_through_a_linked_config_folder_meets_the_lock(tmp_path, capsys):
    """Failed before: the lock sat beside the path given (`elsewhere/.small.lock`), so a compose
    through a link to OUT/small ran while another held OUT/small."""
    write_parts(tmp_path / "parts", {"val": fake_images(["n01443537"], per_class=1)})
    (tmp_path / "out" / "small").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "small").symlink_to(tmp_path / "out" / "small", target_is_directory=True)
    args = compose_args(tmp_path / "parts", tmp_path / "elsewhere", "--sizes", "56", "--name", "small", "--no-progress")
    with exclusive_folder(tmp_path / "out" / "small"):
        assert main(args) == 2
        assert f"is being written by another hsi run (pid {os.getpid()})" in capsys.readouterr().err
    assert not any((tmp_path / "out" / "small").iterdir())


# --- fuzzing the reader of `_export.json` ----------------------------------------------------------------------


def mutations(data: bytes, rng: random.Random):
    """Seeded corruptions of a record: byte flips, cuts and insertions, and JSON values swapped."""
    for _ in range(60):
        raw = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(raw))
            choice = rng.random()
            if choice < 0.4:
                raw[at] = rng.randrange(256)
            elif choice < 0.7:
                del raw[at : at + rng.randint(1, 40)]
            else:
                raw[at:at] = rng.choice([b"../", b'"', b"[", b"{", b"\x00", b"\\", b"1e999", b"NaN", b","])
        yield bytes(raw)
    record = json.loads(data)
    odd = ["../x", "/abs", "", 7, -1, None, True, [], {}, [1], {"path": 1}, "a" * 300, "n1", "x/./y", "\n", 1.5]
    for _ in range(140):
        mutated = json.loads(json.dumps(record))
        node = mutated  # walk down to a random container, then replace one of its values
        for _ in range(rng.randint(0, 3)):
            children = [v for v in (node.values() if isinstance(node, dict) else node) if isinstance(v, (dict, list))]
            if not children:
                break
            node = rng.choice(children)
        if isinstance(node, dict) and node:
            node[rng.choice(sorted(node))] = rng.choice(odd)
        elif isinstance(node, list) and node:
            node[rng.randrange(len(node))] = rng.choice(odd)
        yield json.dumps(mutated).encode()


def test_the_export_record_reader_gives_a_record_or_one_line(tmp_path):
    dataset = write_dataset(tmp_path / "sets" / "tiny", [sample(0, "n01443537"), sample(8, "n02437312")])
    folder = tmp_path / "folders"
    assert main(["export", str(dataset), "--imagefolder", str(folder)]) == 0
    original = (folder / "_export.json").read_bytes()
    before = tree(folder)
    outcomes = {"valid": 0, "refused": 0}
    for data in mutations(original, random.Random(21)):
        (folder / "_export.json").write_bytes(data)
        for read in (lambda: read_export_record(folder), lambda: claim_folder(folder, overwrite=True)):
            try:
                read()
                outcomes["valid"] += 1
            except HsiError as error:
                assert "\n" not in str(error)
                outcomes["refused"] += 1
    assert outcomes["valid"] and outcomes["refused"]
    (folder / "_export.json").write_bytes(original)
    assert tree(folder) == before  # reading and claiming never deleted anything
