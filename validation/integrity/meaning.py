"""What a sample says it is follows from what it is: the pasted box lies in the canvas and fits its
size; group and tier from position, background and size; the key from its parts."""

from __future__ import annotations

import numpy as np

from builder.compose.geometry import (
    CORNERS,
    GeometryError,
    place,
)
from builder.core.taxonomy import group_name, tier_of
from builder.formats.augmented import (
    check_augment_json,
    decode_augment_json,
    source_of_key,
)
from builder.formats.composites import (
    sample_key,
)


def check_geometry(meta: dict, image: np.ndarray) -> list[str]:
    """The declared box lies in the canvas and fits the declared size and mode."""
    problems = []
    canvas = meta["canvas"]
    height, width = image.shape[:2]
    if (width, height) != (canvas, canvas):
        problems.append(f"image is {width}x{height}, canvas is declared {canvas}x{canvas}")
    x, y, w, h = meta["box_x"], meta["box_y"], meta["box_w"], meta["box_h"]
    if w < 1 or h < 1 or x < 0 or y < 0 or x + w > canvas or y + h > canvas:
        problems.append(f"pasted box x={x} y={y} w={w} h={h} does not lie in the {canvas}x{canvas} canvas")
    size = meta["size"]
    if meta["mode"] == "square" and (w, h) != (size, size):
        problems.append(f"square mode with size {size} but the pasted box is {w}x{h}")
    if meta["mode"] == "ar" and min(w, h) > size:
        problems.append(f"ar mode with size {size} but the box's short side is {min(w, h)}")
    return problems


def expected_groups(meta: dict, spec: dict) -> dict[str, str]:
    """{requested position: group} of every placement of the spec that lands where `meta` says:
    the position itself, and `random-corner` for a corner when the spec asks for it."""
    positions = spec.get("positions") or [meta["position"]]
    margin = spec["margin"]
    landed = meta["position"]
    requested = [p for p in positions if p == landed or (p == "random-corner" and landed in CORNERS)]
    return {p: group_name(p, meta["background"], margin) for p in requested}


def generated_source_key(key: str, members: dict[str, bytes], fail) -> str | None:
    """The source key of a generated (hsi scgs) sample, its augment block checked; None when broken."""
    try:
        block = decode_augment_json(members)
    except ValueError as exc:
        fail("augment-json", f"augment.json does not parse: {exc}")
        return None
    problems = check_augment_json(block)
    if problems:
        fail("augment-schema", "; ".join(problems))
        return None
    if source_of_key(key) != (block["source_key"], block["index"]):
        fail(
            "key",
            f"a generated sample's key is <source key>_scgs<index>: {block['source_key']}_scgs{block['index']}",
        )
    return block["source_key"]


def check_meaning(key: str, meta: dict, spec: dict) -> list[tuple[str, str]]:
    """(reason, detail) for each label of the sample that does not follow from what it is."""
    problems = []
    groups = expected_groups(meta, spec)
    if not groups:
        problems.append(
            (
                "taxonomy",
                f"position {meta['position']!r} is not one the spec places ({', '.join(spec.get('positions') or [])})",
            )
        )
    elif meta["group"] not in groups.values():
        expected = " or ".join(sorted(set(groups.values())))
        problems.append(
            (
                "taxonomy",
                f"group {meta['group']!r} does not follow from position {meta['position']!r} and "
                f"background {meta['background']!r}: expected {expected}",
            )
        )
    else:
        tier = tier_of(meta["group"], meta["size"], meta["canvas"])
        if meta["tier"] != tier:
            problems.append(
                (
                    "taxonomy",
                    f"tier {meta['tier']!r} does not follow from group {meta['group']} and size "
                    f"{meta['size']} on a {meta['canvas']} px canvas: expected {tier!r}",
                )
            )
        keys = {
            sample_key(meta["source_id"], p, meta["size"], meta["background"])
            for p, g in groups.items()
            if g == meta["group"]
        }
        if key not in keys:
            problems.append(
                (
                    "key",
                    f"key does not match source, position, size and background (expected {' or '.join(sorted(keys))})",
                )
            )
    kind, donor = meta["background"], meta["background_source_id"]
    if kind == "original" and (donor != meta["source_id"] or meta["background_wnid"] != meta["wnid"]):
        problems.append(
            (
                "background-source",
                f"original background from {donor!r} ({meta['background_wnid']}), "
                f"not the object's own image {meta['source_id']!r}",
            )
        )
    elif kind in ("random", "paired") and donor == meta["source_id"]:
        problems.append(("background-source", f"{kind} background is the object's own image {donor!r}"))
    elif kind == "paired" and meta["background_wnid"] != meta["paired_wnid"]:
        problems.append(
            (
                "background-source",
                f"paired background of class {meta['background_wnid']}, the pair is {meta['paired_wnid']}",
            )
        )
    elif kind in ("gray", "noise") and donor is not None:
        problems.append(("background-source", f"{kind} background names a source image {donor!r}"))
    try:
        placed = place(meta["position"], meta["box_w"], meta["box_h"], meta["canvas"], spec["margin"])
    except (GeometryError, ValueError):
        placed = None  # an unknown position or an object too large: the bounds check names it
    if placed is not None and (placed.x, placed.y) != (meta["box_x"], meta["box_y"]):
        size = f"{meta['box_w']}x{meta['box_h']}"
        problems.append(
            (
                "placement-position",
                f"position {meta['position']!r} puts a {size} box at ({placed.x},"
                f"{placed.y}), the sample says ({meta['box_x']},{meta['box_y']})",
            )
        )
    return problems
