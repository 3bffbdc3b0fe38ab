"""What an evaluation can claim about itself, read by one rule whoever reads it: the status of its
preprocessing.

A preprocessing section (of eval.json, of a predictions table's metadata, of entry.json) records
`status`: "applied" (the toolkit ran the model and applied this preprocessing itself), "declared"
(stated by whoever made the predictions, not checked) or "unknown" (nothing declared: the crop,
size, interpolation, mean and std are null). Files written before the field existed have none:
predictions scored from outside the toolkit (a spec `predictions:FILE`) are "unknown", whatever their
old section said (it said "not cropped", which nobody knew), and every other run is "applied".
`preprocessing_status` is that rule; the leaderboards, the site, the card, `hsi leaderboard verify`
and the entries all read the status through it.
"""

from __future__ import annotations

from collections.abc import Mapping

from builder.core.errors import printable
from builder.core.untrusted import UntrustedInput
from evaluation.model_formats.declared import unknown_preprocessing
from evaluation.model_formats.identity import identity_words
from evaluation.model_formats.models import APPLIED, PREPROCESSING_STATUSES, UNKNOWN
from evaluation.predicting.given import GIVEN_SPEC_PREFIX

# Every field of a preprocessing section, as `recorded_preprocessing` gives it.
PREPROCESSING_KEYS = (
    "status",
    "description",
    "source",
    "cropped",
    "crop_pct",
    "resize",
    "input_size",
    "interpolation",
    "mean",
    "std",
)


def preprocessing_status(section: Mapping | None, spec: str) -> str:
    """The status of a preprocessing section, "applied", "declared" or "unknown": its own `status`,
    or for a section written before it existed (or none at all), "unknown" for predictions made
    outside the toolkit (`spec` starts with `predictions:`) and "applied" for every model the toolkit
    ran."""
    recorded = section.get("status") if isinstance(section, Mapping) else None
    if recorded is None:
        return UNKNOWN if str(spec).startswith(GIVEN_SPEC_PREFIX) else APPLIED
    if recorded not in PREPROCESSING_STATUSES:
        raise UntrustedInput(
            f"preprocessing.status: {printable(repr(recorded))} is not one of {', '.join(PREPROCESSING_STATUSES)}: "
            "pass the files hsi eval wrote, unedited"
        )
    return recorded


def recorded_preprocessing(section: Mapping | None, spec: str) -> dict:
    """The preprocessing section with every field of PREPROCESSING_KEYS, its status by
    `preprocessing_status`: an "unknown" one with its fields null (an old section's `cropped: false`
    is dropped: nobody knew it), an older applied one with the resize its crop implies."""
    section = dict(section or {})
    status = preprocessing_status(section, spec)
    if status == UNKNOWN:
        unknown = unknown_preprocessing()
        if section.get("status") == UNKNOWN and isinstance(section.get("description"), str):
            unknown["description"] = section["description"]
        return {key: unknown[key] for key in PREPROCESSING_KEYS}
    recorded = {key: section.get(key) for key in PREPROCESSING_KEYS}
    recorded["status"] = status
    if status == APPLIED:
        recorded["cropped"] = bool(section.get("cropped"))
        if "resize" not in section:
            recorded["resize"] = _implied_resize(section)
    return recorded


def _implied_resize(section: Mapping) -> int | None:
    """The resized side a crop implies (int(height / crop_pct), as the toolkit crops), else None."""
    crop, size = section.get("crop_pct"), section.get("input_size")
    if not section.get("cropped") or not isinstance(crop, (int, float)) or not crop:
        return None
    if not isinstance(size, (list, tuple)) or not size or not isinstance(size[0], int):
        return None
    return int(size[0] / crop)


def preprocessing_claim(run: Mapping) -> str:
    """What a page may say of a run's preprocessing in a few words, from `report_fields.checked_run`'s
    fields: what the toolkit applied, what a submitter declared (said to be unchecked), or that it
    is unknown; never "not cropped" where nobody knows."""
    status = run["preprocessing_status"]
    if status == UNKNOWN:
        return "unknown preprocessing (predictions made elsewhere; none declared)"
    if status == APPLIED:
        if run["cropped"]:
            return f"centre-cropped on purpose (crop_pct {run['crop_pct']:g})"
        return "the 224 canvas as it is, not centre-cropped"
    if run["cropped"]:
        crop = f"centre-cropped (crop_pct {run['crop_pct']:g})"
    else:
        crop = "not centre-cropped" if run["cropped"] is False else "crop not declared"
    return f"declared, not checked: {crop}"


PUBLISHED_PREFIXES = ("timm:", "tv:")  # specs that name a library's published weights


def weights_claim(run: Mapping) -> tuple[str, str | None, str | None]:
    """(what the weights are, their sha256 or None, a note on that sha256) from
    `report_fields.checked_run`'s fields: the weights file a spec loaded and its sha256; a library's
    published weights only for a timm: or tv: spec without a file; an in-memory model's identity
    (a module's fingerprint, a callable's declared sha256); otherwise that they are not known."""
    spec, identity = run["spec"], run.get("identity")
    if spec.startswith(GIVEN_SPEC_PREFIX):
        return "not known: the predictions were made outside the toolkit", None, "not known"
    if identity is not None:
        fingerprint, declared = identity["state_dict_sha256"], identity["weights_sha256"]
        if fingerprint:
            return identity_words(identity), fingerprint, "the state_dict's fingerprint"
        return identity_words(identity), declared, "as declared, not checked" if declared else "not known"
    if run["checkpoint"]:
        return run["checkpoint"], run["checkpoint_sha256"], None if run["checkpoint_sha256"] else "not recorded"
    if spec.startswith(PUBLISHED_PREFIXES):
        return "the library's published weights of the spec", None, "not recorded"
    return "not known: not loaded from a spec, and no identity recorded", None, "not known"


__all__ = [
    "PREPROCESSING_KEYS",
    "preprocessing_claim",
    "preprocessing_status",
    "recorded_preprocessing",
    "weights_claim",
]
