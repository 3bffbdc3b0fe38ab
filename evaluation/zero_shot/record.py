"""What a zero-shot run records of itself, as plain JSON: the prompt sets (names, templates, a digest
of each, the text classifier's cache key), the class names and the label space. It travels in the
predictions table's metadata (`zero_shot`), so every per-set analysis is recomputed from the table
alone, and it names the per-set prediction columns.

Prediction columns per set: each column of `SET_COLUMNS` again, suffixed `__<set>` (set names are
already limited to letters, digits, '_', '.' and '-': `templates.SET_NAME`). The first set, the
reference, also fills the plain columns, so every analysis that reads them is unchanged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from builder.core.untrusted import Fields, check_string

from .class_names import NUM_CLASSES, class_names_for, repeated_names
from .templates import MAX_SETS, SET_NAME

SET_COLUMNS = ("pred_class", "top5_class", "top5_prob", "prob_label", "prob_background_class", "prob_paired_class")
SEPARATOR = "__"
CURATED, CUSTOM = "clip-curated", "custom"


def set_column(column: str, set_name: str) -> str:
    """The column holding prompt set `set_name`'s value of `column`."""
    return f"{column}{SEPARATOR}{set_name}"


def templates_sha256(templates: Sequence[str]) -> str:
    """sha256 of a prompt set's templates as a JSON list, in order."""
    return hashlib.sha256(json.dumps(list(templates), ensure_ascii=False).encode("utf-8")).hexdigest()


def prompt_record(module, label_space_source: str) -> dict:
    """The record of a zero-shot module (`classifier.ZeroShotClassifier` or `ZeroShotSetsClassifier`):
    `label_space_source` says where its classes came from, in words."""
    if hasattr(module, "set_names"):
        sets = [(name, module.template_sets[name], module.cache_keys[name]) for name in module.set_names]
    else:
        sets = [(module.template_set, module.templates, module.cache_key)]
    indices = tuple(module.label_space)
    curated = tuple(module.class_names) == class_names_for(indices)
    return {
        "kind": module.encoders.kind,
        "class_names": CURATED if curated else CUSTOM,
        "label_space": {"classes": len(indices), "all_imagenet": indices == tuple(range(NUM_CLASSES))},
        "label_space_source": label_space_source,
        "reference": sets[0][0],
        "sets": [
            {"name": name, "templates": list(templates), "sha256": templates_sha256(templates), "cache_key": key}
            for name, templates, key in sets
        ],
        "repeated_names": {
            name: list(classes) for name, classes in repeated_names(module.class_names, indices).items()
        },
    }


def record_set_names(record: dict) -> tuple[str, ...]:
    """The set names of a record this process built."""
    return tuple(entry["name"] for entry in record["sets"])


def checked_set_names(zero_shot: Fields) -> tuple[str, ...]:
    """The prompt set names of a record read from a file (`Fields` of its `zero_shot` object): each
    a valid set name, distinct, at most MAX_SETS; anything else is one line naming the field."""
    entries = zero_shot.objects("sets")
    if not entries:
        raise zero_shot.error("names no prompt set", "sets")
    if len(entries) > MAX_SETS:
        raise zero_shot.error(f"names {len(entries)} prompt sets, more than {MAX_SETS}", "sets")
    names: list[str] = []
    for entry in entries:
        name = entry.string("name", pattern=SET_NAME)
        if name in names:
            raise entry.error(f"names the prompt set {name!r} a second time", "name")
        entry.string("sha256")
        entry.string("cache_key", None)
        for n, template in enumerate(entry.list("templates", [])):
            check_string(template, lambda problem, n=n, entry=entry: entry.error(problem, f"templates[{n}]"))
        names.append(name)
    zero_shot.string("class_names")
    return tuple(names)


def run_prompt_identity(record: dict | None) -> list | None:
    """What makes two zero-shot evaluations of one model the same: each set's name and cache key
    (weights, tokenizer, class names and templates), in order; None for any other model."""
    if not record:
        return None
    return [[entry["name"], entry.get("cache_key") or entry["sha256"]] for entry in record["sets"]]
