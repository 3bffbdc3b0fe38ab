"""The scores of a set of images, with their correlations and the images left out, as one report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from builder.core.errors import InputError
from builder.core.records import Issue, count_by_reason
from validation.scores.boxes import ClassScore, ImageBoxes, ImageScore, score_classes, score_image, summarise
from validation.scores.correlations import correlate_models


@dataclass
class ScoreReport:
    images: list[ImageScore]
    classes: list[ClassScore]
    summary: dict
    correlations: dict | None = None
    box_issues: list[Issue] = field(default_factory=list)  # boxes clipped or dropped to fit their image
    unscored: list[Issue] = field(default_factory=list)  # images left out of the scores, and why

    def to_json(self) -> dict:
        payload: dict = {"summary": self.summary}
        if self.correlations is not None:
            payload["accuracy_correlations"] = self.correlations
        if self.box_issues:
            payload["box_issues"] = {
                "by_reason": dict(sorted(Counter(i.reason for i in self.box_issues).items())),
                "rows": [i.to_json() for i in self.box_issues],
            }
        if self.unscored:
            payload["unscored"] = {
                "by_reason": count_by_reason(self.unscored),
                "rows": [i.to_json() for i in self.unscored],
            }
        return payload


def check_score_range(scores: Sequence[ImageScore]) -> None:
    """Both scores lie in [0, 1] by construction for boxes inside their image; a score outside says
    the boxes and sizes do not belong together, and is refused rather than averaged in."""
    bad = [s for s in scores if not (0.0 <= s.centre <= 1.0 and 0.0 <= s.size <= 1.0)]
    if bad:
        first = bad[0]
        raise InputError(
            f"{len(bad)} images score outside [0, 1] (first: {first.image_id}, centre {first.centre:.3f}, "
            f"size {first.size:.3f}): their boxes do not fit the image sizes; check --sizes-from"
        )


def compute_scores(
    items: Sequence[ImageBoxes],
    accuracy: dict[str, float] | dict[str, dict[str, float]] | None = None,
    controls: dict[str, dict[str, float]] | None = None,
    box_issues: Sequence[Issue] = (),
    unscored: Sequence[Issue] = (),
) -> ScoreReport:
    """`accuracy`: one per-class accuracy {wnid: acc}, or several by model name {name: {wnid: acc}}
    (with `controls` by the same names, for partial correlations). `unscored`: rows of images already
    left out (no size); an image whose boxes were all dropped joins them as `no-box-to-score`."""
    images = [score_image(item) for item in items if item.boxes]
    left_out = list(unscored) + [
        Issue(item.image_id, "no-box-to-score", "no box of the image is left inside it", "validate", key=item.image_id)
        for item in items
        if not item.boxes
    ]
    check_score_range(images)
    classes = score_classes(images)
    correlations = None
    if accuracy is not None:
        several = bool(accuracy) and all(isinstance(v, dict) for v in accuracy.values())
        correlations = correlate_models(classes, accuracy if several else {"accuracy": accuracy}, controls)  # type: ignore[dict-item]
    summary = summarise(classes, images)
    if box_issues:
        summary["boxes_clipped"] = sum(1 for i in box_issues if i.reason == "box-outside-image")
        summary["boxes_dropped"] = sum(1 for i in box_issues if i.reason != "box-outside-image")
    if left_out:
        summary["images_unscored"] = len(left_out)
    return ScoreReport(
        images, classes, summary, correlations, list(box_issues), sorted(left_out, key=lambda i: i.sort_key)
    )
