"""The one LOC_*_solution.csv parser, read by extract (sources) and validation (scores)."""

from __future__ import annotations

import pytest

from builder.core.records import Box
from builder.formats.loc_csv import (
    LocCsvError,
    parse_coordinate,
    parse_prediction_string,
    read_loc_boxes,
    read_loc_solution,
)

GOLDFISH, TENCH = "n01443537", "n01440764"


def write_csv(path, rows):
    path.write_text("ImageId,PredictionString\n" + "".join(f"{image_id},{text}\n" for image_id, text in rows), "utf-8")
    return path


def test_integer_coordinates_as_in_imagenets_files_are_read_exactly():
    assert parse_prediction_string("n01751748 1 31 498 354 ") == [Box(1, 31, 498, 354, "n01751748")]
    assert parse_prediction_string(f"{GOLDFISH} 0 0 10 20 {TENCH} 5 6 7 8") == [
        Box(0, 0, 10, 20, GOLDFISH),
        Box(5, 6, 7, 8, TENCH),
    ]


def test_non_integer_coordinates_are_rounded_not_truncated():
    assert parse_prediction_string(f"{GOLDFISH} 10.6 10.4 99.5 100.5") == [Box(11, 10, 100, 100, GOLDFISH)]
    assert parse_coordinate("0.9", "x") == 1  # truncation would say 0
    assert parse_coordinate("2.5", "x") == 2 and parse_coordinate("3.5", "x") == 4  # halves to even
    assert parse_coordinate("-0.4", "x") == 0


@pytest.mark.parametrize("text", ["", f"{GOLDFISH} 1 2 3", *(f"{GOLDFISH} 1 2 3 {bad}" for bad in ("x", "inf", "nan"))])
def test_malformed_strings_are_value_errors(text):
    with pytest.raises(ValueError):
        parse_prediction_string(text)


def test_the_file_reader_keeps_first_rows_and_parses_lazily(tmp_path):
    path = write_csv(
        tmp_path / "LOC_val_solution.csv",
        [
            ("ILSVRC2012_val_00000001", f"{GOLDFISH} 1 2 30 40"),
            ("ILSVRC2012_val_00000002", f"{TENCH} 1 2"),
            ("ILSVRC2012_val_00000001", f"{GOLDFISH} 9 9 99 99"),
        ],
    )
    solution = read_loc_solution(path)
    assert solution.ids() == {"ILSVRC2012_val_00000001", "ILSVRC2012_val_00000002"}
    assert solution.duplicates == [("ILSVRC2012_val_00000001", 4)]
    assert solution.boxes("ILSVRC2012_val_00000001") == [Box(1, 2, 30, 40, GOLDFISH)]
    assert solution.boxes("ILSVRC2012_val_00000009") is None
    with pytest.raises(ValueError, match="3 fields"):
        solution.boxes("ILSVRC2012_val_00000002")  # one bad row is one image's problem
    with pytest.raises(LocCsvError, match=r"LOC_val_solution.csv:3: PredictionString has 3 fields"):
        read_loc_boxes(path)  # the eager reader names the line


def test_extract_and_scores_read_the_same_boxes(tmp_path):
    from builder.extract.sources import parse_voc_xml

    row = ("ILSVRC2012_val_00000001", f"{GOLDFISH} 10.6 10.4 99.5 100.5")
    path = write_csv(tmp_path / "LOC_val_solution.csv", [row])
    assert read_loc_boxes(path) == {"ILSVRC2012_val_00000001": [Box(11, 10, 100, 100, GOLDFISH)]}
    xml = tmp_path / "a.xml"
    xml.write_text(
        f"<annotation><object><name>{GOLDFISH}</name><bndbox><xmin>10.6</xmin><ymin>10.4</ymin>"
        "<xmax>99.5</xmax><ymax>100.5</ymax></bndbox></object></annotation>",
        "utf-8",
    )
    assert parse_voc_xml(xml) == [Box(11, 10, 100, 100, GOLDFISH)]


def test_other_columns_are_refused(tmp_path):
    bad = tmp_path / "LOC_val_solution.csv"
    bad.write_text("id,boxes\nx,y\n", "utf-8")
    with pytest.raises(LocCsvError, match="ImageId,PredictionString"):
        read_loc_solution(bad)
