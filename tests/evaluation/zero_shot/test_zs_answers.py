"""Free-text answers map to classes by exact match, forgiving only case, articles, spaces and
trailing punctuation; an answer naming no class or several is counted as such."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.zero_shot.answers import (
    AMBIGUOUS,
    MAPPED,
    UNMAPPED,
    VLM_PROMPT,
    AnswerVocabulary,
    map_answers,
    normalise_answer,
)

# (answer, expected class or status), over all 1000 classes; written by hand from the ImageNet class list
ANSWERS = [
    ("goldfish", 1),
    ("Goldfish.", 1),
    ("  a goldfish  ", 1),
    ("The Goldfish!", 1),
    ("Carassius auratus", 1),  # a WordNet synonym
    ("goldfishes", UNMAPPED),  # plurals are not guessed
    ("tench", 0),
    ("Great  White   Shark", 2),
    ("great-white shark", UNMAPPED),  # no spelling variants
    ("an American egret", 132),
    ("great egret", 132),  # CLIP's curated name
    ("crane", AMBIGUOUS),  # the bird (134) and the machine (517)
    ("Crane.", AMBIGUOUS),
    ("crane bird", 134),
    ("construction crane", 517),
    ("maillot", AMBIGUOUS),  # 638 and 639
    ("tank suit", 639),
    ("tights", 638),
    ("sunglasses", AMBIGUOUS),  # 836 and 837
    ("dark glasses", 837),
    ("cardigan", AMBIGUOUS),  # the corgi (264) and the sweater (474)
    ("panda", AMBIGUOUS),  # lesser (387) and giant (388)
    ("giant panda", 388),
    ("a tabby cat", 281),
    ("cat", UNMAPPED),
    ("a photo of a tench", UNMAPPED),  # words around the name are not stripped
    ("St. Bernard", 247),
    ("saint bernard", 247),
    ("R.V.", 757),
    ("RV", 757),
    ("jack-o'-lantern", 607),
    ("jack-o\u2019-lantern", UNMAPPED),  # a typographic apostrophe is another character
    ("ice bear", 296),
    ("", UNMAPPED),
    ("the", UNMAPPED),
    (None, UNMAPPED),  # no answer at all
]


@pytest.fixture(scope="module")
def vocabulary() -> AnswerVocabulary:
    return AnswerVocabulary()


@pytest.mark.parametrize(("answer", "expected"), ANSWERS)
def test_an_answer_maps_to_its_class_or_is_counted_as_unmapped_or_ambiguous(vocabulary, answer, expected):
    mapped = vocabulary.map(answer)
    if isinstance(expected, int):
        assert (mapped.label, mapped.status) == (expected, MAPPED)
    else:
        assert (mapped.label, mapped.status) == (-1, expected)
        assert (len(mapped.candidates) > 1) == (expected == AMBIGUOUS)


def test_the_vectorised_form_gives_a_class_or_minus_one_and_a_status_per_answer(vocabulary):
    answers = [answer for answer, _ in ANSWERS]
    labels, statuses = vocabulary.map_many(answers)
    assert labels.dtype == np.int64 and labels.shape == (len(ANSWERS),)
    expected_labels = [expected if isinstance(expected, int) else -1 for _, expected in ANSWERS]
    expected_statuses = [MAPPED if isinstance(expected, int) else expected for _, expected in ANSWERS]
    assert labels.tolist() == expected_labels and statuses.tolist() == expected_statuses
    empty_labels, empty_statuses = map_answers([])
    assert empty_labels.shape == (0,) and empty_statuses.shape == (0,)


def test_a_narrower_label_space_resolves_an_ambiguity_and_leaves_out_other_classes():
    labels, statuses = map_answers(["crane", "maillot", "goldfish", "tench", "crane bird"], [517, 1, 639])
    assert labels.tolist() == [517, 639, 1, -1, -1]
    assert statuses.tolist() == [MAPPED, MAPPED, MAPPED, UNMAPPED, UNMAPPED]


def test_names_of_ones_own_add_to_the_vocabulary_and_clips_names_can_be_left_out():
    assert AnswerVocabulary([1], extra_names={1: ["golden carp"]}).map("Golden carp.").label == 1
    without_clip = AnswerVocabulary(clip_names=False)
    assert without_clip.map("crane bird").status == UNMAPPED and without_clip.map("crane").status == AMBIGUOUS


def test_normalisation_drops_one_article_case_spaces_and_trailing_punctuation_only():
    assert normalise_answer("  The   Tabby cat?! ") == "tabby cat"
    assert normalise_answer("a an apple.") == "an apple"
    assert normalise_answer("A.") == "a"
    assert "name only" in VLM_PROMPT
