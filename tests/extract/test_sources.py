"""Readers: every layout gives the same ids, labels and boxes; bad inputs become issues."""

import shutil

import pytest
from fake_imagenet import add_duplicate, write_tree

from builder.core.records import Box
from builder.extract.sources import SourceError, load_sources


def _expected(tree):
    return {
        img.image_id: (img.wnid, tuple(Box(x0, y0, x1, y1, w) for w, x0, y0, x1, y1 in img.boxes)) for img in tree.good
    }


def _found(listing):
    return {r.image_id: (r.wnid, r.boxes) for r in listing.records}


@pytest.mark.parametrize(
    "layout,split,val_sorted",
    [
        ("ilsvrc", "val", False),
        ("ilsvrc", "val", True),
        ("ilsvrc", "train", False),
        ("kaggle", "val", False),
        ("kaggle", "train", False),
    ],
)
def test_readers_find_ids_labels_and_boxes(tmp_path, layout, split, val_sorted):
    tree = write_tree(tmp_path, layout=layout, split=split, count=6, val_sorted=val_sorted)
    listing = load_sources(tmp_path, split, announce=lambda _: None)
    assert _found(listing) == _expected(tree)
    assert [r.image_id for r in listing.records] == sorted(_expected(tree))
    assert listing.layout.kind == layout
    if layout == "kaggle":  # Kaggle ships both: the XMLs are preferred (issue 10, point 2)
        assert listing.annotations.parts[-3:] == ("Annotations", "CLS-LOC", split)
    assert listing.issues == []


def test_kaggle_root_may_be_the_ilsvrc_folder(tmp_path):
    tree = write_tree(tmp_path, layout="kaggle", split="val", count=3)
    listing = load_sources(tmp_path / "ILSVRC", "val", announce=lambda _: None)
    assert _found(listing) == _expected(tree)
    assert listing.annotations.parts[-3:] == ("Annotations", "CLS-LOC", "val")
    shutil.rmtree(tmp_path / "ILSVRC" / "Annotations")  # the csv beside ILSVRC/ when there are no XMLs
    listing = load_sources(tmp_path / "ILSVRC", "val", announce=lambda _: None)
    assert _found(listing) == _expected(tree)
    assert listing.annotations.name == "LOC_val_solution.csv"


def test_boxes_found_under_root_are_announced(tmp_path):
    write_tree(tmp_path, count=2)
    said = []
    load_sources(tmp_path, "val", announce=said.append)
    assert len(said) == 1 and "bbox" in said[0] and "--boxes" in said[0]


def test_bad_inputs_found_while_listing(tmp_path):
    tree = write_tree(tmp_path, split="val", count=4, bad=True, val_sorted=True)
    duplicate = add_duplicate(tree)
    listing = load_sources(tmp_path, "val", announce=lambda _: None)
    reasons = {}
    for issue in listing.issues:
        reasons.setdefault(issue.image_id, set()).add(issue.reason)
    assert "duplicate-id" in reasons[duplicate]
    for image_id in (
        "missing-annotation",
        "malformed-annotation",
        "box-empty",
        "unknown-wnid",
        "annotation-without-image",
        "box-label-mismatch",
        "box-unknown-wnid",
    ):
        assert any(image_id in found for found in reasons.values()), image_id
    listed = {r.image_id for r in listing.records}
    # decode problems are only seen at extract time: those images are still listed here
    assert {
        i for i, r in tree.expected_reasons.items() if r & {"truncated-image", "unreadable-image", "too-many-pixels"}
    } <= listed
    assert not listed & {
        i
        for i, r in tree.expected_reasons.items()
        if r & {"missing-annotation", "malformed-annotation", "unknown-wnid", "no-valid-box"}
    }


def test_box_of_unknown_wnid_is_dropped_and_mismatch_kept(tmp_path):
    tree = write_tree(tmp_path, count=1, bad=True)
    listing = {r.image_id: r for r in load_sources(tmp_path, "val", announce=lambda _: None).records}
    unknown_box = next(i for i, r in tree.expected_reasons.items() if r == {"box-unknown-wnid"})
    mismatch = next(i for i, r in tree.expected_reasons.items() if r == {"box-label-mismatch"})
    assert [b.wnid for b in listing[unknown_box].boxes] == ["n01440764"]
    assert [b.wnid for b in listing[mismatch].boxes] == ["n01440764", "n01443537"]


def test_unusable_root_is_a_clear_error(tmp_path):
    with pytest.raises(SourceError, match="not a folder"):
        load_sources(tmp_path / "nowhere", "val")
    (tmp_path / "val").mkdir()
    with pytest.raises(SourceError, match="--boxes"):
        load_sources(tmp_path, "val")
    with pytest.raises(SourceError, match="no train/ images"):
        load_sources(tmp_path, "train")


def test_solution_csv_with_wrong_columns_is_refused(tmp_path):
    write_tree(tmp_path, count=1)
    bad_csv = tmp_path / "LOC_val_solution.csv"
    bad_csv.write_text("id,boxes\nx,y\n")
    with pytest.raises(SourceError, match="ImageId,PredictionString"):
        load_sources(tmp_path, "val", boxes=bad_csv)


def test_malformed_prediction_string_is_an_issue(tmp_path):
    write_tree(tmp_path, layout="kaggle", count=2)
    csv_path = tmp_path / "LOC_val_solution.csv"
    lines = csv_path.read_text().splitlines()
    lines[1] = lines[1].split(",")[0] + ",n01440764 1 2 3"
    csv_path.write_text("\n".join(lines) + "\n")
    listing = load_sources(tmp_path, "val", csv_path, announce=lambda _: None)
    assert [(i.reason, i.image_id) for i in listing.issues] == [("malformed-annotation", lines[1].split(",")[0])]
    assert len(listing.records) == 1
