"""validation.md's tables come from one renderer: header, rule, a line per row."""

from __future__ import annotations

from validation.report import MAX_LISTED, _group_size_table, _rows_table, _table


def test_a_table_is_its_header_its_rule_and_a_line_per_row():
    assert _table(["image", "mean IoU"], [["a", "0.100"], ["b", 2]]) == [
        "| image | mean IoU |",
        "|---|---|",
        "| a | 0.100 |",
        "| b | 2 |",
    ]
    assert _table(["only"], []) == ["| only |", "|---|"]


def test_error_rows_escape_pipes_blank_missing_cells_and_list_the_first_max_listed():
    rows = [{"reason": "bad-key", "split": "test", "shard": "t.tar", "key": f"k{i}", "detail": "a|b"} for i in range(3)]
    rows += [{"reason": "x", "detail": "d"}] * MAX_LISTED
    lines = _rows_table(rows)
    assert lines[:3] == [
        "| reason | split | shard | key | detail |",
        "|---|---|---|---|---|",
        "| bad-key | test | t.tar | k0 | a\\|b |",
    ]
    assert lines[-2] == "| x |  |  |  | d |"
    assert lines[-1] == "\n... and 3 more in `validation.json`."
    assert len(lines) == 2 + MAX_LISTED + 1


def test_the_group_size_table_puts_sizes_in_columns_in_ascending_order():
    assert _group_size_table({"CeO/112": 1, "CeO/84": 3, "CoO/112": 4}) == [
        "| group | 84 px | 112 px |",
        "|---|---|---|",
        "| CeO | 3 | 1 |",
        "| CoO | 0 | 4 |",
    ]
