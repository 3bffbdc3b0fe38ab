"""One shard's samples, one at a time: members, decoding, schema, meaning and (with the parts at hand)
pixels, each failure a row."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from builder.compose.backgrounds import gray_background
from builder.compose.geometry import (
    object_size,
)
from builder.core.errors import shown
from builder.formats.augmented import (
    AUGMENT_MEMBERS,
    is_generated,
)
from builder.formats.composites import (
    COMPOSITE_MEMBERS,
    check_composite_json,
    decode_composite_json,
    decode_composite_pixels,
    decode_label,
)
from builder.formats.fill_scores import check_fill_scores
from builder.formats.parts import PARTS_MEMBERS, PARTS_MEMBERS_V1, decode_canvas, decode_parts
from validation.integrity.meaning import check_geometry, check_meaning, generated_source_key
from validation.integrity.pixels import PartsLookup, background_error, from_parts, object_rules, placement_error
from validation.integrity.results import DECODE_ERRORS, IntegrityResult, failure
from validation.integrity.shard_files import tally


@dataclass
class SampleChecker:
    split: str
    class_names: list | None
    parts: PartsLookup | None
    tolerance: float
    result: IntegrityResult
    resize_filter: str | None = None  # the spec's (builder.compose.spec); None for parts
    spec: dict = field(default_factory=dict)

    def failure_recorder(self, shard: str, key: str):
        """`fail(reason, detail)` for one sample: records a failure row naming its split, shard and key."""

        def fail(reason: str, detail: str) -> None:
            self.result.failures.append(failure(reason, detail, self.split, shard, key))

        return fail

    def composite(self, shard: str, key: str, members: dict[str, bytes], counts: dict) -> None:
        fail = self.failure_recorder(shard, key)

        generated = is_generated(members)  # hsi scgs: augment members beside the composite's
        expected_members = sorted(COMPOSITE_MEMBERS + AUGMENT_MEMBERS) if generated else list(COMPOSITE_MEMBERS)
        if sorted(members) != expected_members:
            fail("members", f"has {sorted(members)}, expected {expected_members}")
        try:
            meta = decode_composite_json(members)
        except ValueError as exc:
            fail("json-decode", f"json member does not parse: {exc}")
            return
        problems = check_composite_json(meta)
        if problems:
            fail("schema", "; ".join(problems))
            return
        tally(counts, meta)
        self.result.source_ids.append(meta["source_id"])
        try:
            label = decode_label(members)
        except ValueError:
            fail("cls", f"cls member {members.get('cls', b'')[:20]!r} is not an integer")
            label = None
        if label is not None and label != meta["label"]:
            fail("cls", f"cls says {label}, json label says {meta['label']}")
        if meta["split"] != self.split:
            fail("split", f"json says split {meta['split']!r}, the shard belongs to {self.split!r}")
        if self.class_names is not None and not 0 <= meta["label"] < len(self.class_names):
            fail("label", f"label {meta['label']} outside the manifest's {len(self.class_names)} class names")
        if meta["background"] == "random" and (
            meta["background_wnid"] == meta["wnid"] or meta["background_class_index"] == meta["class_index"]
        ):
            fail(
                "own-class-background",
                f"random background {meta['background_source_id']} is of the object's own class {meta['wnid']}",
            )
        meaning_key = generated_source_key(key, members, fail) if generated else key
        for reason, detail in check_meaning(meaning_key or key, meta, self.spec):
            fail(reason, detail)
        try:
            image = decode_composite_pixels(members.get("jpg", b""))
        except DECODE_ERRORS as exc:
            fail("jpg-decode", f"jpg member does not decode: {type(exc).__name__}: {exc}")
            return
        geometry = check_geometry(meta, image)
        for problem in geometry:
            fail("placement-bounds", problem)
        if geometry or self.parts is None or generated:  # a generated image is compared with nothing
            return
        self.compare_background(image, meta, fail)
        crop_rule, box_rounding, size_rounding = object_rules(self.spec)
        parts = from_parts(
            fail,
            "placement-parts",
            meta["source_id"],
            lambda source: self.parts.crop_and_mask(source, crop_rule, box_rounding),
        )
        if parts is None:
            return
        crop, mask = parts
        expected_wh = object_size(
            crop.shape[1],
            crop.shape[0],
            meta["size"],
            meta["canvas"],
            meta["mode"],
            self.spec["margin"],
            size_rounding,
        )
        if expected_wh != (meta["box_w"], meta["box_h"]):
            fail(
                "placement",
                f"a {crop.shape[1]}x{crop.shape[0]} crop at size {meta['size']} ({meta['mode']}) pastes "
                f"{expected_wh[0]}x{expected_wh[1]}, the sample declares {meta['box_w']}x{meta['box_h']}",
            )
            return
        box = f"({meta['box_x']},{meta['box_y']},{meta['box_w']}x{meta['box_h']})"
        self.judge(
            placement_error(image, meta, crop, mask, self.resize_filter),
            "placements_compared",
            fail,
            "placement",
            f"pixels in the declared box {box} differ from the object's crop",
        )

    def judge(self, error: float | None, counter: str, fail, reason: str, what: str) -> None:
        """Count a comparison that could be made (`error` not None) in `counter` of the result, and
        fail it with `reason` when its mean difference is above the tolerance."""
        if error is None:
            return
        setattr(self.result, counter, getattr(self.result, counter) + 1)
        if error > self.tolerance:
            fail(reason, f"{what} by {error:.1f} on average (tolerance {self.tolerance})")

    def compare_background(self, image: np.ndarray, meta: dict, fail) -> None:
        """The pixels around the pasted box against the declared background (noise is not kept)."""
        assert self.parts is not None
        kind, donor = meta["background"], meta["background_source_id"]
        if kind == "noise":
            return
        if kind == "gray":
            background = gray_background(meta["canvas"])
        else:
            background = from_parts(
                fail,
                "background-parts",
                donor,
                lambda source: self.parts.canvas(source, meta["canvas"], self.resize_filter),
            )
            if background is None:
                return
        self.judge(
            background_error(image, meta, background),
            "backgrounds_compared",
            fail,
            "background-pixels",
            f"pixels around the pasted box differ from the {kind} background of {donor or kind}",
        )

    def parts_sample(self, shard: str, key: str, members: dict[str, bytes], counts: dict) -> None:
        fail = self.failure_recorder(shard, key)

        if sorted(members) not in (sorted(PARTS_MEMBERS), sorted(PARTS_MEMBERS_V1)):
            fail("members", f"has {sorted(members)}, expected {sorted(PARTS_MEMBERS)}")
            return
        try:
            parts = decode_parts(key, members)
            decode_canvas(members["canvas.npy"])  # checks dtype and the 224 x 224 x 3 shape
            meta = parts.meta
            x0, y0, x1, y1 = meta["object_box"]
            width, height, wnid = meta["width"], meta["height"], meta["wnid"]
        except (*DECODE_ERRORS, KeyError, TypeError) as exc:
            fail("decode", f"a member does not decode: {type(exc).__name__}: {exc}")
            return
        if meta.get("schema_version", 1) != 1 and "fill.png" not in members:
            fail(
                "members",
                f"a schema {shown(meta.get('schema_version'))} part lacks fill.png, expected {sorted(PARTS_MEMBERS)}",
            )
            return
        if parts.crop.shape[:2] != (y1 - y0 + 1, x1 - x0 + 1):
            fail("crop-size", f"crop is {parts.crop.shape[1]}x{parts.crop.shape[0]}, object box {meta['object_box']}")
        if parts.background.shape[:2] != (height, width):
            fail("background-size", f"background does not have the declared {width}x{height}")
        if parts.fill.shape != parts.erase.shape or not parts.fill[parts.erase].all():
            fail("fill-mask", "fill.png must be the image's size and hold every pixel of erase.png")
        try:
            check_fill_scores(meta.get("fill_scores"), "json")
        except ValueError as exc:
            fail("fill-scores", str(exc))
        counts.setdefault("class", {})
        counts["class"][str(wnid)] = counts["class"].get(str(wnid), 0) + 1
        self.result.source_ids.append(key)
