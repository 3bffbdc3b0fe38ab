"""What a result knows of its preprocessing: `preprocessing.status` of an eval.json or entry.json.

- "applied": the toolkit resized and normalised the canvas itself (a model run);
- "declared": predictions made elsewhere, whose maker stated the preprocessing;
- "unknown": predictions made elsewhere, with nothing stated.

Files written before the field existed have none: their predictions files (model spec
`predictions:...`) are "unknown", since the toolkit cannot know how they were made, and every
model run is "applied".
"""

from __future__ import annotations

PREPROCESSING_STATUSES = ("applied", "declared", "unknown")
SCORED_PREFIX = "predictions:"  # the spec of predictions made outside the toolkit (predicting.given)


def preprocessing_status(section: dict | None, spec: str) -> str:
    """The status of the preprocessing `section` (eval.json's or entry.json's `preprocessing`) of
    the model `spec`: its own `status`, else what the spec tells."""
    status = (section or {}).get("status")
    if status is not None:
        return str(status)
    return "unknown" if spec.startswith(SCORED_PREFIX) else "applied"


__all__ = ["PREPROCESSING_STATUSES", "preprocessing_status"]
