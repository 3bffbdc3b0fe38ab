"""The text classifier of zero-shot CLIP: one unit vector per class, the L2-normalised mean of the
L2-normalised embeddings of the class name put into each template.

This is the recipe of Radford et al. 2021 as published in the CLIP repository's notebook
"Prompt_Engineering_for_ImageNet.ipynb" (`zeroshot_classifier`: normalise each template's
embedding, average over templates, normalise again) and as open_clip's
`build_zero_shot_classifier` computes it. Image features are scored against it by cosine
similarity (`classifier`).

Several prompt sets are built together: a (class, template) text that two sets share (the 7
`simple` templates and 72 `no-scale` ones are all among the 80) is embedded once. Each set's
classifier is cached on its own (`text_cache`), so a set already cached costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .encoders import ClipEncoders
from .templates import fill
from .text_cache import TextClassifierCache, cache_key, default_cache_dir, weights_fingerprint

TEXT_BATCH = 256  # texts per forward pass of the text tower


@dataclass(frozen=True)
class TextClassifier:
    """One prompt set's classifier: `weights` [classes, dim] float32 on the CPU, and its cache key."""

    weights: torch.Tensor
    key: str
    from_cache: bool


def embed_templates(
    encoders: ClipEncoders, class_names: Sequence[str], templates: Sequence[str], batch_size: int = TEXT_BATCH
) -> torch.Tensor:
    """The L2-normalised embedding of every (class, template) text: [classes, templates, dim]."""
    texts = [fill(template, name) for name in class_names for template in templates]
    chunks = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            features = encoders.encode_texts(texts[start : start + batch_size]).to("cpu", torch.float32)
            chunks.append(torch.nn.functional.normalize(features, dim=-1))
    embedded = torch.cat(chunks)
    return embedded.reshape(len(class_names), len(templates), embedded.shape[-1])


def class_means(embedded: torch.Tensor) -> torch.Tensor:
    """[classes, templates, dim] normalised embeddings -> [classes, dim]: their mean, normalised."""
    return torch.nn.functional.normalize(embedded.mean(dim=1), dim=-1).contiguous()


def open_cache(cache_dir: Path | str | None | bool) -> TextClassifierCache | None:
    """The cache in `cache_dir`; None or True: the default folder; False: none."""
    if cache_dir is False:
        return None
    if cache_dir is None or cache_dir is True:
        return TextClassifierCache(default_cache_dir())
    return TextClassifierCache(cache_dir)


def text_classifiers(
    encoders: ClipEncoders,
    class_names: Sequence[str],
    template_sets: Mapping[str, Sequence[str]],
    cache_dir: Path | str | None | bool = None,
    batch_size: int = TEXT_BATCH,
) -> dict[str, TextClassifier]:
    """The classifier of each prompt set, from the cache where it holds one, else built (each
    distinct template embedded once) and stored. `cache_dir`: the folder; None: the default
    (`text_cache.default_cache_dir`); False: no cache."""
    cache = open_cache(cache_dir)
    weights = weights_fingerprint(encoders.model)
    keys = {}
    for name, templates in template_sets.items():
        tokens = encoders.tokens_digest([*class_names, *templates])
        keys[name] = cache_key(weights, tokens, class_names, templates)
    found = {name: cache.read(key, len(class_names)) for name, key in keys.items()} if cache else {}
    result = {name: TextClassifier(found[name], keys[name], True) for name in keys if found.get(name) is not None}
    missing = [name for name in template_sets if name not in result]
    if missing:
        # the union of the missing sets' templates, in first-seen order, embedded in one pass
        union = list(dict.fromkeys(template for name in missing for template in template_sets[name]))
        embedded = embed_templates(encoders, class_names, union, batch_size)
        column = {template: n for n, template in enumerate(union)}
        for name in missing:
            picked = embedded[:, [column[template] for template in template_sets[name]]]
            weights_of_set = class_means(picked)
            if cache:
                cache.write(keys[name], weights_of_set)
            result[name] = TextClassifier(weights_of_set, keys[name], False)
    return {name: result[name] for name in template_sets}
