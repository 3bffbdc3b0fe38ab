"""Hostile card headers against the gating and huggingface_hub checks of `hsi verify` (issue 32):
values of the wrong kind, huge or control-character labels. Each is a line, never a crash."""

from __future__ import annotations

import pytest

from cards.metadata import GATED_FIELDS, GATED_PROMPT, gating_problems, hub_card_problems

GOOD = {
    "extra_gated_prompt": GATED_PROMPT,
    "extra_gated_fields": dict(GATED_FIELDS),
    "source_datasets": ["extended|imagenet-1k"],
}


@pytest.mark.parametrize(
    "field, value",
    [
        ("extra_gated_prompt", None),
        ("extra_gated_prompt", ["a", GATED_PROMPT]),
        ("extra_gated_prompt", 12),
        ("extra_gated_fields", ["checkbox"]),
        ("extra_gated_fields", "checkbox"),
        ("extra_gated_fields", {}),
        ("extra_gated_fields", {1: "checkbox"}),
        ("extra_gated_fields", {"x" * 100_000: "checkbox\x1b[2J"}),
        ("extra_gated_fields", {"\x1b[31mAgree": {"type": "select", "options": "not a list"}}),
        ("source_datasets", "imagenet"),
        ("source_datasets", [None, 3, {"imagenet": 1}]),
    ],
)
def test_a_hostile_gating_value_is_lines_that_print_safely(field, value):
    problems = gating_problems({**GOOD, field: value})
    assert problems and all(len(line) < 400 for line in problems)
    assert not any("\x1b" in line for line in problems)


def test_a_card_huggingface_hub_does_not_read_is_one_line():
    assert hub_card_problems("---\n- a list\n---\n", {"a": 1}) == [
        "huggingface_hub's DatasetCard does not read it (repo card metadata block should be a dict)"
    ]


def test_a_header_the_round_trip_changes_is_named():
    # DatasetCardData drops None values: a header holding one is not what huggingface_hub writes back
    text = "---\nlicense: other\npretty_name: null\n---\n\nbody\n"
    problems = hub_card_problems(text, {"license": "other", "pretty_name": None})
    assert "huggingface_hub's DatasetCardData changes pretty_name of the header" in problems, problems
