"""The composite format: what `hsi compose` writes per sample and what validation, cards, `stream()`
and the test factories read.

Members of one composite sample (key = `sample_key(...)`):
  jpg   the composite, a JPEG of canvas x canvas pixels
  cls   the config's training label as ASCII digits
  json  metadata with the fixed schema below, sorted keys

Every sample of every config carries exactly the schema's keys; a value that does not apply is null,
never missing. The manifest's per-split counts (`count_composites`) are computed from the same
metadata, so validation recounts them with the same function.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from builder.formats.parts import BACKGROUND_OWN, BACKGROUND_STATUSES

SCHEMA_VERSION = 4  # 2: requested_position and effective_size added; 3: background_fill_score; 4: background_status
COMPOSITE_MEMBERS = ("cls", "jpg", "json")
COUNT_KINDS = ("group", "size", "tier", "group_size")

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
    "size": (int, False, "object size s requested: the square side, or the short side in AR mode"),
    "effective_size": (
        int,
        False,
        "short side actually pasted: size, or less in AR mode when the long side "
        "would pass the canvas and the whole object was shrunk to keep its ratio",
    ),
    "mode": (str, False, "square (stretched to s x s) or ar (aspect ratio kept)"),
    "paste": (str, False, "box (the box crop is pasted) or mask (only masked object pixels)"),
    "requested_position": (str, False, "placement the spec asked for, e.g. center, random-corner, xy:0.25,0.75"),
    "position": (str, False, "where the object landed: requested_position, or the corner random-corner drew"),
    "box_x": (int, False, "left edge of the pasted box on the canvas"),
    "box_y": (int, False, "top edge of the pasted box on the canvas"),
    "box_w": (int, False, "width of the pasted box"),
    "box_h": (int, False, "height of the pasted box"),
    "background": (str, False, "original, random, paired, gray or noise"),
    "background_source_id": (str, True, "image id of the background (null for gray/noise)"),
    "background_wnid": (str, True, "class of the background image (null for gray/noise)"),
    "background_class_index": (int, True, "class index of the background image (null for gray/noise)"),
    "background_fill_score": (
        float,
        True,
        "fill score of the background's inpainting, 0-1, higher is better (builder.formats.fill_scores): the "
        "donor's for random and paired backgrounds, the image's own for original; null for gray/noise, for a "
        "background with nothing filled, and for parts extracted before fill scores (parts schema 1)",
    ),
    "background_status": (
        str,
        True,
        "own: the background image had a background of its own; none: its erase mask covered the whole "
        "photo, so the background is a fill made from nothing (the part's background_status); null for "
        "gray/noise. Composites before schema 4 lack it: readers take own (null for gray/noise)",
    ),
    "paired_wnid": (str, True, "the -10 subset's paired background class (null elsewhere)"),
    "group": (
        str,
        False,
        "CeO, CoO, CeR, CoR for flush centre/corner placements, else "
        "requested_position/background (builder.core.taxonomy.group_name)",
    ),
    "tier": (str, True, "Easy, Medium or Hard for the paper's groups and sizes, else null"),
    "seed": (int, False, "seed of the variant"),
    "schema_version": (int, False, "version of this schema"),
}


# The values a field may take beyond null, where they are a closed set.
FIELD_CHOICES: dict[str, tuple[str, ...]] = {"background_status": BACKGROUND_STATUSES}
# The schema version each field first appeared in (absent: in every version). A json of an older
# version is checked against the fields it had, so releases composed before a field still validate.
FIELD_SINCE = {"requested_position": 2, "effective_size": 2, "background_fill_score": 3, "background_status": 4}


def is_known_version(version: Any) -> bool:
    return isinstance(version, int) and not isinstance(version, bool) and 1 <= version <= SCHEMA_VERSION


def fields_of_version(version: Any) -> dict[str, tuple[type, bool, str]]:
    """The schema's fields as composite schema `version` had them (the manifest's `schema_version`
    says which a config holds): the current ones for any value that is no known version."""
    if not is_known_version(version):
        return COMPOSITE_FIELDS
    return {name: field for name, field in COMPOSITE_FIELDS.items() if FIELD_SINCE.get(name, 1) <= version}


def key_problems(meta: Mapping[str, Any], fields: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The keys of `fields` that `meta` lacks and the keys it has beyond them, as readable lines."""
    missing = [k for k in fields if k not in meta]
    extra = [k for k in meta if k not in fields]
    return ([f"{prefix}missing keys {missing}"] if missing else []) + (
        [f"{prefix}unexpected keys {extra}"] if extra else []
    )


def check_composite_json(meta: Any) -> list[str]:
    """Every way `meta` departs from the schema, as readable lines (empty when it conforms)."""
    if not isinstance(meta, dict):
        return ["json member is not an object"]
    version = meta.get("schema_version")
    known = is_known_version(version)
    fields = fields_of_version(version)
    problems = key_problems(meta, fields)
    for key, (kind, nullable, _) in fields.items():
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
        elif kind is float and not is_unit_number(value):
            problems.append(f"{key} must be a finite number in [0, 1], got {value!r:.40}")
        elif key in FIELD_CHOICES and value not in FIELD_CHOICES[key]:
            problems.append(f"{key} must be one of {', '.join(FIELD_CHOICES[key])} or null, got {value!r:.40}")
    if not known and version is not None:
        problems.append(f"schema_version {version!r:.40} is not a composite schema version 1-{SCHEMA_VERSION}")
    return problems


def composite_background_status(meta: Mapping[str, Any]) -> str | None:
    """The status of the background a composite sits on (`background_status`): own, none, or null
    on gray/noise; a composite before schema 4 lacks the key and reads as own on an image's
    background (`background_source_id` set), null otherwise, as parts before #46 read as own.
    ValueError for a value outside the schema's."""
    if "background_status" not in meta:
        return BACKGROUND_OWN if meta.get("background_source_id") is not None else None
    status = meta["background_status"]
    if status is not None and status not in BACKGROUND_STATUSES:
        raise ValueError(
            f"json background_status must be one of {', '.join(BACKGROUND_STATUSES)} or null, got {status!r:.40}"
        )
    return status


def is_unit_number(value: Any) -> bool:
    """A finite JSON number (not a boolean) in [0, 1]: what a fill score is."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= 1


# --- keys and members -------------------------------------------------------------------------


def position_token(position: str) -> str:
    """A key-safe spelling of a position: `xy:0.25,0.75` -> `xy0-25-0-75` (keys allow no dots)."""
    return re.sub(r"[^A-Za-z0-9-]+", "-", position.replace("xy:", "xy")).strip("-")


def sample_key(source_id: str, position: str, size: int, background: str) -> str:
    return f"{source_id}_{position_token(position)}_{size}_{background}".replace(".", "-")


def encode_jpeg_pil(canvas: np.ndarray, quality: int) -> bytes:
    """Deterministic JPEG: fixed quality and 4:2:0 subsampling, no optimize pass, no EXIF."""
    buffer = io.BytesIO()
    Image.fromarray(canvas).save(buffer, format="JPEG", quality=quality, subsampling=2, optimize=False)
    return buffer.getvalue()


def encode_jpeg(canvas: np.ndarray, quality: int) -> bytes:
    """The bytes of `encode_jpeg_pil`, 1.5-2x faster: both call libjpeg-turbo with the same settings
    (baseline tables scaled by quality, 4:2:0, JFIF 1.01 with 1:1 density and no units);
    tests/formats/test_jpeg_and_ustar_bytes.py checks that they agree."""
    if canvas.ndim != 3 or canvas.shape[2] != 3 or canvas.dtype != np.uint8 or not 1 <= quality <= 100:
        # Only RGB canvases and the specs' quality range are checked equal; PIL takes grey images
        # and reads quality -1 as its default, where OpenCV would not match.
        return encode_jpeg_pil(canvas, quality)
    return encode_jpeg_bgr(rgb_to_bgr(canvas), quality)


def rgb_to_bgr(array: np.ndarray) -> np.ndarray:
    """An RGB image (H x W x 3 uint8) in OpenCV's channel order, blue first: the order
    `encode_jpeg_bgr` takes, so compose builds its canvases in it."""
    import cv2  # imported here: readers of composites need no OpenCV

    return cv2.cvtColor(np.ascontiguousarray(array), cv2.COLOR_RGB2BGR)


def encode_jpeg_bgr(canvas: np.ndarray, quality: int) -> bytes:
    """`encode_jpeg` of a canvas whose channels come blue first (`rgb_to_bgr`); compose paints its
    canvases in that order, which saves OpenCV's conversion of every composite."""
    import cv2

    if canvas.ndim != 3 or canvas.shape[2] != 3 or canvas.dtype != np.uint8 or not 1 <= quality <= 100:
        return encode_jpeg_pil(np.ascontiguousarray(canvas[..., ::-1]), quality)
    params = (
        cv2.IMWRITE_JPEG_QUALITY,
        quality,
        cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
        cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
        cv2.IMWRITE_JPEG_OPTIMIZE,
        0,
    )
    ok, encoded = cv2.imencode(".jpg", np.ascontiguousarray(canvas), params)
    if not ok:
        raise ValueError(f"OpenCV could not encode a {canvas.shape} canvas as JPEG")
    return encoded.tobytes()


# json.dumps(meta, sort_keys=True) without building an encoder for every composite: same bytes.
_META_JSON = json.JSONEncoder(sort_keys=True)


def composite_members(jpg: bytes, label: int, meta: Mapping[str, Any]) -> dict[str, bytes]:
    """The members of one composite sample, as compose writes them."""
    return {
        "jpg": jpg,
        "cls": str(label).encode("ascii"),
        "json": _META_JSON.encode(meta).encode("utf-8"),
    }


def decode_composite_json(members: Mapping[str, bytes]) -> dict:
    """The `json` member; ValueError (UnicodeDecodeError included) when it does not parse."""
    return json.loads(members.get("json", b"").decode("utf-8"))


def iter_composite_json(shard: Path) -> Iterator[dict]:
    """The json member of every sample of a composite shard compose just wrote, read without the
    images (compose's manifest summarises its backgrounds' fill scores from them)."""
    from builder.core.shard_read import load_json_member, tar_members

    with open(shard, "rb", buffering=0) as handle:
        for member in tar_members(shard):
            if member.name.endswith(".json"):
                data = os.pread(handle.fileno(), member.size, member.offset_data)
                yield load_json_member(data, shard.name, member.name)


def decode_label(members: Mapping[str, bytes]) -> int:
    """The `cls` member as an int; ValueError when it is not ASCII digits."""
    return int(members.get("cls", b"").decode("ascii").strip())


def decode_composite_image(data: bytes):
    """The `jpg` member as an RGB PIL image; ValueError when it is not a JPEG."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        if image.format != "JPEG":
            raise ValueError(f"jpg member is a {image.format}, not a JPEG")
        return image.convert("RGB")


def decode_composite_pixels(data: bytes) -> np.ndarray:
    return np.asarray(decode_composite_image(data))


# --- counts in the manifest -------------------------------------------------------------------


def count_buckets(meta: Mapping[str, Any]) -> dict[str, str]:
    """The bucket of each count kind a sample falls in (a null tier is counted as "none")."""
    return {
        "group": meta["group"],
        "size": str(meta["size"]),
        "tier": meta["tier"] or "none",
        "group_size": f"{meta['group']}/{meta['size']}",
    }


def count_composites(metas: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter] = {kind: Counter() for kind in COUNT_KINDS}
    for meta in metas:
        for kind, bucket in count_buckets(meta).items():
            counts[kind][bucket] += 1
    return {name: dict(sorted(counter.items())) for name, counter in counts.items()}


def merge_counts(parts: Sequence[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    merged: dict[str, Counter] = {kind: Counter() for kind in COUNT_KINDS}
    for counts in parts:
        for name, values in counts.items():
            merged.setdefault(name, Counter()).update(values)
    return {name: dict(sorted(counter.items())) for name, counter in merged.items()}
