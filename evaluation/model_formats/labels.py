"""Which model outputs are scored, and which ImageNet class each stands for.

Classes are ImageNet-1k indices in sorted-wnid order everywhere in predictions, so a 1000-way model,
a model trained on the -10 subset and a 1000-way model restricted to the subset are scored alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from builder.core.classes import class_of, imagenet_classes, is_known_wnid
from builder.core.errors import UsageError
from builder.core.manifest import MANIFEST_NAME
from builder.core.untrusted import Fields, describe

LABEL_SPACES = ("imagenet", "subset")


class LabelSpaceError(UsageError, ValueError):
    """The model's outputs fit no label space of the config."""


@dataclass(frozen=True)
class LabelSpace:
    name: str
    outputs: np.ndarray  # indices of the model outputs that are scored
    class_index: np.ndarray  # the ImageNet class index of each scored output
    description: str

    @property
    def size(self) -> int:
        return len(self.outputs)

    def to_json(self) -> dict:
        return {"name": self.name, "classes": self.size, "description": self.description}


def config_wnids(manifest: dict, source: str = MANIFEST_NAME) -> tuple[str, ...]:
    """The config's label wnids in label order: the subset's sorted classes, else all 1000. A
    manifest whose spec or subset is not an object, or whose pairs name an unknown wnid, is one line
    naming `source` and the field."""
    subset = Fields(manifest, source).object("spec", None).object("subset", None)
    if not subset.data:
        return tuple(c.wnid for c in imagenet_classes())
    pairs = subset.object("pairs")
    for wnid in pairs.data:
        if not is_known_wnid(wnid):
            raise pairs.error(f"{describe(wnid)} is not an ImageNet-1k wnid")
    return tuple(sorted(pairs.data))


def resolve_label_space(
    num_outputs: int, declared: Sequence[str] | None, dataset_wnids: Sequence[str], choice: str = "imagenet"
) -> LabelSpace:
    if choice not in LABEL_SPACES:
        raise LabelSpaceError(f"--label-space must be one of {', '.join(LABEL_SPACES)}")
    dataset_index = np.array([class_of(w).index for w in dataset_wnids])
    is_subset = len(dataset_wnids) < 1000
    if declared:
        if len(declared) != num_outputs:
            raise LabelSpaceError(f"--classes lists {len(declared)} wnids but the model has {num_outputs} outputs")
        index = np.array([class_of(w).index for w in declared])
        outputs = np.arange(num_outputs)
        if choice == "subset" and is_subset:
            keep = np.isin(index, dataset_index)
            return LabelSpace(
                "subset",
                outputs[keep],
                index[keep],
                f"argmax over the {int(keep.sum())} declared classes in the config",
            )
        return LabelSpace("declared", outputs, index, f"argmax over the model's {num_outputs} declared classes")
    if num_outputs == 1000:
        if choice == "subset" and is_subset:
            return LabelSpace(
                "subset",
                dataset_index,
                dataset_index,
                f"1000-way model, argmax over the config's {len(dataset_index)} classes",
            )
        return LabelSpace("imagenet", np.arange(1000), np.arange(1000), "argmax over all 1000 ImageNet classes")
    if num_outputs == len(dataset_wnids):
        return LabelSpace(
            "config",
            np.arange(num_outputs),
            dataset_index,
            f"the model's {num_outputs} outputs are the config's labels in order",
        )
    raise LabelSpaceError(
        f"the model has {num_outputs} outputs, which fit neither ImageNet-1k (1000) nor this config's "
        f"{len(dataset_wnids)} labels; declare what its outputs are with --classes FILE (one wnid a line)"
    )
