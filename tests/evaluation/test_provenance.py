"""The one rule every reader applies to a preprocessing section (issue 33): its recorded status, or
for a file written before the status existed, "unknown" for predictions made elsewhere and "applied"
for a model the toolkit ran; and the declaration a submitter gives, each field checked."""

from __future__ import annotations

import pytest

from builder.core.errors import HsiError
from evaluation.model_formats.declared import declared_preprocessing
from evaluation.model_formats.models import Preprocessing
from evaluation.ranking.provenance import PREPROCESSING_KEYS, preprocessing_status, recorded_preprocessing

OLD_GIVEN = {"description": "made by whoever made the predictions (not known here)", "cropped": False}
OLD_APPLIED = {
    "description": "resize to 256 then centre crop 224x224 (crop_pct 0.875), bicubic",
    "cropped": True,
    "crop_pct": 0.875,
    "input_size": [224, 224],
    "interpolation": "bicubic",
    "mean": [0.5, 0.5, 0.5],
    "std": [0.5, 0.5, 0.5],
    "source": "flags",
}


def test_a_recorded_status_is_the_status():
    for status in ("applied", "declared", "unknown"):
        assert preprocessing_status({"status": status}, "predictions:x.csv") == status
        assert preprocessing_status({"status": status}, "timm:resnet50") == status


def test_files_written_before_the_status_existed():
    assert preprocessing_status(OLD_GIVEN, "predictions:preds.csv") == "unknown"
    assert preprocessing_status(OLD_GIVEN, "predictions:array") == "unknown"
    assert preprocessing_status(OLD_APPLIED, "ts:model.pt") == "applied"
    assert preprocessing_status(None, "module:EfficientNet") == "applied"


def test_a_status_outside_the_three_is_refused_in_one_line():
    with pytest.raises(HsiError, match=r"preprocessing.status: 'guessed' is not one of applied, declared, unknown"):
        preprocessing_status({"status": "guessed"}, "timm:resnet50")


def test_an_old_unknown_section_loses_its_false_crop_claim():
    recorded = recorded_preprocessing(OLD_GIVEN, "predictions:preds.csv")
    assert tuple(recorded) == PREPROCESSING_KEYS and recorded["status"] == "unknown"
    assert all(recorded[key] is None for key in ("cropped", "crop_pct", "resize", "input_size", "mean", "std"))
    assert recorded["description"].startswith("unknown")


def test_an_old_applied_section_gets_its_status_and_the_resize_its_crop_implies():
    recorded = recorded_preprocessing(OLD_APPLIED, "ts:model.pt")
    assert recorded["status"] == "applied" and recorded["cropped"] is True and recorded["resize"] == 256
    assert recorded_preprocessing(Preprocessing().to_json(), "ts:model.pt") == {
        key: Preprocessing().to_json()[key] for key in PREPROCESSING_KEYS
    }


def test_a_declaration_in_the_compact_syntax():
    section = declared_preprocessing(
        "resize=256,crop_pct=0.875,size=224,interpolation=bilinear,mean=0.485/0.456/0.406,std=0.229/0.224/0.225"
    )
    assert section["status"] == "declared" and section["cropped"] is True
    assert (section["resize"], section["crop_pct"], section["input_size"]) == (256, 0.875, [224, 224])
    assert section["mean"] == [0.485, 0.456, 0.406] and section["interpolation"] == "bilinear"
    assert "centre crop 224x224 (crop_pct 0.875)" in section["description"]
    assert section["description"].startswith("declared by whoever made the predictions, not checked")
    assert recorded_preprocessing(section, "predictions:x.csv") == {key: section[key] for key in PREPROCESSING_KEYS}


def test_a_partial_declaration_leaves_the_rest_null_and_says_so():
    section = declared_preprocessing({"resize": 256, "size": 224})
    assert section["crop_pct"] == 0.875 and section["cropped"] is True  # the crop the two define
    only_size = declared_preprocessing("size=160x192")
    assert only_size["input_size"] == [160, 192] and only_size["cropped"] is None and only_size["mean"] is None
    assert "crop not declared" in only_size["description"] and "mean not declared" in only_size["description"]
    uncropped = declared_preprocessing("crop_pct=1,size=224")
    assert uncropped["cropped"] is False and "no centre crop" in uncropped["description"]


@pytest.mark.parametrize(
    ("status", "cropped", "words"),
    [
        ("applied", False, "the 224 canvas as it is, not centre-cropped"),
        ("applied", True, "centre-cropped on purpose (crop_pct 0.875)"),
        ("declared", True, "declared, not checked: centre-cropped (crop_pct 0.875)"),
        ("declared", False, "declared, not checked: not centre-cropped"),
        ("declared", None, "declared, not checked: crop not declared"),
        ("unknown", None, "unknown preprocessing (predictions made elsewhere; none declared)"),
    ],
)
def test_a_page_says_only_what_the_status_allows(status, cropped, words):
    from evaluation.ranking.provenance import preprocessing_claim

    run = {"preprocessing_status": status, "cropped": cropped, "crop_pct": 0.875 if cropped else None}
    assert preprocessing_claim(run) == words
