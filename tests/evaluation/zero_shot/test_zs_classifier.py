"""The zero-shot module gives CLIP's logits (scale x cosine to the mean template embedding) over
the label space, in its order, for open_clip and transformers models alike; the multi-set form
embeds the images once and gives each set's logits."""

from __future__ import annotations

import pytest
import torch
from tiny_clip import IMAGE_SIZE, count_text_passes

from builder.compose.spec import load_variant
from evaluation.zero_shot.class_names import class_names_for, label_space_indices
from evaluation.zero_shot.classifier import zero_shot_classifier, zero_shot_classifiers
from evaluation.zero_shot.encoders import EncoderError
from evaluation.zero_shot.published import simple_templates

CRANES_AND_GOLDFISH = [517, 134, 1]


def images(count: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randn(count, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(seed))


def unit(features: torch.Tensor) -> torch.Tensor:
    return features / features.norm(dim=-1, keepdim=True)


def hand_logits(loaded, pixels: torch.Tensor, names, templates) -> torch.Tensor:
    """CLIP's zero-shot recipe written out one text at a time, as the CLIP notebook does."""
    model, tokenizer = loaded.model, loaded.tokenizer

    def text(sentence: str) -> torch.Tensor:
        if loaded.kind == "open_clip":
            return model.encode_text(tokenizer([sentence]))[0]
        return model.get_text_features(**tokenizer([sentence], return_tensors="pt")).pooler_output[0]

    with torch.no_grad():
        if loaded.kind == "open_clip":
            image_features = model.encode_image(pixels)
        else:
            image_features = model.get_image_features(pixel_values=pixels).pooler_output
        rows = []
        for name in names:
            embedded = torch.stack([unit(text(template.format(name))) for template in templates])
            rows.append(unit(embedded.mean(dim=0)))
        return model.logit_scale.exp() * unit(image_features) @ torch.stack(rows).T


@pytest.mark.parametrize("kind", ["tiny_openclip", "tiny_hf"])
def test_logits_are_clips_scaled_cosines_over_the_label_space_in_its_order(kind, request):
    loaded = request.getfixturevalue(kind)
    classifier = zero_shot_classifier(loaded.model, loaded.tokenizer, "simple", label_space=CRANES_AND_GOLDFISH)
    pixels = images()
    with torch.no_grad():
        logits = classifier(pixels)
    names = class_names_for(CRANES_AND_GOLDFISH)
    assert names == ("construction crane", "crane bird", "goldfish")
    expected = hand_logits(loaded, pixels, names, simple_templates())
    assert logits.shape == (4, 3) and logits.dtype == torch.float32
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    assert logits.argmax(1).tolist() == expected.argmax(1).tolist()
    assert classifier.wnids == ("n03126707", "n02012849", "n01443537") and classifier.template_set == "simple"


def test_a_1000_way_classifier_holds_every_narrower_label_space_as_its_columns(tiny_openclip):
    model, tokenizer = tiny_openclip.model, tiny_openclip.tokenizer
    subset = list(label_space_indices(load_variant("hard-spurious-imagenet-10").subset.classes))
    everything = zero_shot_classifier(model, tokenizer, "simple")
    narrow = zero_shot_classifier(model, tokenizer, "simple", label_space=subset)
    pixels = images(3, seed=1)
    with torch.no_grad():
        full, part = everything(pixels), narrow(pixels)
    assert full.shape == (3, 1000) and part.shape == (3, 10)
    torch.testing.assert_close(full[:, subset], part, rtol=1e-5, atol=1e-5)


def test_the_multi_set_form_embeds_images_once_and_each_distinct_text_once(tiny_openclip, monkeypatch):
    model, tokenizer = tiny_openclip.model, tiny_openclip.tokenizer
    own = {"tiny": ["a tiny {}.", "a photo of a small {}."], "plain": ["a photo of a small {}.", "a {}."]}
    passes = count_text_passes(monkeypatch, tiny_openclip)
    sets = zero_shot_classifiers(model, tokenizer, own, label_space=CRANES_AND_GOLDFISH, cache_dir=False)
    assert sum(passes) == 3 * 3  # three distinct templates for three classes, the shared one once
    image_passes = []
    original = model.encode_image
    monkeypatch.setattr(model, "encode_image", lambda x: image_passes.append(len(x)) or original(x))
    pixels = images()
    with torch.no_grad():
        logits = sets(pixels)
    assert image_passes == [4] and list(logits) == ["tiny", "plain"]
    for name, templates in own.items():
        single = zero_shot_classifier(model, tokenizer, templates, label_space=CRANES_AND_GOLDFISH, cache_dir=False)
        with torch.no_grad():
            torch.testing.assert_close(logits[name], single(pixels), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(sets.classifier(name)(pixels), single(pixels), rtol=1e-5, atol=1e-5)


def test_the_built_in_sets_score_together(tiny_hf):
    sets = zero_shot_classifiers(tiny_hf.model, tiny_hf.tokenizer, "openai,simple,no-scale", label_space=[1])
    assert sets.set_names == ("openai", "simple", "no-scale")
    assert [len(sets.template_sets[name]) for name in sets.set_names] == [80, 7, 72]
    with torch.no_grad():
        logits = sets(images(2))
    assert {name: tuple(value.shape) for name, value in logits.items()} == dict.fromkeys(sets.set_names, (2, 1))


def test_a_model_that_is_not_clip_or_has_no_tokenizer_is_refused(tiny_openclip):
    with pytest.raises(EncoderError, match="needs a CLIP model with a logit_scale"):
        zero_shot_classifier(torch.nn.Linear(2, 2), tiny_openclip.tokenizer)
    with pytest.raises(EncoderError, match="pass tokenizer="):
        zero_shot_classifier(tiny_openclip.model, None)


def test_hsi_zero_shot_classifier_takes_a_list_of_set_names(tiny_openclip):
    """Failed before: ["openai", "simple", "no-scale"] was read as three templates and refused with
    "'openai' has no {} placeholder"; a list of names is the sets a --templates value lists."""
    import hsi

    model, tokenizer = tiny_openclip.model, tiny_openclip.tokenizer
    listed = hsi.zero_shot_classifier(model, tokenizer, ["openai", "simple", "no-scale"], label_space=[1, 2])
    joined = hsi.zero_shot_classifier(model, tokenizer, "openai,simple,no-scale", label_space=[1, 2])
    assert listed.set_names == joined.set_names == ("openai", "simple", "no-scale")
    pixels = images(2)
    with torch.no_grad():
        for name in listed.set_names:
            torch.testing.assert_close(listed(pixels)[name], joined(pixels)[name])
    one = hsi.zero_shot_classifier(model, tokenizer, ["simple"], label_space=[1, 2])
    assert one.template_set == "simple"
    # a list of templates (each with {}) is still one set of its own
    own = hsi.zero_shot_classifier(model, tokenizer, ["a {}.", "a photo of a {}."], label_space=[1, 2], cache_dir=False)
    assert own.template_set == "custom"
