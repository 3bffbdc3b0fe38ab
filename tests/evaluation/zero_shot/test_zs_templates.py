"""The prompt sets equal the published lists, `no-scale` removes exactly the templates that name
scale or framing (each with a reason), and a YAML file of one's own is read strictly."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from builder.core.errors import HsiError
from builder.core.untrusted import UntrustedInput
from evaluation.zero_shot import templates as tpl
from evaluation.zero_shot.published import openai_templates, simple_templates

# sha256 of json.dumps(list) of the lists in the CLIP repository's
# notebooks/Prompt_Engineering_for_ImageNet.ipynb (openai/CLIP commit e58d494): `imagenet_templates`
# (80) and the 7 templates the notebook's text lists as selected by forward selection, in its order.
# Computed from the notebook itself, not from open_clip's copy, so a change in either is caught.
OPENAI_SHA256 = "e30aa9d7fb289e072e361fb1b2d16a295f7cb396978685fa57a0882c96c06b0d"
SIMPLE_SHA256 = "2104fe2593416a8a85feed330ffeaa328b7ec5f00fd63abb42b7b43c7ad2d986"
SCALE_OR_FRAMING_WORDS = ("small", "large", "cropped", "close-up")


def digest(templates) -> str:
    return hashlib.sha256(json.dumps(list(templates)).encode()).hexdigest()


def test_the_built_in_sets_are_the_published_lists_by_count_and_content():
    sets = tpl.resolve_template_sets("openai,simple,no-scale")
    assert list(sets) == ["openai", "simple", "no-scale"]
    assert [len(templates) for templates in sets.values()] == [80, 7, 72]
    assert digest(sets["openai"]) == OPENAI_SHA256
    assert digest(sets["simple"]) == SIMPLE_SHA256
    assert sets["simple"][0] == "itap of a {}." and sets["openai"][0] == "a bad photo of a {}."
    assert set(sets["simple"]) < set(sets["openai"])


def test_no_scale_removes_exactly_the_templates_that_name_scale_or_framing_each_with_a_reason():
    removed = dict(tpl.REMOVED_FOR_SCALE)
    naming = [t for t in openai_templates() if any(word in t.split() for word in SCALE_OR_FRAMING_WORDS)]
    assert sorted(removed) == sorted(naming) and len(removed) == 8
    assert all(reason.strip() and ("size" in reason or "framing" in reason) for reason in removed.values())
    assert tpl.no_scale_templates() == tuple(t for t in openai_templates() if t not in removed)
    # the count: 2 of the 7 simple templates name scale
    scaled = sorted(t for t in simple_templates() if t in removed)
    assert scaled == ["a photo of the large {}.", "a photo of the small {}."]
    kept = dict(tpl.KEPT_BORDERLINE)
    assert set(kept) <= set(tpl.no_scale_templates()) and all(kept.values())


def test_fill_puts_the_class_name_in_place_of_the_placeholder_only():
    assert tpl.fill("a photo of the small {}.", "tench") == "a photo of the small tench."
    assert tpl.fill("a {} in a video game.", "name {x}") == "a name {x} in a video game."


def test_a_yaml_list_is_one_set_named_after_the_file_and_a_mapping_names_its_sets(tmp_path):
    (tmp_path / "corner.yaml").write_text("- a photo of a {} in the corner.\n- a tiny {}.\n", "utf-8")
    (tmp_path / "mine.yml").write_text("tiny: ['a tiny {}.']\nhuge: ['a huge {}.', 'a giant {}.']\n", "utf-8")
    sets = tpl.resolve_template_sets(f"simple, {tmp_path / 'corner.yaml'},{tmp_path / 'mine.yml'}")
    assert list(sets) == ["simple", "corner", "tiny", "huge"]
    assert sets["corner"] == ("a photo of a {} in the corner.", "a tiny {}.")
    assert sets["huge"] == ("a huge {}.", "a giant {}.")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- a photo of a {c}.\n", "[0]: 'a photo of a {c}.' has no {} placeholder"),
        ("- 'a {} and a {}.'\n", "[0]: 'a {} and a {}.' has 2 {} placeholders"),
        ("- 'a {}.'\n- '{} of {c}'\n", "[1]: '{} of {c}' has a brace besides its {} placeholder"),
        ("[]\n", "lists no templates"),
        ("- 3\n", "[0]: expected a template string, got 3"),
        ("- ' '\n", "[0]: a template is blank"),
        ("- 'a {}.'\n- 'a {}.'\n", "[1]: 'a {}.' is listed twice"),
        ("openai: ['a {}.']\n", "the set name 'openai' is a built-in set's"),
        ("'bad name!': ['a {}.']\n", "the set name 'bad name!' is not 1-64 letters"),
        ("mine: 'a {}.'\n", "mine: expected a list of templates, got 'a {}.'"),
        ("mine: ['a {}.', 7]\n", "mine[1]: expected a template string, got 7"),
        ("just words\n", "template file holds 'just words'; give a list of templates"),
        ("{}\n", "template file holds an empty mapping"),
        ("", "template file holds null"),
        ("mine: [\n", "template file is not valid YAML"),
    ],
)
def test_a_template_file_that_is_not_a_list_of_good_templates_is_one_line_naming_the_file(tmp_path, text, problem):
    path = tmp_path / "own.yaml"
    path.write_text(text, "utf-8")
    with pytest.raises(UntrustedInput) as caught:
        tpl.resolve_template_sets(f"openai,{path}")
    message = str(caught.value)
    assert message.startswith(str(path)) and problem in message and "\n" not in message


def test_a_template_file_named_so_it_cannot_name_a_set_is_refused(tmp_path):
    path = tmp_path / "no-scale.yaml"
    path.write_text("- a {}.\n", "utf-8")
    with pytest.raises(UntrustedInput, match="stem, which names its set: the set name 'no-scale' is a built-in"):
        tpl.resolve_template_sets(str(path))


def test_a_linked_template_file_is_never_followed(tmp_path):
    target = tmp_path / "real.yaml"
    target.write_text("- a {}.\n", "utf-8")
    link = tmp_path / "link.yaml"
    os.symlink(target, link)
    with pytest.raises(UntrustedInput, match="is a link; links are never followed"):
        tpl.resolve_template_sets(str(link))
    with pytest.raises(UntrustedInput, match="not found"):
        tpl.resolve_template_sets(str(tmp_path / "absent.yaml"))


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("opeanai", "'opeanai' is no prompt set (built in: openai, simple, no-scale"),
        ("openai,simple,openai", "names the prompt set openai twice"),
        (" , ", "names no prompt set"),
    ],
)
def test_a_templates_value_naming_no_set_or_one_twice_is_a_usage_error(spec, problem):
    with pytest.raises(tpl.TemplateSetError, match=problem.replace("(", r"\(")) as caught:
        tpl.resolve_template_sets(spec)
    assert isinstance(caught.value, HsiError) and caught.value.exit_status == 2


def test_a_set_named_by_two_files_is_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("tiny: ['a tiny {}.']\n", "utf-8")
    (tmp_path / "tiny.yaml").write_text("- a small tiny {}.\n", "utf-8")
    with pytest.raises(tpl.TemplateSetError, match="names the prompt set tiny twice"):
        tpl.resolve_template_sets([str(tmp_path / "a.yaml"), str(tmp_path / "tiny.yaml")])


def test_the_python_forms_take_one_set_a_list_of_templates_or_a_mapping():
    assert tpl.templates_from("simple") == ("simple", simple_templates())
    assert tpl.templates_from(["a {}.", "the {}."]) == ("custom", ("a {}.", "the {}."))
    with pytest.raises(tpl.TemplateSetError, match="names 2 prompt sets .* several by zero_shot_classifiers"):
        tpl.templates_from("openai,simple")
    with pytest.raises(tpl.TemplateSetError, match=r"templates\[1\]: 'no placeholder' has no \{\} placeholder"):
        tpl.templates_from(["a {}.", "no placeholder"])
    assert tpl.template_sets_from({"mine": ["a {}."]}) == {"mine": ("a {}.",)}
    with pytest.raises(tpl.TemplateSetError, match="template_sets: the set name 'simple' is a built-in"):
        tpl.template_sets_from({"simple": ["a {}."]})
