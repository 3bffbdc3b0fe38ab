"""`hsi validate` command lines shared by the validation tests."""

from __future__ import annotations


def scores_from_csv(csv_path, sizes_from, out, *extra: str) -> list[str]:
    """`hsi validate --scores` of a LOC csv with image sizes from a folder, the report in `out`."""
    return [
        "validate",
        "--scores",
        "--boxes-csv",
        str(csv_path),
        "--sizes-from",
        str(sizes_from),
        "--out",
        str(out),
        *extra,
    ]


def scores_of_parts(parts, out, *extra: str) -> list[str]:
    """`hsi validate --scores` of a parts folder's boxes, the report (without previews) in `out`."""
    return ["validate", "--scores", "--parts", str(parts), "--out", str(out), "--no-previews", *extra]
