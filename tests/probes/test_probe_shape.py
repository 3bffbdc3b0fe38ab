"""Shape bias: the 16-class aggregation, the file-name parser and the folder check."""

from __future__ import annotations

import numpy as np
import pytest
from cue_conflict_factory import write_cue_conflict

from builder.core.errors import InputError
from evaluation.probes.shape import (
    CATEGORIES,
    CATEGORY_INDICES,
    category_probabilities,
    load_stimuli,
    parse_stimulus_name,
    scan_stimuli,
    shape_bias,
)


def test_mapping_facts():
    assert len(CATEGORIES) == 16
    assert CATEGORY_INDICES["airplane"] == (404,)
    assert CATEGORY_INDICES["bear"] == (294, 295, 296, 297)
    assert len(CATEGORY_INDICES["dog"]) == 40 + 11 + 22 + 14 + 8 + 6 + 1 + 3 + 4
    assert len(CATEGORY_INDICES["bird"]) == 1 + 7 + 3 + 3 + 4 + 10 + 3 + 7 + 11
    every = [i for indices in CATEGORY_INDICES.values() for i in indices]
    assert len(every) == len(set(every)) and all(0 <= i < 1000 for i in every)


def test_category_scores_are_means_not_sums():
    probs = np.zeros((2, 1000))
    probs[0, 404] = 0.3  # airplane: one class at 0.3 -> mean 0.3
    probs[0, CATEGORY_INDICES["dog"]] = 0.5 / len(CATEGORY_INDICES["dog"])  # dog: more mass, lower mean
    probs[1, 294] = 0.2  # bear: 0.2 over 4 classes -> 0.05
    probs[1, 499] = 0.1  # knife: 0.1 over 1 class
    scores = category_probabilities(probs)
    assert scores.shape == (2, 16)
    assert CATEGORIES[scores[0].argmax()] == "airplane"
    assert scores[1, CATEGORIES.index("bear")] == pytest.approx(0.05)
    assert CATEGORIES[scores[1].argmax()] == "knife"


def test_shape_bias_counts_and_drops_same_cue_images():
    shapes = ["cat", "cat", "dog", "dog", "car", "car"]
    textures = ["dog", "cat", "cat", "car", "knife", "oven"]
    decisions = ["cat", "cat", "cat", "car", "knife", "bear"]
    result = shape_bias(decisions, shapes, textures)
    assert result["dropped_same_cue"] == 1 and result["cue_conflict_images"] == 5
    assert (result["shape_hits"], result["texture_hits"], result["neither"]) == (1, 3, 1)
    assert result["shape_bias"] == pytest.approx(0.25)
    assert result["per_category"]["cat"]["shape_bias"] == 1.0
    assert shape_bias(["oven"], ["cat"], ["dog"])["shape_bias"] is None


def test_filename_parser():
    assert parse_stimulus_name("airplane1-bicycle2.png") == ("airplane", "bicycle")
    assert parse_stimulus_name("knife10-elephant3.png") == ("knife", "elephant")
    for bad in (
        "airplane1-bicycle2.jpg",
        "airplane-bicycle2.png",
        "plane1-bicycle2.png",
        "Airplane1-bicycle2.png",
        "airplane1_bicycle2.png",
        "airplane1-bicycle2.png.bak",
    ):
        assert parse_stimulus_name(bad) is None, bad


def test_a_complete_folder_loads(tmp_path):
    stimuli = load_stimuli(write_cue_conflict(tmp_path / "cc", per_class=2))
    assert len(stimuli) == 33 and {s.shape for s in stimuli} == set(CATEGORIES)


def test_a_bad_folder_is_refused_with_everything_wrong(tmp_path):
    root = write_cue_conflict(tmp_path / "cc")
    for path in (root / "oven").iterdir():
        path.unlink()
    (root / "oven").rmdir()
    (root / "cat" / "cat1.png").write_bytes(b"x")
    (root / "dog" / "cat3-dog1.png").write_bytes(b"x")
    (root / "horse").mkdir()
    (root / "notes.txt").write_text("hi")
    _, problems = scan_stimuli(root)
    text = "\n".join(problems)
    assert "missing class folders: oven" in text
    assert "cat/cat1.png" in text and "dog/cat3-dog1.png names the shape cat" in text
    assert "unexpected folder horse/" in text and "unexpected file notes.txt" in text
    with pytest.raises(InputError, match="missing class folders: oven"):
        load_stimuli(root)
