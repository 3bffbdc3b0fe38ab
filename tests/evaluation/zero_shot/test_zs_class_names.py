"""CLIP's curated class names are the published ones, in the toolkit's class order, and any label
space gets its names in its own order."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from builder.compose.spec import load_variant
from builder.core.classes import imagenet_classes
from evaluation.zero_shot.class_names import (
    ClassNamesError,
    class_names_for,
    label_space_indices,
    label_space_wnids,
    repeated_names,
)
from evaluation.zero_shot.published import clip_class_names

# sha256 of json.dumps(imagenet_classes) of openai/CLIP's notebooks/Prompt_Engineering_for_ImageNet.ipynb
CLASS_NAMES_SHA256 = "6ef5246539bb6543da0958381424e7f7b63b6758af04434f6e8f6da88e0cca70"


def words(text: str) -> set[str]:
    return set(text.lower().replace("-", " ").replace(",", " ").split())


def test_the_curated_names_are_the_published_list():
    names = clip_class_names()
    assert len(names) == 1000
    assert hashlib.sha256(json.dumps(list(names)).encode()).hexdigest() == CLASS_NAMES_SHA256


def test_the_curated_names_follow_the_toolkits_class_order():
    names, classes = clip_class_names(), imagenet_classes()
    pairs = list(zip(names, classes))
    same = sum(name.lower() in {s.strip().lower() for s in [c.name, *c.synonyms.split(",")]} for name, c in pairs)
    overlapping = sum(bool(words(name) & words(f"{c.name} {c.synonyms}")) for name, c in pairs)
    # a shift by one class would leave almost no name matching its row
    assert same >= 800 and overlapping >= 950
    anchors = {
        0: ("n01440764", "tench"),
        134: ("n02012849", "crane bird"),
        517: ("n03126707", "construction crane"),
        638: ("n03710637", "tights"),
        639: ("n03710721", "one-piece bathing suit"),
        999: ("n15075141", "toilet paper"),
    }
    for index, (wnid, name) in anchors.items():
        assert (classes[index].wnid, names[index]) == (wnid, name)


def test_label_spaces_are_indices_or_wnids_in_their_own_order():
    assert label_space_indices() == tuple(range(1000))
    subset = load_variant("hard-spurious-imagenet-10").subset.classes
    indices = label_space_indices(subset)
    assert len(indices) == 10 and label_space_wnids(indices) == subset
    assert label_space_indices([517, "n01440764", np.int64(3)]) == (517, 0, 3)


@pytest.mark.parametrize(
    ("label_space", "problem"),
    [
        ([1000], "class index 1000 is outside 0-999"),
        ([-1], "class index -1 is outside"),
        ([True], "expected a class index or a wnid, got True"),
        ([1.0], "expected a class index or a wnid, got 1.0"),
        (["n00000000"], "'n00000000' is not one of the 1000"),
        ([3, "n01443537", 3, 1], "lists the classes 1, 3 more than once"),
        ([], "label_space is empty"),
        ("n01440764", "not one string"),
    ],
)
def test_a_label_space_that_is_not_distinct_imagenet_classes_is_refused(label_space, problem):
    with pytest.raises(ClassNamesError, match=problem):
        label_space_indices(label_space)


def test_names_follow_the_label_space_and_can_be_replaced():
    published = clip_class_names()
    assert class_names_for([517, 134]) == ("construction crane", "crane bird")
    assert class_names_for([517, 134], {"n03126707": "tower crane", 5: "unused"}) == ("tower crane", "crane bird")
    assert class_names_for([517, 134], ["tower crane", "common crane"]) == ("tower crane", "common crane")
    own = [f"class {n}" for n in range(1000)]
    assert class_names_for([517, 134], own) == ("class 517", "class 134")
    assert class_names_for(None, own) == tuple(own) and class_names_for() == published


@pytest.mark.parametrize(
    ("classnames", "problem"),
    [
        (["one"], "lists 1 names, but the label space has 2 classes"),
        (["a", " "], r"classnames\[1\]: expected a class name"),
        (["a", "b\nc"], r"classnames\[1\]: 'b\\nc' is not one line"),
        ({2000: "x"}, "class index 2000 is outside"),
        ("tench", "not one string"),
    ],
)
def test_class_names_that_do_not_fit_are_refused(classnames, problem):
    with pytest.raises(ClassNamesError, match=problem):
        class_names_for([517, 134], classnames)


def test_the_two_repeated_published_names_are_listed_for_a_report():
    assert repeated_names(clip_class_names()) == {"missile": (657, 744), "sunglasses": (836, 837)}
    assert repeated_names(class_names_for([657, 0]), [657, 0]) == {}
