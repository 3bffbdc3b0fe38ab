"""Hostile entries in folders `--overwrite` replaces: links out of the folder (a `previews` link, a
link inside `_state/`, the folder itself a link), odd names (a newline, non-ASCII), and records of
ours that are not what we write (a `validation.json` that is not an object or lists 10,000 names, an
`_export.json` whose paths are not strings): a clear refusal, never a crash, nothing outside touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from parts_factory import compose_args, fake_images, write_parts
from release_factory import make_composed_dataset

from builder.core.folders import foreign_entries
from cards.release import ReleaseError, build_release, foreign_release_entries
from hsi.cli import main

WNIDS = ["n01443537", "n02437312"]


def tree(folder: Path) -> dict[str, bytes | str | None]:
    """Every entry below `folder` by relative path: a link's target, a file's bytes, None for a folder."""
    entries: dict[str, bytes | str | None] = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        entries[name] = str(path.readlink()) if path.is_symlink() else path.read_bytes() if path.is_file() else None
    return entries


@pytest.fixture()
def composed(tmp_path) -> tuple[list[str], Path, Path]:
    """A finished compose with one preview sheet, and a folder outside it holding a user's file."""
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=1)})
    args = compose_args(tmp_path / "parts", tmp_path / "out", "--sizes", "56", "--name", "small", "--no-progress")
    assert main(args) == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.png").write_bytes(b"someone's")
    return args, tmp_path / "out" / "small", outside


def test_a_previews_link_leading_out_is_refused_and_what_it_leads_to_is_kept(composed, capsys):
    args, dataset, outside = composed
    (dataset / "previews").symlink_to(outside, target_is_directory=True)
    (dataset / "validation.json").write_text(json.dumps({"previews": ["previews/keep.png"]}))
    before = tree(dataset)
    assert main([*args, "--overwrite"]) == 2
    assert f"--overwrite would delete previews in {dataset}" in capsys.readouterr().err
    assert tree(dataset) == before and tree(outside) == {"keep.png": b"someone's"}


def test_a_link_inside_state_named_like_a_record_is_refused(composed, capsys):
    args, dataset, outside = composed
    (dataset / "_state").mkdir(exist_ok=True)
    (dataset / "_state" / "val-00000.tar.json").unlink(missing_ok=True)
    (dataset / "_state" / "val-00000.tar.json").symlink_to(outside / "keep.png")
    assert main([*args, "--overwrite"]) == 2
    assert f"--overwrite would delete _state/val-00000.tar.json in {dataset}" in capsys.readouterr().err
    assert tree(outside) == {"keep.png": b"someone's"}


def test_an_output_folder_that_is_a_link_is_refused_not_emptied(composed, tmp_path, capsys):
    args, dataset, outside = composed
    link = tmp_path / "out" / "linked"
    link.symlink_to(dataset, target_is_directory=True)
    before = tree(dataset)
    linked_args = [*args[: args.index("--name") + 1], "linked", *args[args.index("--name") + 2 :]]
    assert main([*linked_args, "--overwrite"]) == 2
    message = capsys.readouterr().err
    assert f"{link} is a link" in message and "Traceback" not in message
    assert tree(dataset) == before


@pytest.mark.parametrize(
    ("name", "shown"), [("notes\nhsi: done.txt", "notes\\nhsi: done.txt"), ("café-☕.png", "café-☕.png")]
)
def test_odd_names_are_refused_and_named_on_one_line(composed, capsys, name, shown):
    args, dataset, _ = composed
    (dataset / "previews").mkdir(exist_ok=True)
    (dataset / "previews" / name).write_bytes(b"someone's")
    assert main([*args, "--overwrite"]) == 2
    message = capsys.readouterr().err
    assert f"--overwrite would delete previews/{shown} in {dataset}" in message
    assert len(message.strip().splitlines()) == 1
    assert (dataset / "previews" / name).read_bytes() == b"someone's"


@pytest.mark.parametrize(
    "report",
    [[1, 2], "previews/x.png", None, {"previews": {"previews/x.png": 1}}, {"previews": [["a"], {"b": 1}, None]}],
)
def test_a_validation_report_that_is_not_ours_claims_nothing_and_does_not_crash(tmp_path, report):
    folder = tmp_path / "set"
    (folder / "previews").mkdir(parents=True)
    (folder / "previews" / "x.png").write_bytes(b"png")
    (folder / "_info.json").write_text(json.dumps({"stage": ["compose"]}))
    (folder / "validation.json").write_text(json.dumps(report))
    assert foreign_entries(folder) == ["previews/x.png"]


def test_a_validation_report_listing_ten_thousand_previews_is_read_quickly(tmp_path):
    folder = tmp_path / "set"
    (folder / "previews").mkdir(parents=True)
    for name in ("sheet-0.png", "mine.png"):
        (folder / "previews" / name).write_bytes(b"png")
    listed = [f"previews/sheet-{i}.png" for i in range(10_000)]
    (folder / "validation.json").write_text(json.dumps({"previews": listed}))
    assert foreign_entries(folder) == ["previews/mine.png"]


@pytest.mark.parametrize("path", [7, None, ["a"], {"a": 1}])
def test_an_export_record_whose_paths_are_not_strings_claims_nothing(tmp_path, capsys, path):
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=1)})
    composed = compose_args(tmp_path / "parts", tmp_path / "out", "--sizes", "56", "--name", "small", "--no-progress")
    assert main(composed) == 0
    folder = tmp_path / "folders"
    args = ["export", str(tmp_path / "out" / "small"), "--imagefolder", str(folder)]
    assert main(args) == 0
    record = json.loads((folder / "_export.json").read_text())
    record["files"][0]["path"] = path
    (folder / "_export.json").write_text(json.dumps(record))
    before = tree(folder)
    assert main([*args, "--overwrite"]) == 2
    message = capsys.readouterr().err
    assert "--overwrite would delete " in message and "Traceback" not in message
    assert tree(folder) == before


SHARDS = ["data/hard-spurious-imagenet/test-00000.tar", "data/hard-spurious-imagenet/test-00001.tar"]


@pytest.mark.parametrize(
    ("configs", "foreign"),
    [
        ([1], ["data/hard-spurious-imagenet/", "previews/hard-spurious-imagenet/"]),
        ({"hard-spurious-imagenet": {"splits": {"test": "test-00000.tar"}}}, SHARDS),
        ({"hard-spurious-imagenet": {"splits": {"test": [{"filename": ["x"]}]}}}, SHARDS),
        ({"../..": {"splits": {}}}, ["data/hard-spurious-imagenet/", "previews/hard-spurious-imagenet/"]),
    ],
)
def test_a_release_record_that_is_not_ours_claims_nothing_and_does_not_crash(tmp_path, configs, foreign):
    dataset = make_composed_dataset(tmp_path / "sets", previews=1)
    release = build_release(tmp_path / "hard-spurious-imagenet", [dataset], version="v1.0.0")
    meta = json.loads((release / "_release.json").read_text())
    meta["configs"] = configs
    (release / "_release.json").write_text(json.dumps(meta))
    assert foreign_release_entries(release) == foreign
    before = tree(release)
    with pytest.raises(ReleaseError, match="--overwrite would delete"):
        build_release(release, [dataset], overwrite=True, version="v1.0.0")
    assert tree(release) == before


def test_validation_refuses_a_previews_link_and_writes_nothing_through_it(composed, capsys):
    """Failed before: the contact sheet outside was replaced by validation's, through the link."""
    _, dataset, outside = composed
    (outside / "contact_sheet.png").write_bytes(b"someone's sheet")
    (dataset / "previews").symlink_to(outside, target_is_directory=True)
    (dataset / "validation.json").write_text(json.dumps({"previews": ["previews/contact_sheet.png"]}))
    assert main(["validate", str(dataset)]) == 2
    assert f"{dataset / 'previews'} is a link: validation draws its sheets only into a real folder" in (
        capsys.readouterr().err
    )
    assert tree(outside) == {"keep.png": b"someone's", "contact_sheet.png": b"someone's sheet"}


@pytest.mark.parametrize("listed", [7, "previews/contact_sheet.png", None, {"previews/contact_sheet.png": 1}])
def test_validation_reads_an_earlier_report_whose_previews_are_not_a_list(composed, listed, capsys):
    _, dataset, _ = composed
    (dataset / "validation.json").write_text(json.dumps({"previews": listed}))
    assert main(["validate", str(dataset)]) == 0
    assert json.loads((dataset / "validation.json").read_text())["previews"] == ["previews/contact_sheet.png"]


def test_a_release_folder_that_is_a_link_is_refused_and_left_as_it_was(tmp_path):
    """Failed before: the link was swapped for the new release, then rmtree raised on the old one."""
    dataset = make_composed_dataset(tmp_path / "sets", previews=1)
    release = build_release(tmp_path / "hard-spurious-imagenet", [dataset], version="v1.0.0")
    link = tmp_path / "linked"
    link.symlink_to(release, target_is_directory=True)
    before = tree(release)
    with pytest.raises(ReleaseError, match=r"linked is a link \(to .*\): --overwrite only replaces a real release"):
        build_release(link, [dataset], overwrite=True, version="v1.0.0")
    assert link.is_symlink() and tree(release) == before
    # the first release's lock file stays beside it, as every folder's lock does
    names = ["hard-spurious-imagenet", "linked", "sets", ".hard-spurious-imagenet.lock"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_scgs_sheets_are_never_drawn_through_a_linked_previews_folder(tmp_path):
    from builder.core.errors import InputError
    from cards.scgs import write_scgs_previews

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "scgs_preview.png").write_bytes(b"mine")
    folder = tmp_path / "scgs"
    folder.mkdir()
    (folder / "previews").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InputError, match="is a link"):
        write_scgs_previews(folder)
    assert [p.name for p in outside.iterdir()] == ["scgs_preview.png"]
    assert (outside / "scgs_preview.png").read_bytes() == b"mine"
