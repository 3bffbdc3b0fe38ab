"""A CLIP model spec (`openclip:...`, `hf-clip:...`) as a classifier: the model loaded by
`clip_models.load_clip`, moved to the device, its text classifiers built (or read from the cache)
there for every prompt set over the label space, and everything the evaluation records of it.

The evaluation's model layer (`evaluation.model_formats.models`) wraps the result in its
`LoadedModel`; nothing here knows that class, so this package stays below it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from builder.core.errors import printable

from .class_names import label_space_indices
from .clip_models import HF_CLIP_PREFIX, OPENCLIP_PREFIX, WEIGHTS_VARIABLE, load_clip
from .record import prompt_record
from .templates import DEFAULT_SETS

ALL_CLASSES = "all 1000 ImageNet classes"


@dataclass
class ZeroShotSpec:
    """A loaded CLIP spec as the evaluation takes it."""

    spec: str  # as recorded: a file or folder by its name only
    module: object  # classifier.ZeroShotSetsClassifier in eval mode, on the device
    preprocessing: dict  # keyword arguments of the evaluation's Preprocessing
    classes: tuple[str, ...] | None  # wnid per logit; None: all 1000 in index order
    checkpoint: str
    checkpoint_sha256: str
    record: dict  # record.prompt_record
    notes: list[str] = field(default_factory=list)


def load_zero_shot_spec(
    spec: str,
    template_sets: Mapping[str, Sequence[str]] | None = None,
    label_space: Sequence[int | str] | None = None,
    label_space_source: str = ALL_CLASSES,
    device: str | None = None,
    cache_dir=None,
) -> ZeroShotSpec:
    """Load `spec` and build its text classifiers over `label_space` (None: all 1000 classes) for
    `template_sets` (None: openai, simple, no-scale), on `device` (None: the CPU; "auto": CUDA
    when present), reading and filling the text classifier cache."""
    from builder.backends.torch_base import resolve_device

    from .classifier import zero_shot_classifiers

    loaded = load_clip(spec)
    target = resolve_device(device or "cpu")
    loaded.model.to(target)  # the text pass runs where the images will
    module = zero_shot_classifiers(
        loaded.model,
        loaded.tokenizer,
        dict(template_sets) if template_sets else DEFAULT_SETS,
        label_space=label_space,
        cache_dir=cache_dir,
    )
    record = prompt_record(module, label_space_source)
    checkpoint, sha256 = checkpoint_of(loaded.weights, loaded.weights_sha256)
    notes = list(loaded.notes)
    if len(loaded.weights_sha256) > 1:
        notes.append(
            "weights files: " + ", ".join(f"{name} sha256 {digest}" for name, digest in loaded.weights_sha256.items())
        )
    notes += clip_notes(record, loaded.preprocessing)
    classes = None if record["label_space"]["all_imagenet"] else module.wnids
    return ZeroShotSpec(
        loaded.spec,
        module,
        loaded.preprocessing.preprocessing_fields(),
        classes,
        checkpoint,
        sha256,
        record,
        notes,
    )


def checkpoint_of(weights: str, digests: Mapping[str, str]) -> tuple[str, str]:
    """(checkpoint name, sha256) as a model record holds them: one weights file's own; for several
    (a sharded folder), the digest of their sorted name: sha256 lines."""
    if len(digests) == 1:
        (name, digest), *_ = digests.items()
        return name, digest
    listing = "".join(f"{name}: {digest}\n" for name, digest in sorted(digests.items()))
    return weights, hashlib.sha256(listing.encode("utf-8")).hexdigest()


def clip_notes(record: dict, preprocessing=None) -> list[str]:
    """The report's notes on a zero-shot model: its class names, the names that repeat (their
    classes tie), and its own preprocessing (`ClipPreprocessing`) when it centre-crops the canvas."""
    space = record["label_space"]
    names = "CLIP's curated ImageNet class names" if record["class_names"] == "clip-curated" else "custom class names"
    notes = [
        f"zero-shot over {space['classes']} classes ({record['label_space_source']}) with {names}; "
        f"prompt sets {', '.join(entry['name'] for entry in record['sets'])} (the first, "
        f"{record['reference']}, fills the prediction columns)"
    ]
    for name, classes in sorted(record["repeated_names"].items()):
        notes.append(
            f"the class name {printable(json.dumps(name))} is given to classes {', '.join(map(str, classes))}: "
            "their text embeddings are equal, so their logits tie (as in every CLIP ImageNet figure)"
        )
    if preprocessing is not None and preprocessing.crops_canvas:
        notes.append(
            f"the model's own preprocessing centre-crops the canvas (resize to {preprocessing.resize[0]}, crop "
            f"{preprocessing.input_size[0]}), cutting the border and part of every corner object; "
            "--crop-pct 1 evaluates the whole canvas"
        )
    return notes


def spec_label_space(classes: Sequence[str] | None, data_wnids: Sequence[str]) -> tuple[tuple[int, ...] | None, str]:
    """The label space of a zero-shot spec and where it came from: the classes given (`--classes`),
    else the data's own (the -10 subset's ten, or all 1000)."""
    if classes:
        return label_space_indices(list(classes)), f"the {len(classes)} classes given with --classes"
    if len(data_wnids) >= 1000:
        return None, ALL_CLASSES
    return label_space_indices(list(data_wnids)), f"the config's {len(data_wnids)} classes"


def recorded_spec(spec: str, environment: Mapping[str, str]) -> str:
    """The spec a loaded `openclip:`/`hf-clip:` model records, from the spec alone: a weights file
    or folder by its name, the file $HSI_OPENCLIP_WEIGHTS names when the spec names none."""
    from pathlib import Path

    if spec.startswith(OPENCLIP_PREFIX):
        arch, _, weights = spec[len(OPENCLIP_PREFIX) :].partition(":")
        arch = Path(arch).stem if arch.endswith(".json") else arch  # a config file is registered by its stem
        weights = weights or environment.get(WEIGHTS_VARIABLE, "")
        return f"{OPENCLIP_PREFIX}{arch}:{Path(weights).name}" if weights else f"{OPENCLIP_PREFIX}{arch}"
    target = spec[len(HF_CLIP_PREFIX) :]
    path = Path(target).expanduser()
    return f"{HF_CLIP_PREFIX}{path.name if path.is_dir() else target}"
