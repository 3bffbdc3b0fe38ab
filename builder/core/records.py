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
    # the inpainter could not fill an image itself (PatchMatch with too few source pixels): another
    # filled it, named in the part's provenance
    "inpaint-fallback": "converted",
    # the erase mask covered the whole photo: nothing of its own to fill from; the part is kept with
    # background_status "none" (compose uses it as no foreign background unless its spec says so)
    "no-background": "reported",
    # listing: names and files that cannot be read safely
    "unsafe-image-id": "skipped",
    "not-a-regular-file": "skipped",
    # an object store source: a name the one name check refuses, or a link, never copied
    "unsafe-name": "skipped",
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

# Validation (`hsi validate`): reason -> (action, meaning). "failed" fails the validation (exit 1);
# "not-detected" and "not-scored" leave an image out of the re-detection or score figures, reported.
VALIDATION_REASONS: dict[str, tuple[str, str]] = {
    # the manifest and its shard files
    "manifest": ("failed", "the manifest's filenames or shard_lengths disagree with its shard list"),
    "duplicate-shard": ("failed", "a shard is listed more than once in the manifest"),
    "unsafe-shard-name": ("failed", "a listed shard is not a plain file name inside the dataset folder"),
    "missing-shard": ("failed", "a listed shard is not a file on disk"),
    "shard-size": ("failed", "a shard's byte size differs from the manifest's"),
    "shard-sha256": ("failed", "a shard's sha256 differs from the manifest's"),
    "shard-count": ("failed", "a shard holds another number of samples than the manifest says"),
    "split-count": ("failed", "a split's shards hold another number of samples than the manifest says"),
    "count-mismatch": ("failed", "a split's per-group, size or tier count differs from the manifest's"),
    # reading a shard (`builder.core.shard_read.iter_shard`)
    "unreadable-shard": ("failed", "a shard is not a readable tar, or its stream breaks off"),
    "unsafe-member": ("failed", "a tar member is not a regular file with a safe key.ext name"),
    "oversized-member": ("failed", "a tar member is larger than any sample member can be"),
    "duplicate-member": ("failed", "a member name appears twice in a shard, or a sample's members are not together"),
    "deep-json": ("failed", "a json member nests deeper than any sample json does (64 levels)"),
    "oversized-array": ("failed", "an npy member's header declares more bytes than the member holds"),
    "duplicate-key": ("failed", "a sample key appears twice in the dataset"),
    # one sample
    "members": ("failed", "a sample does not have exactly the members of its format"),
    "json-decode": ("failed", "a sample's json member does not parse"),
    "schema": ("failed", "a sample's json does not fit the composite schema"),
    "decode": ("failed", "a parts sample's member does not decode"),
    "jpg-decode": ("failed", "a composite's jpg member does not decode"),
    "cls": ("failed", "a sample's cls member is not an integer or disagrees with its json label"),
    "split": ("failed", "a sample's json names another split than the shard's"),
    "label": ("failed", "a sample's label lies outside the manifest's class names"),
    "crop-size": ("failed", "a parts crop does not have the size of its object box"),
    "background-size": ("failed", "a parts background does not have the declared image size"),
    "fill-mask": ("failed", "a parts fill mask is not the image's size or misses pixels of its erase mask"),
    "fill-scores": ("failed", "a parts json's fill_scores is not null or four finite scores"),
    "fill-summary": ("failed", "a parts manifest's summary of fill scores disagrees with the scores in its shards"),
    # what a composite says it is against what it is
    "own-class-background": ("failed", "a random background comes from the object's own class"),
    "taxonomy": ("failed", "a composite's group or tier does not follow from its position, background and size"),
    "key": ("failed", "a composite's key does not follow from its source, position, size and background"),
    "background-source": ("failed", "a composite's background source does not fit its background kind"),
    "placement-position": ("failed", "the pasted box is not where the declared position puts it"),
    "placement-bounds": ("failed", "the pasted box does not lie in the canvas or fit the declared size"),
    "placement-parts": ("failed", "the object's parts, to compare the pasted pixels with, do not read"),
    "placement": ("failed", "the pixels in the pasted box are not the object's crop resized"),
    "background-parts": ("failed", "the declared background's parts, to compare with, do not read"),
    "background-pixels": ("failed", "the pixels around the pasted box are not the declared background"),
    # a generated sample of hsi scgs (builder.formats.augmented)
    "augment-json": ("failed", "a generated sample's augment.json does not parse"),
    "augment-schema": ("failed", "a generated sample's augment.json does not fit the augment schema"),
    # box re-detection and scores: images left out of a figure
    "image-not-found": ("not-detected", "a source image to re-detect is not under --source"),
    "image-size-unknown": ("not-scored", "an image of the boxes file has no readable size under --sizes-from"),
    "no-box-to-score": ("not-scored", "every box of an image was dropped, so the image has no score"),
}
REASONS.update({reason: action for reason, (action, _) in VALIDATION_REASONS.items()})
# Evaluation, probes and training: inputs a model-half command could not use (the run goes on).
REASONS.update(
    {
        "undecodable-sample": "skipped",  # a composite of an eval or train split
        "undecodable-clean-image": "skipped",  # an original photo of `hsi eval --clean`
        "undecodable-parts-sample": "skipped",  # a parts sample of `hsi eval --parts`
        "undecodable-image": "skipped",  # a probe's source photo
        "linked-stimulus": "skipped",  # a cue-conflict stimulus that is a link: never opened
    }
)


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
    """One row of `errors.jsonl` and of the validation report: what was wrong with which input,
    where it was found (split, shard, sample key) and what was done about it. `image_id` names the
    input: the source image, or, for a row about a sample, a shard or the manifest, that key or name."""

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

    def sample_row(self) -> dict:
        """The row of a sample the model half could not use, as its predictions and reports list it:
        the sample key, its shard when known, the reason and the detail."""
        row: dict = {"key": self.key}
        if self.shard is not None:
            row["shard"] = self.shard
        return {**row, "reason": self.reason, "detail": self.detail}

    @property
    def sort_key(self) -> tuple[str, str, str]:
        return (self.image_id, self.reason, self.detail)


def count_by_reason(issues) -> dict[str, int]:
    counts: dict[str, int] = {}
    for issue in issues:
        counts[issue.reason] = counts.get(issue.reason, 0) + 1
    return dict(sorted(counts.items()))
