"""The class names a zero-shot model reads, for a label space.

A label space is the ImageNet classes the logits cover, in logit order: all 1000 (the default), the
-10 subset, or any set, given as class indices (0-999, sorted-wnid order, as everywhere in the
toolkit) or wnids. The names are the curated ones CLIP's authors published (`published`), which
follow the same standard index order as `builder/data/imagenet_classes.tsv` (the tests check the
two agree); one's own names replace them for all or some classes.

Two published names repeat ("missile" for 657 and 744, "sunglasses" for 836 and 837): those class
pairs get the same text embedding, so their logits tie. They are kept as published, since that is
what every CLIP ImageNet number was measured with; `repeated_names` lists them for a report.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

from builder.core.classes import class_of, imagenet_classes
from builder.core.errors import UsageError, first_few, shown
from builder.core.untrusted import describe

from .published import clip_class_names

NUM_CLASSES = 1000
MAX_NAME_CHARACTERS = 200


class ClassNamesError(UsageError, ValueError):
    """A label space or a class name list that cannot be used."""


def label_space_indices(label_space: Sequence[int | str] | None = None) -> tuple[int, ...]:
    """The ImageNet class indices of a label space, in its order: None is all 1000; otherwise
    indices 0-999 or wnids, each once."""
    if label_space is None:
        return tuple(range(NUM_CLASSES))
    if isinstance(label_space, str):
        raise ClassNamesError("label_space takes a list of class indices or wnids, not one string")
    indices = [_class_index(item) for item in label_space]
    if not indices:
        raise ClassNamesError("label_space is empty; give at least one class (None: all 1000)")
    repeated = sorted({index for index in indices if indices.count(index) > 1})
    if repeated:
        raise ClassNamesError(f"label_space lists the classes {first_few(repeated)} more than once")
    return tuple(indices)


def _class_index(item: object) -> int:
    if isinstance(item, str):
        try:
            return class_of(item).index
        except KeyError:
            raise ClassNamesError(f"label_space: {shown(item)} is not one of the 1000 ImageNet-1k wnids") from None
    try:
        index = operator.index(item)  # an int or a numpy integer; never a float or a bool
    except TypeError:
        index = None
    if index is None or isinstance(item, bool):
        raise ClassNamesError(f"label_space: expected a class index or a wnid, got {describe(item)}")
    if not 0 <= index < NUM_CLASSES:
        raise ClassNamesError(f"label_space: class index {index} is outside 0-{NUM_CLASSES - 1}")
    return index


def label_space_wnids(label_space: Sequence[int | str] | None = None) -> tuple[str, ...]:
    """The wnids of a label space, in its order (what a model's outputs stand for)."""
    classes = imagenet_classes()
    return tuple(classes[index].wnid for index in label_space_indices(label_space))


def class_names_for(
    label_space: Sequence[int | str] | None = None,
    classnames: Sequence[str] | Mapping[int | str, str] | None = None,
) -> tuple[str, ...]:
    """One name per class of the label space, in its order.

    `classnames`: None, the published CLIP names; a list of one name per class of the label space
    (in its order) or of all 1000 (by index); or a mapping from class index or wnid to a name, which
    replaces the published name of those classes only."""
    indices = label_space_indices(label_space)
    if classnames is None:
        published = clip_class_names()
        return tuple(published[index] for index in indices)
    if isinstance(classnames, Mapping):
        published = clip_class_names()
        replaced = {_class_index(key): _checked_name(name, f"classnames[{key!r}]") for key, name in classnames.items()}
        return tuple(replaced.get(index, published[index]) for index in indices)
    if isinstance(classnames, str):
        raise ClassNamesError("classnames takes a list of names or a mapping from class to name, not one string")
    names = [_checked_name(name, f"classnames[{n}]") for n, name in enumerate(classnames)]
    if len(names) == len(indices):
        return tuple(names)
    if len(names) == NUM_CLASSES:
        return tuple(names[index] for index in indices)
    raise ClassNamesError(
        f"classnames lists {len(names)} names, but the label space has {len(indices)} classes: give one name per "
        f"class of the label space, in its order, or {NUM_CLASSES} by class index"
    )


def _checked_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ClassNamesError(f"{where}: expected a class name, got {describe(name)}")
    if len(name) > MAX_NAME_CHARACTERS or not name.isprintable():
        raise ClassNamesError(f"{where}: {shown(name)} is not one line of at most {MAX_NAME_CHARACTERS} characters")
    return name


def repeated_names(names: Sequence[str], label_space: Sequence[int | str] | None = None) -> dict[str, tuple[int, ...]]:
    """Each name given to more than one class of the label space, with those classes' indices: their
    text embeddings are equal, so the model cannot tell them apart."""
    indices = label_space_indices(label_space)
    by_name: dict[str, list[int]] = {}
    for index, name in zip(indices, names):
        by_name.setdefault(name, []).append(index)
    return {name: tuple(classes) for name, classes in by_name.items() if len(classes) > 1}
