"""The fixed sample schema of composed datasets (the `json` member of every composite).

Every sample of every config carries exactly these keys; a value that does not apply is null, never
missing. Validation, cards (declared features) and loaders read this one definition.
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 1

# field -> (python type, nullable, description). Order is the order features are declared in.
COMPOSITE_FIELDS: dict[str, tuple[type, bool, str]] = {
    "wnid": (str, False, "WordNet id of the pasted object's class"),
    "class_index": (int, False, "ImageNet-1k class index 0-999 (sorted-wnid order)"),
    "class_name": (str, False, "readable class name"),
    "label": (int, False, "the training label of this config: class_index, or 0-9 in the -10 subset"),
    "source_id": (str, False, "ImageNet image id the object was cut from"),
    "variant": (str, False, "variant (config) name"),
    "split": (str, False, "split name"),
    "canvas": (int, False, "canvas side in pixels"),
    "size": (int, False, "object size s: the square side, or the short side in AR mode"),
    "mode": (str, False, "square (stretched to s x s) or ar (aspect ratio kept)"),
    "paste": (str, False, "box (the box crop is pasted) or mask (only masked object pixels)"),
    "position": (str, False, "placement name, e.g. center, top-right, xy:0.25,0.75"),
    "box_x": (int, False, "left edge of the pasted box on the canvas"),
    "box_y": (int, False, "top edge of the pasted box on the canvas"),
    "box_w": (int, False, "width of the pasted box"),
    "box_h": (int, False, "height of the pasted box"),
    "background": (str, False, "original, random, paired, gray or noise"),
    "background_source_id": (str, True, "image id of the background (null for gray/noise)"),
    "background_wnid": (str, True, "class of the background image (null for gray/noise)"),
    "background_class_index": (int, True, "class index of the background image (null for gray/noise)"),
    "paired_wnid": (str, True, "the -10 subset's paired background class (null elsewhere)"),
    "group": (str, False, "CeO, CoO, CeR, CoR for the paper's placements, else position/background"),
    "tier": (str, True, "Easy, Medium or Hard for the paper's groups and sizes, else null"),
    "seed": (int, False, "seed of the variant"),
    "schema_version": (int, False, "version of this schema"),
}


def check_composite_json(meta: Any) -> list[str]:
    """Every way `meta` departs from the schema, as readable lines (empty when it conforms)."""
    if not isinstance(meta, dict):
        return ["json member is not an object"]
    problems = []
    missing = [k for k in COMPOSITE_FIELDS if k not in meta]
    extra = [k for k in meta if k not in COMPOSITE_FIELDS]
    if missing:
        problems.append(f"missing keys {missing}")
    if extra:
        problems.append(f"unexpected keys {extra}")
    for key, (kind, nullable, _) in COMPOSITE_FIELDS.items():
        if key not in meta:
            continue
        value = meta[key]
        if value is None:
            if not nullable:
                problems.append(f"{key} is null but must be a {kind.__name__}")
        elif kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            problems.append(f"{key} must be an int, got {type(value).__name__}")
        elif kind is str and not isinstance(value, str):
            problems.append(f"{key} must be a string, got {type(value).__name__}")
    if meta.get("schema_version") not in (None, SCHEMA_VERSION) and "schema_version" in meta:
        problems.append(f"schema_version {meta['schema_version']} is not {SCHEMA_VERSION}")
    return problems
