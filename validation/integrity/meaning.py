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
    status = meta.get("background_status")  # schema 4 on: null exactly on gray and noise
    if "background_status" in meta and (status is None) != (kind in ("gray", "noise")):
        problems.append(
            ("background-source", f"{kind} background has background_status {status!r}: null only on gray and noise")
        )
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


def _box_problem(box: object, width: int, height: int) -> str | None:
    """Why `box` ([x0, y0, x1, y1], inclusive corners) does not lie in a width x height image, or None."""
    if not isinstance(box, (list, tuple)) or len(box) != 4 or not all(type(v) is int for v in box):
        return f"{box!r} is not four integers"
    x0, y0, x1, y1 = box
    if not (0 <= x0 <= x1 < width and 0 <= y0 <= y1 < height):
        return f"{list(box)} does not lie in the {width}x{height} image"
    return None


def check_part_meaning(meta: dict, sizes: dict[str, tuple[int, int]], cls: object) -> list[str]:
    """What a parts sample says against what it is (the parts contract, builder.formats.parts): its
    class is ImageNet's (wnid, index, name, `cls`), its boxes lie in the source image and the object
    box is the one it points at, the full-resolution members are the image's size and crop.png and
    mask.png the object's region. `sizes`: {member: (width, height)} of its PNGs."""
    from builder.core.classes import class_of, is_known_wnid
    from builder.formats.parts import check_crop_size

    problems = []
    wnid = meta.get("wnid")
    if not isinstance(wnid, str) or not is_known_wnid(wnid):
        problems.append(f"wnid {wnid!r} is not an ImageNet-1k wnid")
    else:
        known = class_of(wnid)
        if (meta.get("class_index"), meta.get("class_name")) != (known.index, known.name):
            problems.append(
                f"class_index {meta.get('class_index')!r} and class_name {meta.get('class_name')!r} are not "
                f"{wnid}'s ({known.index}, {known.name!r})"
            )
        if cls != known.index:
            problems.append(f"cls {cls!r} is not {wnid}'s class index {known.index}")
    width, height = meta.get("width"), meta.get("height")
    if type(width) is not int or type(height) is not int or width < 1 or height < 1:
        return [*problems, f"width {width!r} and height {height!r} are not an image's size"]
    boxes = meta.get("boxes") or []
    corners = [[b.get(k) for k in ("x0", "y0", "x1", "y1")] if isinstance(b, dict) else b for b in boxes]
    for n, box in enumerate(corners):
        problem = _box_problem(box, width, height)
        if problem:
            problems.append(f"boxes[{n}] {problem}")
    index = meta.get("object_box_index")
    if type(index) is not int or not 0 <= index < len(corners):
        problems.append(f"object_box_index {index!r} names none of its {len(corners)} boxes")
    elif list(meta.get("object_box") or []) != corners[index]:
        problems.append(f"object_box {meta.get('object_box')!r} is not boxes[{index}]")
    for member in ("background.png", "erase.png", "fill.png"):
        if member in sizes and sizes[member] != (width, height):
            problems.append(f"{member} is {sizes[member][0]}x{sizes[member][1]}, the image is {width}x{height}")
    if "crop.png" in sizes and not problems:
        try:
            check_crop_size(meta, *sizes["crop.png"])
        except (ValueError, TypeError, KeyError) as exc:
            problems.append(str(exc))
        if sizes.get("mask.png") != sizes["crop.png"]:
            problems.append(f"mask.png is {sizes.get('mask.png')}, crop.png is {sizes['crop.png']}")
    return problems
