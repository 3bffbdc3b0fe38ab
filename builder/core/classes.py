"""The ImageNet-1k class index: 1000 wnids in sorted order (index 0-999) with readable names.

Names are not unique ("crane" is both a bird and a machine), so everything is keyed by wnid.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

from builder.core.errors import shown


@dataclass(frozen=True)
class ImageNetClass:
    index: int
    wnid: str
    name: str
    synonyms: str


@functools.lru_cache(maxsize=1)
def imagenet_classes() -> tuple[ImageNetClass, ...]:
    text = resources.files("builder").joinpath("data/imagenet_classes.tsv").read_text("utf-8")
    rows = [line.split("\t") for line in text.splitlines()[1:] if line]
    classes = tuple(ImageNetClass(int(i), wnid, name, synonyms) for i, wnid, name, synonyms in rows)
    assert [c.wnid for c in classes] == sorted(c.wnid for c in classes), "class index must be sorted"
    return classes


@functools.lru_cache(maxsize=1)
def classes_by_wnid() -> dict[str, ImageNetClass]:
    return {c.wnid: c for c in imagenet_classes()}


def class_of(wnid: str) -> ImageNetClass:
    try:
        return classes_by_wnid()[wnid]
    except KeyError:
        raise KeyError(f"{shown(wnid)} is not one of the 1000 ImageNet-1k wnids") from None


def is_known_wnid(wnid: str) -> bool:
    return wnid in classes_by_wnid()
