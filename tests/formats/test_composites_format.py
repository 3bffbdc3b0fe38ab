"""The composite format: key spelling, members, decoding and the manifest's counts."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from builder.formats.composites import (
    COMPOSITE_MEMBERS,
    composite_members,
    count_composites,
    decode_composite_image,
    decode_composite_json,
    decode_label,
    merge_counts,
    position_token,
    sample_key,
)


def test_position_tokens_are_key_safe():
    assert position_token("xy:0.25,0.75") == "xy0-25-0-75"
    assert position_token("top-right") == "top-right"
    assert "." not in position_token("xy:0.333,1")


def test_sample_keys_have_no_dots():
    key = sample_key("ILSVRC2012_val_00000001", "xy:0.25,0.75", 56, "gray")
    assert key == "ILSVRC2012_val_00000001_xy0-25-0-75_56_gray"
    assert sample_key("a.b", "center", 84, "original") == "a-b_center_84_original"


def test_members_round_trip():
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 200, 30)).save(buffer, format="JPEG")
    members = composite_members(buffer.getvalue(), 7, {"b": 1, "a": None})
    assert tuple(sorted(members)) == COMPOSITE_MEMBERS
    assert members["json"] == b'{"a": null, "b": 1}'  # sorted keys: the same metadata gives the same bytes
    assert decode_label(members) == 7 and decode_composite_json(members) == {"a": None, "b": 1}
    assert decode_composite_image(members["jpg"]).size == (8, 8)


def test_a_png_in_the_jpg_member_is_refused():
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(buffer, format="PNG")
    with pytest.raises(ValueError, match="not a JPEG"):
        decode_composite_image(buffer.getvalue())


def test_counts_and_their_merge():
    metas = [{"group": "CeO", "size": 56, "tier": "Medium"}, {"group": "left/gray", "size": 84, "tier": None}]
    counts = count_composites(metas)
    assert counts == {
        "group": {"CeO": 1, "left/gray": 1},
        "size": {"56": 1, "84": 1},
        "tier": {"Medium": 1, "none": 1},
        "group_size": {"CeO/56": 1, "left/gray/84": 1},
    }
    assert merge_counts([counts, count_composites(metas[:1])])["group"] == {"CeO": 2, "left/gray": 1}
