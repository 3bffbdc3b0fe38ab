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


def label_space_problem(class_names: object, subset_wnids: object = None) -> str | None:
    """Why `class_names` (a manifest's, one per label) are not ImageNet's for the label space, or None.

    A label space is ImageNet's classes in index order: all 1000, a subset's classes (`subset_wnids`,
    the spec's foreground wnids: exactly their names, sorted by wnid as compose labels them), or a
    selection of them; so each name is an ImageNet name, at most once per class, in index order."""
    if not isinstance(class_names, (list, tuple)) or not all(isinstance(n, str) for n in class_names):
        return "class_names is not a list of strings"
    if subset_wnids is not None:
        wnids = list(subset_wnids) if isinstance(subset_wnids, (list, tuple)) else None
        if wnids is None or not all(isinstance(w, str) for w in wnids):
            return "the spec's subset does not list its classes' wnids"
        try:
            expected = [class_of(wnid).name for wnid in sorted(wnids)]
        except KeyError:
            return "the spec's subset names a wnid that is not ImageNet's"
        if list(class_names) != expected:
            return f"class_names are not the names of the spec's subset classes ({len(expected)} in wnid order)"
        return None
    names = iter(c.name for c in imagenet_classes())
    for position, name in enumerate(class_names):
        if not any(name == known for known in names):  # consumes the table: a subsequence, in index order
            return (
                f"class_names[{position}] {shown(name)} is not an ImageNet class name in index order after "
                "the ones before it; a label space is ImageNet's classes (all 1000, a subset's, or a selection)"
            )
    return None
