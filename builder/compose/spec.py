"""Variant specs: named YAML files shipped in `builder/variants/`, or a user's own YAML file, with
CLI overrides on top; validated into one frozen `VariantSpec` whose resolved dict and fingerprint
are saved beside the output.

A spec that was changed by overrides is a different dataset, so its config (folder) name gets the
fingerprint of the resolved spec as a suffix, unless a new `name` is given explicitly (a different
`shard_size` alone keeps the name: the samples are the same, only packed differently).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import import_module, resources
from pathlib import Path
from types import ModuleType
from typing import Any

from builder.compose.backgrounds import BACKGROUND_KINDS, DONOR_SCHEMES
from builder.compose.geometry import (
    BOX_ROUNDINGS,
    CORNER_DRAWS,
    CROPS,
    MODES,
    PASTE_MODES,
    SIZE_ROUNDINGS,
    GeometryError,
    check_position,
)
from builder.core.classes import class_of, is_known_wnid
from builder.core.config import ConfigError, fingerprint, load_yaml_mapping
from builder.core.imaging import RESIZE_FILTERS
from builder.formats.composites import position_token

NAMED_VARIANTS = ("hard-spurious-imagenet", "hard-spurious-imagenet-ar", "hard-spurious-imagenet-10")
# --paper-exact: the paper's object pixels and donor scheme (without its own-class draw)
PAPER_EXACT = {
    "crop": "exclusive",
    "box_rounding": "float32-normalised",
    "donors": "per-class",
    "corner_draw": "per-composite",
    "size_rounding": "truncate",
    "no_background_donors": True,
}
LIST_FIELDS = ("sizes", "positions", "backgrounds", "splits")


@dataclass(frozen=True)
class HoldoutSpec:
    """A split carved from another output split by source image (see builder.compose.holdout)."""

    source: str  # the output split it is carved from (`from` in YAML)
    fraction: float
    name: str = "val"

    def to_json(self) -> dict:
        return {"from": self.source, "fraction": self.fraction, "name": self.name}


def parse_holdout(value: Any) -> HoldoutSpec | None:
    """`{from, fraction, name}` or the flag's `FROM:FRACTION[:NAME]` -> a HoldoutSpec."""
    if value is None or isinstance(value, HoldoutSpec):
        return value
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) not in (2, 3):
            _fail("holdout", f"{value!r}: write FROM:FRACTION:NAME, e.g. train:0.05:val")
        value = dict(zip(("from", "fraction", "name"), parts))
    if not isinstance(value, Mapping) or sorted(set(value) - {"from", "fraction", "name"}) or "from" not in value:
        _fail("holdout", "must be a mapping {from: SPLIT, fraction: F, name: NAME} or FROM:FRACTION:NAME")
    try:
        fraction = float(value.get("fraction", 0.05))
    except (TypeError, ValueError):
        _fail("holdout", f"fraction {value.get('fraction')!r} is not a number")
    return HoldoutSpec(str(value["from"]), fraction, str(value.get("name", "val")))


@dataclass(frozen=True)
class SubsetSpec:
    """The -10 subset: foreground wnid -> paired background wnid, and how splits are drawn."""

    pairs: tuple[tuple[str, str], ...]
    majority: float = 0.9
    train_fraction: float = 0.5

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(sorted(fg for fg, _ in self.pairs))

    def label_of(self, wnid: str) -> int:
        return self.classes.index(wnid)

    def paired(self, wnid: str) -> str:
        return dict(self.pairs)[wnid]

    def to_json(self) -> dict:
        return {"pairs": dict(self.pairs), "majority": self.majority, "train_fraction": self.train_fraction}


@dataclass(frozen=True)
class VariantSpec:
    name: str
    description: str = ""
    canvas: int = 224
    sizes: tuple[int, ...] = (56, 84, 112)
    positions: tuple[str, ...] = ("center", "top-right")
    backgrounds: tuple[str, ...] = ("original", "random")
    mode: str = "square"
    paste: str = "box"
    margin: int = 0
    resize_filter: str = "bicubic"
    jpeg_quality: int = 95
    seed: int = 0
    splits: tuple[str, ...] = ("val",)
    shard_size: int = 1200  # composites per shard (whole source images are never split)
    subset: SubsetSpec | None = field(default=None)
    # random backgrounds: balanced (new variants), per-image (the named variants), per-class (the paper)
    donors: str = "balanced"
    # the paper's object pixels (see README, --paper-exact): its exclusive crop and float32 boxes
    crop: str = "inclusive"
    box_rounding: str = "none"
    # random-corner: one corner per (image, size), shared by O and R (ours), or drawn per composite
    corner_draw: str = "per-size"
    # AR mode's side from the ratio: rounded half up (ours) or truncated as the paper's int() did
    size_rounding: str = "half-up"
    holdout: HoldoutSpec | None = field(default=None)
    # keep only backgrounds (own and donors) whose fill score is at least this (see planning.py)
    min_fill: float | None = None
    # parts with no background of their own (the erase mask covered the photo) as foreign-background
    # donors too (the paper's way, --paper-exact); by default they donate none (see planning.py)
    no_background_donors: bool = False

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def planned_splits(self) -> tuple[str, ...]:
        """The output splits before any holdout is carved."""
        return ("train", "test") if self.subset else self.splits

    @property
    def output_splits(self) -> tuple[str, ...]:
        return self.planned_splits + ((self.holdout.name,) if self.holdout else ())

    def to_json(self) -> dict:
        data = asdict(self)
        for name in LIST_FIELDS:
            data[name] = list(data[name])
        data["subset"] = self.subset.to_json() if self.subset else None
        # Absent unless asked for: specs without a holdout keep their fingerprint (and bytes).
        if self.size_rounding == "half-up":  # absent unless asked for, as holdout
            del data["size_rounding"]
        if self.min_fill is None:  # absent unless asked for, as holdout
            del data["min_fill"]
        if not self.no_background_donors:  # absent unless asked for, as holdout
            del data["no_background_donors"]
        if self.holdout is None:
            del data["holdout"]
        else:
            data["holdout"] = self.holdout.to_json()
        return data

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.to_json())


# the spec fields `hsi compose` has no flag for; every other field `x_y` is the flag `--x-y`
FIELDS_WITHOUT_FLAG = ("description", "subset")


def _fail(field_name: str, message: str) -> None:
    top = field_name.split(".")[0]
    flag = "" if top in FIELDS_WITHOUT_FLAG else f" (--{top.replace('_', '-')})"
    raise ConfigError(f"variant field `{field_name}`{flag}: {message}")


def _whole_number(field_name: str, value: Any) -> int:
    """`value` as an int, refused naming the field (and its flag) and the item itself."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        _fail(field_name, f"{value!r} is not a whole number")
    try:
        return int(value)
    except (TypeError, ValueError):
        _fail(field_name, f"{str(value)[:40]!r} is not a whole number")
    raise AssertionError  # _fail raised


def _validate(spec: VariantSpec) -> None:
    if not spec.name or any(ch in spec.name for ch in "/\\ ."):
        _fail("name", f"{spec.name!r} must be non-empty, without '/', '\\\\', spaces or dots (it names a folder)")
    if spec.canvas < 8:
        _fail("canvas", f"must be at least 8, got {spec.canvas}")
    if spec.margin < 0:
        _fail("margin", f"must be >= 0, got {spec.margin}")
    if not spec.sizes:
        _fail("sizes", "needs at least one size")
    for size in spec.sizes:
        if size < 1:
            _fail("sizes", f"{size} is not a size: each must be a positive number of pixels (e.g. 56,84,112)")
        if size > spec.canvas - 2 * spec.margin:
            _fail("sizes", f"{size} does not fit a {spec.canvas} px canvas with margin {spec.margin}")
    if len(set(spec.sizes)) != len(spec.sizes):
        _fail("sizes", f"{list(spec.sizes)} lists a size twice")
    if not spec.positions:
        _fail("positions", "needs at least one position")
    for position in spec.positions:
        try:
            check_position(position)
        except GeometryError as exc:
            _fail("positions", str(exc))
    tokens = [position_token(p) for p in spec.positions]
    if len(set(tokens)) != len(tokens):
        _fail("positions", f"{list(spec.positions)} lists a position twice")
    unknown = [b for b in spec.backgrounds if b not in BACKGROUND_KINDS]
    if not spec.backgrounds or unknown:
        _fail("backgrounds", f"unknown {unknown}; use some of {', '.join(BACKGROUND_KINDS)}")
    if len(set(spec.backgrounds)) != len(spec.backgrounds):
        _fail("backgrounds", f"{list(spec.backgrounds)} lists a kind twice")
    if spec.mode not in MODES:
        _fail("mode", f"{spec.mode!r}; use one of {', '.join(MODES)}")
    if spec.paste not in PASTE_MODES:
        _fail("paste", f"{spec.paste!r}; use one of {', '.join(PASTE_MODES)}")
    if spec.resize_filter not in RESIZE_FILTERS:
        _fail("resize_filter", f"{spec.resize_filter!r}; use one of {', '.join(RESIZE_FILTERS)}")
    if not 1 <= spec.jpeg_quality <= 100:
        _fail("jpeg_quality", f"must lie in 1..100, got {spec.jpeg_quality}")
    for name, allowed in (
        ("donors", DONOR_SCHEMES),
        ("crop", CROPS),
        ("box_rounding", BOX_ROUNDINGS),
        ("corner_draw", CORNER_DRAWS),
        ("size_rounding", SIZE_ROUNDINGS),
    ):
        if getattr(spec, name) not in allowed:
            _fail(name, f"{getattr(spec, name)!r}; use one of {', '.join(allowed)}")
    if spec.shard_size < 1:
        _fail("shard_size", "must be at least 1")
    if not spec.splits or len(set(spec.splits)) != len(spec.splits):
        _fail("splits", f"{list(spec.splits)} must list each parts split once")
    if spec.holdout is not None:
        _validate_holdout(spec)
    if spec.min_fill is not None and not (
        isinstance(spec.min_fill, float) and math.isfinite(spec.min_fill) and 0.0 <= spec.min_fill <= 1.0
    ):
        _fail("min_fill", f"must be a fill score in [0, 1] (e.g. 0.3), got {spec.min_fill!r:.40}")
    if not isinstance(spec.no_background_donors, bool):
        _fail("no_background_donors", f"must be true or false, got {spec.no_background_donors!r:.40}")
    if spec.min_fill is not None and not set(spec.backgrounds) & {"original", "random", "paired"}:
        _fail("min_fill", f"filters inpainted backgrounds, and {list(spec.backgrounds)} uses none")
    if spec.subset is None:
        if "paired" in spec.backgrounds:
            _fail("backgrounds", "`paired` needs a `subset` with class pairs (see hard-spurious-imagenet-10)")
        return
    if sorted(spec.backgrounds) != ["original", "paired"]:
        _fail("backgrounds", "a subset variant uses exactly [original, paired]")
    subset = spec.subset
    foreground = [fg for fg, _ in subset.pairs]
    if len(set(foreground)) != len(foreground) or len(foreground) < 2:
        _fail("subset.pairs", "needs at least two distinct foreground classes")
    for fg, bg in subset.pairs:
        for wnid in (fg, bg):
            if not is_known_wnid(wnid):
                _fail("subset.pairs", f"{wnid!r} is not an ImageNet-1k wnid")
        if fg == bg:
            _fail("subset.pairs", f"{fg} is paired with itself")
        if bg not in foreground:
            _fail(
                "subset.pairs",
                f"paired class {bg} ({class_of(bg).name}) must be one of the subset's classes, "
                "so that predicting the background's class is a countable label",
            )
    if not 0.0 <= subset.majority <= 1.0:
        _fail("subset.majority", f"must lie in [0, 1], got {subset.majority}")
    if not 0.0 < subset.train_fraction < 1.0:
        _fail("subset.train_fraction", f"must lie in (0, 1), got {subset.train_fraction}")


def _validate_holdout(spec: VariantSpec) -> None:
    holdout = spec.holdout
    if holdout.source not in spec.planned_splits:
        _fail("holdout", f"from {holdout.source!r} is not an output split; use one of {list(spec.planned_splits)}")
    if holdout.name in spec.planned_splits or not holdout.name or any(c in holdout.name for c in "/\\ .-"):
        _fail(
            "holdout",
            f"name {holdout.name!r} must be a new split name (letters, digits, _), not one of "
            f"{list(spec.planned_splits)}",
        )
    if not 0.0 < holdout.fraction < 1.0:
        _fail("holdout", f"fraction must lie in (0, 1), got {holdout.fraction}")


def _as_list(name: str, value: Any) -> list:
    if isinstance(value, str):
        value = [part.strip() for part in _split_commas(value) if part.strip()]
    if not isinstance(value, (list, tuple)):
        _fail(name, f"must be a list, got {value!r}")
    return list(value)


def _split_commas(text: str) -> list[str]:
    """Split a comma list, keeping `xy:0.25,0.75` in one piece."""
    parts: list[str] = []
    for piece in text.split(","):
        if parts and parts[-1].startswith("xy:") and "," not in parts[-1]:
            parts[-1] = f"{parts[-1]},{piece.strip()}"
        else:
            parts.append(piece.strip())
    return parts


def _coerce(values: Mapping[str, Any]) -> dict:
    known = {f.name for f in fields(VariantSpec)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown variant fields {unknown}; known: {sorted(known)}")
    data = dict(values)
    for name in LIST_FIELDS:
        if name in data:
            data[name] = tuple(_as_list(name, data[name]))
    if "sizes" in data:
        data["sizes"] = tuple(_whole_number("sizes", s) for s in data["sizes"])
    for name in ("canvas", "margin", "jpeg_quality", "seed", "shard_size"):
        if name in data:
            data[name] = _whole_number(name, data[name])
    for name in ("positions", "backgrounds", "splits"):
        if name in data:
            data[name] = tuple(str(v) for v in data[name])
    if "holdout" in data:
        data["holdout"] = parse_holdout(data["holdout"])
    if data.get("min_fill") is not None:
        data["min_fill"] = _fill_threshold(data["min_fill"])
    subset = data.get("subset")
    if isinstance(subset, Mapping):
        pairs = subset.get("pairs") or {}
        if not isinstance(pairs, Mapping):
            _fail("subset.pairs", "must map foreground wnid -> background wnid")
        extra = sorted(set(subset) - {"pairs", "majority", "train_fraction"})
        if extra:
            _fail("subset", f"unknown keys {extra}")
        data["subset"] = SubsetSpec(
            pairs=tuple(sorted((str(k), str(v)) for k, v in pairs.items())),
            majority=float(subset.get("majority", 0.9)),
            train_fraction=float(subset.get("train_fraction", 0.5)),
        )
    elif subset is not None:
        _fail("subset", "must be a mapping with `pairs`")
    return data


def _fill_threshold(value: Any) -> float:
    """A `min_fill` as given in YAML or on the command line: a number, never a boolean."""
    if isinstance(value, bool):
        _fail("min_fill", f"must be a number in [0, 1], got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        _fail("min_fill", f"must be a number in [0, 1], got {value!r:.40}")
    raise AssertionError  # _fail raised


def spec_from_json(data: Mapping[str, Any], source: str = "_info.json") -> VariantSpec:
    """The typed spec a manifest recorded (its `spec` field), defaults filled by this type and nowhere
    else; a field this tool does not know, or a value it would not compose, is one line naming it."""
    try:
        return VariantSpec(**_coerce(data))
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"{source}: its spec is not one this tool composes ({exc})") from None


def variant_folder(name: str) -> str:
    """The folder of a named variant: its name with '-' as '_' (an importable package name)."""
    return name.replace("-", "_")


# Variants whose planning is their own code (in their folder, as `planning.plan_jobs`): every spec
# with a `subset` is planned by the -10 variant's rules for splits and pairs.
SUBSET_PLANNING = "builder.variants.hard_spurious_imagenet_10.planning"


def variant_planning(spec: VariantSpec) -> ModuleType | None:
    """The module that plans `spec`'s composites, or None for the compose planner's standard rule."""
    return import_module(SUBSET_PLANNING) if spec.subset else None


def spec_mapping(variant: str) -> dict:
    """The raw mapping of a named variant or of a YAML file path."""
    if variant in NAMED_VARIANTS:
        text_path = resources.files("builder.variants").joinpath(variant_folder(variant), "spec.yaml")
        with resources.as_file(text_path) as path:
            return load_yaml_mapping(path)
    path = Path(variant)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return load_yaml_mapping(path)
    raise ConfigError(f"unknown variant {variant!r}; use one of {', '.join(NAMED_VARIANTS)} or a path to a YAML spec")


def load_variant(variant: str, overrides: Mapping[str, Any] | None = None) -> VariantSpec:
    """The validated spec of `variant` (a name or a YAML path) with `overrides` (None values ignored)."""
    base = _coerce(spec_mapping(variant))
    if "name" not in base:
        raise ConfigError(f"variant spec {variant!r} lacks a `name`")
    changes = _coerce({k: v for k, v in (overrides or {}).items() if v is not None})
    base_spec = VariantSpec(**base)
    merged = {**base, **{k: v for k, v in changes.items() if k != "name"}}
    spec = VariantSpec(**merged)
    if "name" in changes:
        return VariantSpec(**{**merged, "name": changes["name"]})
    if replace(spec, shard_size=base_spec.shard_size) != base_spec:
        # Other samples under the same folder name would clash with the original dataset; the
        # shard size only changes how the same samples are packed, so it keeps the name.
        return VariantSpec(**{**merged, "name": f"{base_spec.name}-custom-{spec.fingerprint[:8]}"})
    return spec
