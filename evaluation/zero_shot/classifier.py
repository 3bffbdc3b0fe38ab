"""Zero-shot CLIP as a classifier: a `torch.nn.Module` from preprocessed images (NCHW float) to
logits over a label space, in its order.

logits = exp(logit_scale) x cosine(image features, text classifier rows), CLIP's own scoring (the
notebook's `100. * image_features @ zeroshot_weights`, with the model's learnt scale, 100 for
OpenAI's weights). `zero_shot_classifier` scores one prompt set; `zero_shot_classifiers` embeds
each image once and returns logits per prompt set, so an evaluation scores every set from one
image pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from .class_names import class_names_for, label_space_indices, label_space_wnids
from .encoders import ClipEncoders, clip_encoders
from .templates import DEFAULT_SETS, template_sets_from, templates_from
from .text_classifier import TEXT_BATCH, text_classifiers


class _ZeroShotBase(torch.nn.Module):
    """What both forms share: the model adapter, the label space and its class names."""

    def __init__(self, encoders: ClipEncoders, label_space: tuple[int, ...], class_names: tuple[str, ...]) -> None:
        super().__init__()
        self.encoders = encoders
        self.label_space = label_space  # ImageNet class index of each logit
        self.class_names = class_names

    @property
    def wnids(self) -> tuple[str, ...]:
        """The wnid each logit stands for (what an evaluation declares as the model's classes)."""
        return label_space_wnids(self.label_space)

    def image_features(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised image features, float32 [N, dim]."""
        return torch.nn.functional.normalize(self.encoders.encode_images(images), dim=-1)


class ZeroShotClassifier(_ZeroShotBase):
    """Logits [N, len(label_space)] for one prompt set."""

    def __init__(
        self,
        encoders: ClipEncoders,
        weights: torch.Tensor,
        label_space: tuple[int, ...],
        class_names: tuple[str, ...],
        template_set: str,
        templates: tuple[str, ...],
        cache_key: str,
    ) -> None:
        super().__init__(encoders, label_space, class_names)
        self.register_buffer("text_classifier", weights.to(encoders.device, torch.float32))
        self.template_set = template_set
        self.templates = templates
        self.cache_key = cache_key

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.encoders.logit_scale() * self.image_features(images) @ self.text_classifier.T


class ZeroShotSetsClassifier(_ZeroShotBase):
    """Logits per prompt set, {set name: [N, len(label_space)]}, from one pass of the image tower."""

    def __init__(
        self,
        encoders: ClipEncoders,
        weights: Mapping[str, torch.Tensor],
        label_space: tuple[int, ...],
        class_names: tuple[str, ...],
        template_sets: Mapping[str, tuple[str, ...]],
        cache_keys: Mapping[str, str],
    ) -> None:
        super().__init__(encoders, label_space, class_names)
        self.set_names = tuple(template_sets)
        stacked = torch.stack([weights[name] for name in self.set_names])  # [sets, classes, dim]
        self.register_buffer("text_classifiers", stacked.to(encoders.device, torch.float32))
        self.template_sets = dict(template_sets)
        self.cache_keys = dict(cache_keys)

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.image_features(images)
        logits = self.encoders.logit_scale() * torch.einsum("nd,scd->snc", features, self.text_classifiers)
        return {name: logits[n] for n, name in enumerate(self.set_names)}

    def classifier(self, name: str) -> ZeroShotClassifier:
        """The single-set classifier of prompt set `name`, sharing this one's model."""
        if name not in self.set_names:
            raise KeyError(f"no prompt set {name!r} here (sets: {', '.join(self.set_names)})")
        weights = self.text_classifiers[self.set_names.index(name)]
        return ZeroShotClassifier(
            self.encoders,
            weights.clone(),
            self.label_space,
            self.class_names,
            name,
            self.template_sets[name],
            self.cache_keys[name],
        ).eval()


def is_zero_shot_module(module) -> bool:
    """Whether `module` is a zero-shot classifier of this package (one prompt set or several)."""
    return isinstance(module, _ZeroShotBase)


def _prepared(model, tokenizer, classnames, label_space) -> tuple[ClipEncoders, tuple[int, ...], tuple[str, ...]]:
    encoders = clip_encoders(model, tokenizer)
    encoders.eval()  # dropout off: the text classifier must not depend on chance
    indices = label_space_indices(label_space)
    return encoders, indices, class_names_for(indices, classnames)


def zero_shot_classifier(
    model,
    tokenizer,
    templates: str | Sequence[str] = "openai",
    classnames: Sequence[str] | Mapping[int | str, str] | None = None,
    label_space: Sequence[int | str] | None = None,
    cache_dir: Path | str | None | bool = None,
    batch_size: int = TEXT_BATCH,
) -> ZeroShotClassifier:
    """A module from preprocessed images to logits over `label_space` for one prompt set.

    model, tokenizer: an open_clip model and `open_clip.get_tokenizer(ARCH)`, or a transformers
        `CLIPModel` and its tokenizer (`clip_models.load_clip` returns both).
    templates: a prompt set's name (`openai`, `simple`, `no-scale`), a YAML file holding one set,
        or a list of templates with `{}` where the class name goes.
    classnames: None, CLIP's published names; or see `class_names.class_names_for`.
    label_space: ImageNet class indices or wnids, in logit order; None: all 1000.
    cache_dir: the text classifier cache's folder; None: $HSI_ZERO_SHOT_CACHE or $HF_HOME/hsi/zero-shot;
        False: no cache.
    """
    name, chosen = templates_from(templates)
    encoders, indices, names = _prepared(model, tokenizer, classnames, label_space)
    built = text_classifiers(encoders, names, {name: chosen}, cache_dir, batch_size)[name]
    return ZeroShotClassifier(encoders, built.weights, indices, names, name, chosen, built.key).eval()


def zero_shot_classifiers(
    model,
    tokenizer,
    template_sets: str | Sequence[str] | Mapping[str, Sequence[str]] = DEFAULT_SETS,
    classnames: Sequence[str] | Mapping[int | str, str] | None = None,
    label_space: Sequence[int | str] | None = None,
    cache_dir: Path | str | None | bool = None,
    batch_size: int = TEXT_BATCH,
) -> ZeroShotSetsClassifier:
    """A module from preprocessed images to {prompt set: logits}, embedding each image once.

    template_sets: a `--templates` value ("openai,simple,no-scale,own.yaml"), a list of its items,
        or a mapping {set name: templates}. The other arguments are `zero_shot_classifier`'s."""
    sets = template_sets_from(template_sets)
    encoders, indices, names = _prepared(model, tokenizer, classnames, label_space)
    built = text_classifiers(encoders, names, sets, cache_dir, batch_size)
    weights = {name: classifier.weights for name, classifier in built.items()}
    keys = {name: classifier.key for name, classifier in built.items()}
    return ZeroShotSetsClassifier(encoders, weights, indices, names, sets, keys).eval()


def names_prompt_sets(templates: object) -> bool:
    """Whether a list names prompt sets (or their YAML files) rather than holding templates: a
    template has `{}` where the class name goes, a set's name never does."""
    if isinstance(templates, (str, Mapping)) or not isinstance(templates, Sequence) or not templates:
        return False
    return all(isinstance(item, str) and "{}" not in item for item in templates)


def public_zero_shot_classifier(
    model,
    tokenizer,
    templates: str | Sequence[str] | Mapping[str, Sequence[str]] = "openai",
    classnames: Sequence[str] | Mapping[int | str, str] | None = None,
    label_space: Sequence[int | str] | None = None,
    cache_dir: Path | str | None | bool = None,
) -> ZeroShotClassifier | ZeroShotSetsClassifier:
    """`hsi.zero_shot_classifier`: a module that `hsi.evaluate` takes, from preprocessed images to
    logits over `label_space` (None: all 1000 classes, in index order).

    templates: one prompt set (`"openai"`, `"simple"`, `"no-scale"`, a YAML file of one set, or a
        list of templates with `{}` where the class name goes) gives one set's logits; several
        (`"openai,simple,no-scale"`, a list of set names `["openai", "simple", "no-scale"]`, a YAML
        file of several, or a mapping {name: templates}) give
        logits per set from one image pass, and `hsi.evaluate` reports each set and their
        differences. classnames: None, the curated names CLIP's authors published; or a list or a
        mapping (`class_names.class_names_for`). cache_dir: see `zero_shot_classifier`."""
    if names_prompt_sets(templates):  # ["openai", "simple"]: the sets a `--templates` value lists
        if len(templates) == 1:
            templates = templates[0]
        else:
            return zero_shot_classifiers(model, tokenizer, templates, classnames, label_space, cache_dir)
    several = isinstance(templates, Mapping) or (isinstance(templates, str) and len(template_sets_from(templates)) > 1)
    if several:
        return zero_shot_classifiers(model, tokenizer, templates, classnames, label_space, cache_dir)
    return zero_shot_classifier(model, tokenizer, templates, classnames, label_space, cache_dir)
