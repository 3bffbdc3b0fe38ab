"""Whole folders the toolkit replaces: `--overwrite` of a stage's folder (its `previews/` and `_state/`
included), `hsi export --overwrite` and `hsi release --overwrite` never delete a file the toolkit did
not write; they refuse and name it. Each test of a hole failed before its fix (the file was deleted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from parts_factory import compose_args, fake_images, write_parts
from release_factory import make_composed_dataset

from builder.core.folders import SCGS_LABEL_CHECK_NAME, SCGS_PREVIEW_NAME, foreign_entries
from cards.release import ReleaseError, build_release
from hsi.cli import main

WNIDS = ["n01443537", "n02437312"]


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry below `folder` by relative path: a file's bytes, None for a folder."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))
    }


@pytest.fixture()
def composed(tmp_path) -> tuple[list[str], Path]:
    """A small finished compose (one image of each of two classes, one size), validated with its
    parts so that `previews/` holds the four sheets validation lists: (its arguments, its folder)."""
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=1)})
    args = compose_args(tmp_path / "parts", tmp_path / "out", "--sizes", "56", "--name", "small", "--no-progress")
    assert main(args) == 0
    dataset = tmp_path / "out" / "small"
    assert main(["validate", str(dataset), "--parts", str(tmp_path / "parts")]) == 0
    return args, dataset


def test_overwrite_of_a_validated_folder_of_ours_replaces_it_whole(composed):
    args, dataset = composed
    listed = json.loads((dataset / "validation.json").read_text())["previews"]
    assert sorted(listed) == [
        "previews/contact_sheet.png",
        "previews/parts_grid.png",
        "previews/score_distributions.png",
        "previews/worst_fills.png",
    ]
    assert sorted(p.name for p in (dataset / "previews").iterdir()) == [Path(p).name for p in sorted(listed)]
    shards = {p.name: p.read_bytes() for p in dataset.glob("*.tar")}
    assert foreign_entries(dataset) == []
    assert main([*args, "--overwrite"]) == 0
    # the report and its previews belonged to the folder replaced: none is left to vouch for the new one
    assert not (dataset / "previews").exists() and not (dataset / "validation.json").exists()
    assert {p.name: p.read_bytes() for p in dataset.glob("*.tar")} == shards


def test_validating_again_without_parts_drops_the_sheets_the_new_report_does_not_list(composed):
    """The earlier report's parts grid and score plot go with it: a second `hsi validate` without
    --parts draws neither, and a sheet left behind unlisted would make --overwrite refuse."""
    args, dataset = composed
    assert main(["validate", str(dataset)]) == 0
    listed = json.loads((dataset / "validation.json").read_text())["previews"]
    assert listed == ["previews/contact_sheet.png"]
    assert sorted(p.name for p in (dataset / "previews").iterdir()) == ["contact_sheet.png"]
    assert main([*args, "--overwrite"]) == 0


def test_a_report_cannot_make_validation_delete_a_file_it_did_not_draw(composed):
    args, dataset = composed
    (dataset / "previews" / "mine.png").write_bytes(b"mine")
    report = json.loads((dataset / "validation.json").read_text())
    report["previews"] += ["previews/mine.png", "previews/../_info.json", "../outside.png"]
    (dataset / "validation.json").write_text(json.dumps(report))
    (dataset.parent / "outside.png").write_bytes(b"outside")
    assert main(["validate", str(dataset)]) == 0
    assert (dataset / "previews" / "mine.png").read_bytes() == b"mine"
    assert (dataset / "_info.json").is_file() and (dataset.parent / "outside.png").read_bytes() == b"outside"


@pytest.mark.parametrize(
    ("planted", "named"),
    [
        ("previews/my-plot.png", "previews/my-plot.png"),  # a picture validation does not list
        ("previews/mine/notes.txt", "previews/mine/"),  # a folder of someone else's in our previews/
        ("_state/notes.txt", "_state/notes.txt"),  # not a shard's state record
        ("_state/val-00000.tar.json/notes.txt", "_state/val-00000.tar.json/"),  # a folder named like a record
        ("validation.md/draft.txt", "validation.md/"),  # a folder where we write a file
        ("val-00001.tar/draft.txt", "val-00001.tar/"),  # a folder named like a shard
    ],
)
def test_overwrite_refuses_a_users_entry_inside_our_own_folders(composed, capsys, planted, named):
    """Failed before: `previews/` and `_state/` were taken as wholly ours, and a name as ours whatever
    its kind, so --overwrite deleted the user's entry with the folder."""
    args, dataset = composed
    place = (dataset / planted).parent
    if place.is_file():  # our file there is gone, a folder of the user's took its name
        place.unlink()
    place.mkdir(parents=True, exist_ok=True)
    (dataset / planted).write_text("someone's")
    before = tree(dataset)
    assert main([*args, "--overwrite"]) == 2
    assert f"--overwrite would delete {named} in {dataset}" in capsys.readouterr().err
    assert tree(dataset) == before


def test_a_report_listing_a_folder_or_a_path_outside_previews_claims_nothing(tmp_path):
    folder = tmp_path / "set"
    (folder / "previews" / "album").mkdir(parents=True)
    (folder / "previews" / "album" / "photo.png").write_bytes(b"mine")
    (folder / "previews" / "contact_sheet.png").write_bytes(b"ours")
    (folder / "_info.json").write_text(json.dumps({"stage": "compose"}))
    listed = ["previews/album", "previews/../previews/album/photo.png", "previews/contact_sheet.png", 7]
    (folder / "validation.json").write_text(json.dumps({"previews": listed}))
    assert foreign_entries(folder) == ["previews/album/"]
    (folder / "validation.json").write_text("{not json")  # an unreadable report lists nothing
    assert foreign_entries(folder) == ["previews/album/", "previews/contact_sheet.png"]


@pytest.mark.parametrize(("stage", "foreign"), [("scgs", []), ("compose", [SCGS_LABEL_CHECK_NAME, SCGS_PREVIEW_NAME])])
def test_the_scgs_sheets_are_ours_only_in_a_folder_hsi_scgs_wrote(tmp_path, stage, foreign):
    folder = tmp_path / "set"
    (folder / "previews").mkdir(parents=True)
    for name in (SCGS_PREVIEW_NAME, SCGS_LABEL_CHECK_NAME):
        (folder / "previews" / name).write_bytes(b"png")
    (folder / "_info.json").write_text(json.dumps({"stage": stage}))
    assert foreign_entries(folder) == [f"previews/{name}" for name in foreign]


# --- hsi export --imagefolder --overwrite -----------------------------------------------------------


@pytest.fixture()
def exported(tmp_path) -> tuple[list[str], Path]:
    write_parts(tmp_path / "parts", {"val": fake_images(WNIDS, per_class=1)})
    assert (
        main(compose_args(tmp_path / "parts", tmp_path / "out", "--sizes", "56", "--name", "small", "--no-progress"))
        == 0
    )
    folder = tmp_path / "folders"
    args = ["export", str(tmp_path / "out" / "small"), "--imagefolder", str(folder)]
    assert main(args) == 0
    return args, folder


def test_export_overwrite_refuses_while_the_folder_holds_a_users_file(exported, capsys):
    """Failed before: --overwrite removed the whole earlier export, a user's files in it too."""
    args, folder = exported
    image = sorted(folder.rglob("*.JPEG"))[0]
    planted = [folder / "notes.txt", image.with_name("my-photo.JPEG"), folder / "val" / "56" / "mine" / "a.txt"]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("someone's")
    before = tree(folder)
    assert main([*args, "--overwrite"]) == 2
    message = capsys.readouterr().err
    mine = image.with_name("my-photo.JPEG").relative_to(folder).as_posix()
    assert f"--overwrite would delete notes.txt, {mine}, val/56/mine/ in {folder}" in message
    assert "move them out of the folder first, or choose another --imagefolder" in message
    assert tree(folder) == before
    for path in planted:
        path.unlink()
    (folder / "val" / "56" / "mine").rmdir()
    assert main([*args, "--overwrite"]) == 0  # only the export's own files left: replaced, the same bytes
    assert tree(folder) == {k: v for k, v in before.items() if (folder / k).exists()}


# --- hsi release --overwrite ----------------------------------------------------------------------


def test_release_overwrite_refuses_while_the_release_holds_a_users_file(tmp_path):
    """Failed before: the old release was renamed aside and deleted whole, a user's files in it too."""
    dataset = make_composed_dataset(tmp_path / "sets", previews=2)
    release = build_release(tmp_path / "hard-spurious-imagenet", [dataset], version="v1.0.0")
    config = "hard-spurious-imagenet"
    assert sorted(p.name for p in (release / "previews" / config).iterdir()) == ["sheet-0.png", "sheet-1.png"]
    planted = ["notes.txt", f"data/{config}/mine.txt", f"previews/{config}/my-photo.png", "drafts/card.md"]
    for name in planted:
        (release / name).parent.mkdir(parents=True, exist_ok=True)
        (release / name).write_text("someone's")
    before = tree(release)
    with pytest.raises(ReleaseError) as refused:
        build_release(release, [dataset], overwrite=True, version="v1.0.0")
    message = str(refused.value)
    assert f"--overwrite would delete data/{config}/mine.txt, drafts/, notes.txt, previews/{config}/my-photo.png" in (
        message
    )
    assert "move them out of the folder first, or choose another --out" in message
    assert tree(release) == before
    # nothing staged (the lock file of the first release stays, as every folder's lock does)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [f".{release.name}.lock"]
    for name in planted:
        (release / name).unlink()
    (release / "drafts").rmdir()
    rebuilt = build_release(release, [dataset], overwrite=True, version="v1.0.0")
    assert tree(rebuilt) == {k: v for k, v in before.items() if (release / k).exists()}
