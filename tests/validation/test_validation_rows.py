"""Validation's findings are `Issue` rows with reasons from the one closed list: a row with a reason
outside it cannot be built, so no check, detection or score can report one."""

import pytest

from builder.core.records import REASONS, VALIDATION_REASONS, Issue
from validation.detection import DetectionItem, ImageUnavailable, unavailable_row
from validation.integrity import failure, failure_line


def test_an_issue_with_a_reason_outside_the_closed_list_is_refused():
    with pytest.raises(ValueError, match="unknown issue reason 'shard-broken'"):
        Issue("val-00000.tar", "shard-broken", "", "validate")
    with pytest.raises(ValueError, match="unknown issue reason 'check-failed'"):
        failure("check-failed", "detail", "val", "val-00000.tar", "k")
    item = DetectionItem("a", "n01440764", (), lambda: None, "val")
    with pytest.raises(ValueError, match="unknown issue reason 'lost'"):
        unavailable_row(item, ImageUnavailable("lost", "gone"))


def test_every_validation_reason_is_in_the_list_with_an_action_and_a_meaning():
    for reason, (action, meaning) in VALIDATION_REASONS.items():
        assert REASONS[reason] == action and action in {"failed", "not-detected", "not-scored"}, reason
        assert meaning and "\n" not in meaning, reason
    # the decoder's refusals keep their own reason in a detection row, with the detection's action
    row = unavailable_row(
        DetectionItem("a", "n01440764", (), lambda: None, "val"), ImageUnavailable("truncated-image", "cut")
    )
    assert (row.reason, row.action, row.split, row.key, row.detail) == (
        "truncated-image",
        "not-detected",
        "val",
        "a",
        "cut",
    )


def test_a_failure_names_the_sample_else_the_shard_else_the_manifest():
    sample = failure("cls", "cls says 3", "val", "val-00000.tar", "k1")
    shard = failure("shard-size", "10 bytes", "val", "val-00000.tar")
    split = failure("split-count", "shards hold 3", "val")
    assert [(r.image_id, r.stage, r.action) for r in (sample, shard, split)] == [
        ("k1", "validate", "failed"),
        ("val-00000.tar", "validate", "failed"),
        ("_info.json", "validate", "failed"),
    ]
    assert [failure_line(r) for r in (sample, shard, split)] == [
        "val-00000.tar/k1: cls: cls says 3",
        "val-00000.tar: shard-size: 10 bytes",
        "_info.json: split-count: shards hold 3",
    ]
