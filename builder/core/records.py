"""Plain records that flow between stages: boxes, source images and issue rows.

Errors are data: every bad input becomes an `Issue` row with a reason from `REASONS`, written to
`errors.jsonl` and counted in the manifest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# reason -> what happened to the input. "skipped" drops the image, "box-dropped" drops one box,
# "converted"/"clipped" keep the image after a repair, "reported" keeps it unchanged.
REASONS: dict[str, str] = {
    "unreadable-image": "skipped",
    "truncated-image": "skipped",
    "too-many-pixels": "skipped",
    "cmyk-converted": "converted",
    "grayscale-converted": "converted",
    "palette-converted": "converted",
    "alpha-dropped": "converted",
    "format-mismatch": "converted",
    "missing-annotation": "skipped",
    "malformed-annotation": "skipped",
    "unknown-wnid": "skipped",
    "duplicate-id": "skipped",
    "no-valid-box": "skipped",
    "box-outside-image": "clipped",
    "box-empty": "box-dropped",
    "box-unknown-wnid": "box-dropped",
    "box-label-mismatch": "reported",
    "annotation-without-image": "reported",
    "backend-failed": "skipped",
    # listing: names and files that cannot be read safely
    "unsafe-image-id": "skipped",
    "not-a-regular-file": "skipped",
    "folder-loop": "skipped",
    "unreadable-folder": "skipped",
    "annotation-encoding": "reported",
    # compose: a parts sample that cannot be read, or a background kind with no possible donor
    "unreadable-parts": "skipped",
    "no-foreign-background": "composites-dropped",
    "no-paired-background": "composites-dropped",
    # compose --paper-exact: the paper's moved box needs pixels the parts do not hold (no crop margin)
    "paper-crop-clipped": "skipped",
}


@dataclass(frozen=True)
class Box:
    """A ground-truth box in ImageNet's Pascal-VOC convention: 0-based, inclusive corners."""

    x0: int
    y0: int
    x1: int
    y1: int
    wnid: str

    @property
    def area(self) -> int:
        """(x1 - x0) * (y1 - y0), the paper's formula (its scores and the 'largest' box rule use it);
        a one-pixel-wide box has area 0 here but is not empty."""
        return max(0, self.x1 - self.x0) * max(0, self.y1 - self.y0)

    @property
    def is_empty(self) -> bool:
        """Inverted corners only: with inclusive corners, x0 == x1 is a box one pixel wide."""
        return self.x1 < self.x0 or self.y1 < self.y0

    def clipped(self, width: int, height: int) -> Box:
        return Box(
            min(max(self.x0, 0), width - 1),
            min(max(self.y0, 0), height - 1),
            min(max(self.x1, 0), width - 1),
            min(max(self.y1, 0), height - 1),
            self.wnid,
        )

    def as_list(self) -> list[int]:
        return [self.x0, self.y0, self.x1, self.y1]


@dataclass(frozen=True)
class SourceImage:
    """One usable ImageNet image: its id, label, file and ground-truth boxes."""

    image_id: str
    wnid: str
    path: str
    boxes: tuple[Box, ...]


@dataclass(frozen=True)
class Issue:
    """One row of `errors.jsonl` (and of validation's failure list): what was wrong with which input,
    where it was found (split, shard, sample key) and what was done about it."""

    image_id: str
    reason: str
    detail: str = ""
    stage: str = "sources"
    action: str = field(default="")
    split: str | None = None
    shard: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"unknown issue reason {self.reason!r}")
        if not self.action:
            object.__setattr__(self, "action", REASONS[self.reason])

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def sort_key(self) -> tuple[str, str, str]:
        return (self.image_id, self.reason, self.detail)


def count_by_reason(issues) -> dict[str, int]:
    counts: dict[str, int] = {}
    for issue in issues:
        counts[issue.reason] = counts.get(issue.reason, 0) + 1
    return dict(sorted(counts.items()))
