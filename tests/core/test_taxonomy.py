"""The paper's groups, tiers and their order: one definition for compose, validation and cards."""

from __future__ import annotations

from builder.core.taxonomy import TIERS, group_name, group_sort_key, sorted_groups, tier_of, tier_sort_key


def test_group_names_and_tiers():
    assert group_name("center", "original") == "CeO"
    assert group_name("top-right", "random") == "CoR"
    assert group_name("random-corner", "original") == "CoO"
    assert group_name("bottom-left", "gray") == "bottom-left/gray"
    assert group_name("top-right", "original", margin=4) == "top-right/original"
    assert group_name("xy:0.25,0.75", "noise") == "xy:0.25,0.75/noise"
    expected = {
        "Easy": {("CeO", 84), ("CeO", 112), ("CoO", 84), ("CoO", 112)},
        "Medium": {("CeO", 56), ("CoO", 56), ("CeR", 112), ("CoR", 112)},
        "Hard": {("CeR", 56), ("CeR", 84), ("CoR", 56), ("CoR", 84)},
    }
    for tier, pairs in expected.items():
        assert {pair for pair, t in TIERS.items() if t == tier} == pairs
    assert tier_of("CeO", 84, 224) == "Easy" and tier_of("CeO", 84, 448) is None
    assert tier_of("bottom-left/gray", 56, 224) is None


def test_paper_groups_come_first_in_the_papers_order():
    assert sorted_groups(["top-right/gray", "CoR", "CeO", "bottom-left/noise", "CeR", "CoO", "CeO"]) == [
        "CeO",
        "CoO",
        "CeR",
        "CoR",
        "bottom-left/noise",
        "top-right/gray",
    ]
    assert group_sort_key("CeO") < group_sort_key("CoR") < group_sort_key("a/b")
    assert sorted(["none", "Hard", "Easy", "Medium"], key=tier_sort_key) == ["Easy", "Medium", "Hard", "none"]
