"""Preprocessing that the toolkit did not apply: declared by whoever made predictions elsewhere
(`hsi eval --preprocessing`, `hsi.score(..., preprocessing=...)`), or unknown.

A predictions file says nothing of how its images were prepared, and on this benchmark the crop
decides the result (a 0.875 centre crop cuts a quarter off a 56 px corner object), so a result
scored from one never claims a preprocessing: it records what its submitter declares, as declared
and not checked, or "unknown". A declaration takes the fields a model's data config records, as
`FIELD=VALUE` pairs separated by commas (or a mapping of the same fields):

    resize=256             the shorter side before the centre crop, in pixels
    crop_pct=0.875         the centre crop's share of the resized side (1: no crop)
    size=224 | 224x256     the model's input: a side, or HEIGHTxWIDTH
    interpolation=bicubic  the resize filter (nearest, bilinear, bicubic, lanczos, box, hamming)
    mean=0.485/0.456/0.406 the normalisation in [0, 1] units: three values, or one for all three
    std=0.229/0.224/0.225  (above 0, at most 1)

Any subset may be declared; what is not declared is null. `resize` and `crop_pct` with a `size`
must agree as the toolkit crops (resize = int(height / crop_pct)); `resize` and `size` alone give
the crop (crop_pct = height / resize).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .models import DECLARED, INTERPOLATIONS, MAX_INPUT_SIDE, UNKNOWN, ModelError

FIELDS = ("resize", "crop_pct", "size", "interpolation", "mean", "std")
UNKNOWN_DESCRIPTION = (
    "unknown: the predictions were made outside the toolkit and their preprocessing was not declared "
    "(hsi eval --preprocessing, hsi.score(preprocessing=...))"
)
DECLARED_SOURCE = "declared by whoever made the predictions, not checked"
EXAMPLE = "resize=256,crop_pct=0.875,size=224,interpolation=bicubic,mean=0.485/0.456/0.406,std=0.229/0.224/0.225"


class PreprocessingError(ModelError):
    """A preprocessing declaration that cannot be recorded: the message names the field."""


def unknown_preprocessing() -> dict:
    """The preprocessing section of predictions nobody declared: every field null."""
    return {
        "status": UNKNOWN,
        "description": UNKNOWN_DESCRIPTION,
        "source": "not declared",
        "cropped": None,
        "crop_pct": None,
        "resize": None,
        "input_size": None,
        "interpolation": None,
        "mean": None,
        "std": None,
    }


def _pairs(text: str, flag: str) -> dict[str, str]:
    """`FIELD=VALUE,...` as a mapping, each field once."""
    pairs: dict[str, str] = {}
    for item in text.split(","):
        name, equals, value = item.partition("=")
        name = name.strip()
        if not equals or not name or not value.strip():
            raise PreprocessingError(f"{flag}: {item.strip()!r} is not FIELD=VALUE; e.g. {_example(flag)}")
        if name in pairs:
            raise PreprocessingError(f"{flag}: {name} is given twice; give each field once")
        pairs[name] = value.strip()
    return pairs


def _example(flag: str) -> str:
    return f"{flag} {EXAMPLE}" if flag.startswith("--") else f'{flag}"{EXAMPLE}"'


def _integer(value: object, flag: str, name: str) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not (isinstance(value, int) or text.isdigit()):
        raise PreprocessingError(f"{flag}: {name} is a whole number of pixels, got {text!r}")
    side = int(text)
    if not 1 <= side <= MAX_INPUT_SIDE:
        raise PreprocessingError(f"{flag}: {name} is a side of 1 to {MAX_INPUT_SIDE} pixels, got {side}")
    return side


def _number(value: object, flag: str, name: str) -> float:
    if isinstance(value, bool):
        raise PreprocessingError(f"{flag}: {name} is a number, got {value!r}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise PreprocessingError(f"{flag}: {name} is a number, got {str(value)!r}") from None
    if not math.isfinite(number):
        raise PreprocessingError(f"{flag}: {name} is a finite number, got {str(value)!r}")
    return number


def _size(value: object, flag: str) -> list[int]:
    if isinstance(value, (list, tuple)):
        sides = list(value)
    else:
        sides = str(value).lower().split("x")
    if len(sides) == 1:
        sides = sides * 2
    if len(sides) != 2:
        raise PreprocessingError(f"{flag}: size is a side or HEIGHTxWIDTH, e.g. 224 or 224x256, got {value!r}")
    return [_integer(side, flag, "size") for side in sides]


def _channels(value: object, flag: str, name: str, low: float, high: float, low_open: bool) -> list[float]:
    items = list(value) if isinstance(value, (list, tuple)) else str(value).split("/")
    if len(items) == 1:
        items = items * 3
    if len(items) != 3:
        raise PreprocessingError(f"{flag}: {name} takes 3 values (R/G/B) or one for all three, got {value!r}")
    values = [_number(item, flag, name) for item in items]
    bound = "above" if low_open else "at least"
    if any(v < low or (low_open and v == low) or v > high for v in values):
        raise PreprocessingError(
            f"{flag}: {name} is in [0, 1] units ({bound} {low:g}, at most {high:g}), got {value!r}; divide 0-255 "
            "values by 255"
        )
    return values


def _crop_pct(value: object, flag: str) -> float:
    crop = _number(value, flag, "crop_pct")
    if not 0 < crop <= 1:
        raise PreprocessingError(f"{flag}: crop_pct is the crop's share of the resized side, in (0, 1], got {crop:g}")
    return crop


def declared_preprocessing(declaration: str | Mapping, flag: str = "--preprocessing") -> dict:
    """The preprocessing section of predictions whose maker declares `declaration` (text in the
    FIELD=VALUE syntax, or a mapping of the same fields), every field checked: a PreprocessingError
    in one line naming `flag` and the field otherwise."""
    if isinstance(declaration, str):
        given: Mapping = _pairs(declaration, flag)
    elif isinstance(declaration, Mapping):
        given = declaration
    else:
        raise PreprocessingError(
            f"{flag} is FIELD=VALUE text or a mapping of {', '.join(FIELDS)}, not a {type(declaration).__name__}"
        )
    unknown = [str(name) for name in given if name not in FIELDS]
    if unknown:
        raise PreprocessingError(f"{flag}: unknown field {unknown[0]!r}; the fields are {', '.join(FIELDS)}")
    if not [value for value in given.values() if value is not None]:
        raise PreprocessingError(f"{flag} declares nothing: give at least one of {', '.join(FIELDS)}")
    value = {name: given.get(name) for name in FIELDS}
    resize = _integer(value["resize"], flag, "resize") if value["resize"] is not None else None
    crop = _crop_pct(value["crop_pct"], flag) if value["crop_pct"] is not None else None
    size = _size(value["size"], flag) if value["size"] is not None else None
    interpolation = value["interpolation"]
    if interpolation is not None and interpolation not in INTERPOLATIONS:
        raise PreprocessingError(f"{flag}: interpolation is one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}")
    mean = _channels(value["mean"], flag, "mean", 0.0, 1.0, False) if value["mean"] is not None else None
    std = _channels(value["std"], flag, "std", 0.0, 1.0, True) if value["std"] is not None else None
    if size is not None and resize is not None:
        if resize < size[0]:
            raise PreprocessingError(
                f"{flag}: resize {resize} is below the input height {size[0]}: a centre crop is never larger than "
                "the resized image"
            )
        if crop is None:
            crop = size[0] / resize
        elif int(size[0] / crop) != resize:
            raise PreprocessingError(
                f"{flag}: resize {resize} does not follow from size {size[0]} and crop_pct {crop:g} "
                f"(int({size[0]} / {crop:g}) = {int(size[0] / crop)}): give the two that define the crop"
            )
    elif size is not None and crop is not None:
        resize = int(size[0] / crop)
    section = {
        "status": DECLARED,
        "source": DECLARED_SOURCE,
        "cropped": None if crop is None else crop < 1,
        "crop_pct": crop,
        "resize": resize,
        "input_size": size,
        "interpolation": interpolation,
        "mean": mean,
        "std": std,
    }
    section["description"] = f"{DECLARED_SOURCE}: {_described(section)}"
    return section


def _described(section: dict) -> str:
    """The declared fields in words; what was not declared is said to be."""
    crop, resize, size = section["crop_pct"], section["resize"], section["input_size"]
    shape = f"{size[1]}x{size[0]}" if size else None
    if crop is None:
        geometry = "crop not declared" + (f", resize {resize}" if resize else "")
        geometry += f", input {shape}" if shape else ""
    elif crop >= 1:
        geometry = "no centre crop" + (f", input {shape}" if shape else "")
    else:
        geometry = (f"resize to {resize} then " if resize else "") + "centre crop"
        geometry += (f" {shape}" if shape else "") + f" (crop_pct {crop:g})"
    parts = [
        geometry,
        section["interpolation"] or "interpolation not declared",
        f"mean {section['mean']}" if section["mean"] else "mean not declared",
        f"std {section['std']}" if section["std"] else "std not declared",
    ]
    return ", ".join(parts)


__all__ = [
    "FIELDS",
    "PreprocessingError",
    "UNKNOWN_DESCRIPTION",
    "declared_preprocessing",
    "unknown_preprocessing",
]
