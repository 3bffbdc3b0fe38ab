"""The augmented-sample format: what `hsi scgs` adds to a composite sample it generated.

A generated sample has the composite members (`jpg`, `cls`, `json` with the fixed schema of
`builder.formats.composites`, copied from its source sample with `variant` set to the SCGS config)
plus:
  augment.json  where it came from and how it was made (the fields below, sorted keys)
  mask.png      the keep-mask: 8-bit grey, 255 where the source's pixels were kept, 0 where repainted
  cam.png       the Grad-CAM++ map of the predicted class, 8-bit grey (0-255 for 0-1)

Its key is `<source key>_scgs<j>` (j counts the images generated from one source, from 0), so a
generated sample never shares a key with its source. Samples copied from the source config keep
exactly the composite members.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from PIL import Image

from builder.formats.composites import key_problems

AUGMENT_SCHEMA_VERSION = 1
AUGMENT_MEMBERS = ("augment.json", "cam.png", "mask.png")
GENERATED_KEY = re.compile(r"^(?P<source>.+)_scgs(?P<index>\d+)$")

# field -> (python types, nullable, description)
AUGMENT_FIELDS: dict[str, tuple[tuple[type, ...], bool, str]] = {
    "source_key": ((str,), False, "key of the source sample in the source config's train split"),
    "source_config": ((str,), False, "the config the source sample belongs to"),
    "index": ((int,), False, "j: the j-th image generated from this source sample"),
    "true_label": ((int,), False, "the source's label (the class the prompt names)"),
    "true_class_name": ((str,), False, "readable name of the true class"),
    "predicted_label": ((int,), False, "the ERM model's wrong top-1 label on the source sample"),
    "predicted_class_name": ((str,), False, "readable name of the predicted class"),
    "cluster": ((int,), False, "k-means cluster of the source among its class's misclassified samples"),
    "mask": ((str,), False, "cam, random, shifted or none: how the keep-mask was made"),
    "threshold": ((float, int), False, "tau: the CAM mask keeps cam >= tau"),
    "cam_layer": ((str,), False, "the module whose activations Grad-CAM++ used"),
    "cam_area_fraction": ((float, int), False, "share of the canvas the CAM mask keeps"),
    "mask_area_fraction": ((float, int), False, "share of the canvas this sample's keep-mask keeps"),
    "sd_model": ((str,), False, "the inpainting pipeline's model id (or folder name)"),
    "sd_weights_sha256": ((str,), False, "sha256 over the pipeline's weight files"),
    "prompt": ((str,), False, "the prompt"),
    "negative_prompt": ((str,), False, "the negative prompt"),
    "generation_seed": ((int,), False, "seed of this image's diffusion noise, from (seed, source key, index)"),
    "paste_back": ((bool,), False, "whether the kept source pixels were pasted back after generation"),
    "label_check": ((dict,), False, "erm_label, check_label (null without --check-model), agrees, kept, flagged"),
    "schema_version": ((int,), False, "version of this block"),
}


def generated_key(source_key: str, index: int) -> str:
    return f"{source_key}_scgs{index}"


def source_of_key(key: str) -> tuple[str, int] | None:
    """(source key, index) of a generated sample's key, or None for any other key."""
    match = GENERATED_KEY.match(key)
    return (match["source"], int(match["index"])) if match else None


def encode_grey_png(values: np.ndarray) -> bytes:
    """An 8-bit grey PNG (deterministic: no metadata, fixed compression)."""
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(values, dtype=np.uint8), mode="L").save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()


def encode_keep_mask(keep: np.ndarray) -> bytes:
    return encode_grey_png(np.where(keep, 255, 0).astype(np.uint8))


def decode_keep_mask(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("L")) >= 128


def encode_cam(cam: np.ndarray) -> bytes:
    return encode_grey_png(np.clip(np.rint(np.asarray(cam, dtype=np.float64) * 255), 0, 255).astype(np.uint8))


def decode_cam(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("L")).astype(np.float32) / 255


def augment_members(block: Mapping[str, Any], keep: np.ndarray, cam: np.ndarray) -> dict[str, bytes]:
    return {
        "augment.json": json.dumps(dict(block), sort_keys=True).encode("utf-8"),
        "cam.png": encode_cam(cam),
        "mask.png": encode_keep_mask(keep),
    }


def decode_augment_json(members: Mapping[str, bytes]) -> dict:
    return json.loads(members.get("augment.json", b"").decode("utf-8"))


def is_generated(members: Mapping[str, bytes]) -> bool:
    return "augment.json" in members


def check_augment_json(block: Any) -> list[str]:
    """Every way `block` departs from the augment schema, as readable lines (empty when it conforms)."""
    if not isinstance(block, dict):
        return ["augment.json is not an object"]
    problems = key_problems(block, AUGMENT_FIELDS, "augment.json ")
    for key, (kinds, nullable, _) in AUGMENT_FIELDS.items():
        value = block.get(key)
        if key not in block or (value is None and nullable):
            continue
        wrong_bool = isinstance(value, bool) and bool not in kinds
        if wrong_bool or not isinstance(value, kinds):
            problems.append(f"augment.json {key} must be {' or '.join(k.__name__ for k in kinds)}")
    if block.get("schema_version") not in (None, AUGMENT_SCHEMA_VERSION):
        problems.append(f"augment.json schema_version {block['schema_version']} is not {AUGMENT_SCHEMA_VERSION}")
    return problems
