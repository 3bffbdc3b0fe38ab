"""Shape bias on the cue-conflict stimuli of Geirhos et al. (ICLR 2019), as distributed by
model-vs-human (github.com/bethgelab/model-vs-human, CC BY 4.0): 1,280 PNGs in 16 class folders,
named `<shape><i>-<texture><j>.png`, the folder being the shape's category.

Each of the 16 categories is scored by the mean softmax probability of its ImageNet classes (the
mapping below, sorted-wnid indices, from model-vs-human's 16-class ImageNet), the decision is the
argmax of the 16 means, images whose shape equals their texture are dropped, and shape bias =
shape hits / (shape hits + texture hits).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.core.errors import printable
from builder.core.records import Issue

from .runner import ProbeInputError, probe_bar


def _span(first: int, last: int) -> list[int]:
    return list(range(first, last + 1))


CATEGORY_INDICES: dict[str, tuple[int, ...]] = {
    name: tuple(indices)
    for name, indices in {
        "airplane": [404],
        "bear": _span(294, 297),
        "bicycle": [444, 671],
        "bird": [
            8,
            *_span(10, 16),
            *_span(18, 20),
            *_span(22, 24),
            *_span(80, 83),
            *_span(87, 96),
            *_span(98, 100),
            *_span(127, 133),
            *_span(135, 145),
        ],
        "boat": [472, 554, 625, 814, 914],
        "bottle": [440, 720, 737, 898, 899, 901, 907],
        "car": [436, 511, 817],
        "cat": _span(281, 286),
        "chair": [423, 559, 765, 857],
        "clock": [409, 530, 892],
        "dog": [
            *_span(152, 191),
            *_span(193, 203),
            *_span(205, 226),
            *_span(228, 241),
            *_span(243, 250),
            *_span(252, 257),
            259,
            *_span(261, 263),
            *_span(265, 268),
        ],
        "elephant": [385, 386],
        "keyboard": [508, 878],
        "knife": [499],
        "oven": [766],
        "truck": [555, 569, 656, 675, 717, 734, 864, 867],
    }.items()
}
CATEGORIES = tuple(sorted(CATEGORY_INDICES))
EXPECTED_IMAGES = 1280
_NAME = re.compile(r"^([a-z]+)(\d+)-([a-z]+)(\d+)\.png$")


@dataclass(frozen=True)
class Stimulus:
    path: Path
    shape: str
    texture: str


def parse_stimulus_name(name: str) -> tuple[str, str] | None:
    """(shape, texture) of `<shape><i>-<texture><j>.png`, or None when the name does not fit."""
    match = _NAME.match(name)
    if not match or match.group(1) not in CATEGORY_INDICES or match.group(3) not in CATEGORY_INDICES:
        return None
    return match.group(1), match.group(3)


@dataclass
class StimulusFolder:
    """What a cue-conflict folder holds: its usable stimuli, what makes the folder unusable, and the
    entries left out with a reason (a link is never followed, so its stimulus is skipped)."""

    stimuli: list[Stimulus]
    problems: list[str]
    skipped: list[dict]


def _shown(name: str) -> str:
    return printable(name)


def scan_folder(folder: Path) -> StimulusFolder:
    """Every stimulus under `folder`, sorted, what is wrong with the folder, and the skipped links."""
    folder = Path(folder)
    if not folder.is_dir():
        return StimulusFolder([], [f"{_shown(str(folder))} is not a folder"], [])
    problems: list[str] = []
    stimuli: list[Stimulus] = []
    skipped: list[dict] = []
    entries = sorted(folder.iterdir())
    linked = {p.name for p in entries if p.is_symlink()}
    present = {p.name for p in entries if p.is_dir() and p.name not in linked}
    missing = sorted(set(CATEGORIES) - present - linked)
    if missing:
        problems.append(f"missing class folders: {', '.join(missing)}")
    for entry in entries:
        name = _shown(entry.name)
        if entry.name in linked and not entry.name.startswith("."):
            problems.append(f"{name} is a link; links are never followed: put the class folder itself there")
        elif entry.is_dir() and entry.name not in CATEGORY_INDICES:
            problems.append(f"unexpected folder {name}/ (not one of the 16 categories)")
        elif not entry.is_dir() and not entry.name.startswith("."):
            problems.append(f"unexpected file {name} beside the class folders")
    for category in CATEGORIES:
        if category not in present:
            continue
        for path in sorted((folder / category).iterdir()):
            if path.name.startswith("."):
                continue
            name = _shown(path.name)
            if path.is_symlink():  # never opened: a link may lead anywhere on the machine
                key = f"{category}/{name}"
                skipped.append(Issue(key, "linked-stimulus", "links are never followed", "probe", key=key).sample_row())
                continue
            parsed = parse_stimulus_name(path.name)
            if parsed is None or not path.is_file():
                problems.append(f"unexpected name {category}/{name} (expected <shape><i>-<texture><j>.png)")
            elif parsed[0] != category:
                problems.append(f"{category}/{name} names the shape {parsed[0]} but sits in {category}/")
            else:
                stimuli.append(Stimulus(path, *parsed))
        if not any(s.shape == category for s in stimuli):
            problems.append(f"class folder {category}/ holds no stimulus")
    return StimulusFolder(stimuli, problems, skipped)


def scan_stimuli(folder: Path) -> tuple[list[Stimulus], list[str]]:
    """Every stimulus under `folder`, sorted, and what is wrong with the folder (empty when nothing)."""
    scan = scan_folder(folder)
    return scan.stimuli, scan.problems


def open_folder(folder: Path) -> StimulusFolder:
    """The folder's stimuli and skipped entries, or one ProbeInputError line listing what is wrong."""
    scan = scan_folder(folder)
    if scan.problems:
        shown = scan.problems[:20] + ([f"... and {len(scan.problems) - 20} more"] if len(scan.problems) > 20 else [])
        raise ProbeInputError(
            f"cue-conflict folder {_shown(str(folder))} cannot be used (16 class folders of "
            "<shape><i>-<texture><j>.png expected): " + "; ".join(shown)
        )
    return scan


def load_stimuli(folder: Path) -> list[Stimulus]:
    """The stimuli, or a ProbeInputError listing everything that is wrong with the folder."""
    return open_folder(folder).stimuli


def read_stimulus(stimulus: Stimulus, preprocessing) -> np.ndarray:
    """One stimulus at the model's input (H x W x 3 uint8); a link or an unreadable file is an
    `ImageDecodeError` with its reason, which the caller records as a skipped stimulus."""
    from PIL import Image

    from builder.core.untrusted import UntrustedInput, regular_file
    from builder.extract.images import ImageDecodeError, decode_image
    from evaluation.predicting.data import prepare_image

    try:
        regular_file(stimulus.path, "stimulus")  # checked again at opening: the scan saw it a moment ago
    except UntrustedInput as exc:
        raise ImageDecodeError("link" if stimulus.path.is_symlink() else "not-a-file", str(exc)) from None
    return prepare_image(Image.fromarray(decode_image(stimulus.path).rgb), preprocessing)


def category_probabilities(probs: np.ndarray) -> np.ndarray:
    """N x 1000 ImageNet probabilities -> N x 16 mean probability per category (CATEGORIES order)."""
    probs = np.asarray(probs, dtype=np.float64)
    return np.stack([probs[:, list(CATEGORY_INDICES[c])].mean(axis=1) for c in CATEGORIES], axis=1)


def shape_bias(decisions: list[str], shapes: list[str], textures: list[str]) -> dict:
    """Shape and texture hits over the cue-conflict images (shape != texture) and the shape bias."""
    kept = [(d, s, t) for d, s, t in zip(decisions, shapes, textures) if s != t]
    shape_hits = sum(d == s for d, s, _ in kept)
    texture_hits = sum(d == t for d, _, t in kept)
    hits = shape_hits + texture_hits
    per_category = {}
    for category in CATEGORIES:
        mine = [(d, s, t) for d, s, t in kept if s == category]
        sh, th = sum(d == s for d, s, _ in mine), sum(d == t for d, _, t in mine)
        per_category[category] = {
            "images": len(mine),
            "shape_hits": sh,
            "texture_hits": th,
            "shape_bias": sh / (sh + th) if sh + th else None,
        }
    return {
        "images": len(decisions),
        "cue_conflict_images": len(kept),
        "dropped_same_cue": len(decisions) - len(kept),
        "shape_hits": shape_hits,
        "texture_hits": texture_hits,
        "neither": len(kept) - hits,
        "shape_bias": shape_hits / hits if hits else None,
        "shape_accuracy": shape_hits / len(kept) if kept else None,
        "texture_accuracy": texture_hits / len(kept) if kept else None,
        "per_category": per_category,
    }


def run_shape(
    model, folder: Path, preprocessing, batch_size: int = 64, bar: Callable[[int], Any] | None = None
) -> dict:
    """Shape bias of `model` (a ProbeModel) on the folder; `preprocessing` puts the stimuli at the
    model's input (the 224 PNGs as they are, at the probes' 224 input). A link or an unreadable
    stimulus is skipped and listed under `errors` (key, reason, detail), never a crash. `bar(total)`
    makes the progress bar over the stimuli (ProbeModel.bar), advanced per batch."""
    from builder.extract.images import ImageDecodeError

    scan = open_folder(folder)
    errors = list(scan.skipped)
    decisions: list[str] = []
    used: list[Stimulus] = []
    with bar(len(scan.stimuli)) if bar else probe_bar(len(scan.stimuli), "shape bias", False) as shown:
        for start in range(0, len(scan.stimuli), batch_size):
            batch = scan.stimuli[start : start + batch_size]
            arrays = []
            for stimulus in batch:
                try:
                    arrays.append(read_stimulus(stimulus, preprocessing))
                except ImageDecodeError as exc:
                    key = f"{stimulus.shape}/{_shown(stimulus.path.name)}"
                    errors.append(Issue(key, exc.reason, _shown(exc.detail), "probe", key=key).sample_row())
                    continue
                used.append(stimulus)
            if arrays:
                images = np.stack(arrays).transpose(0, 3, 1, 2).astype(np.float32) / 255.0
                scores = category_probabilities(model.probabilities(images))
                decisions += [CATEGORIES[i] for i in scores.argmax(axis=1)]
            shown.update(len(batch))
    if not used:
        first = f" (first: {errors[0]['key']}: {errors[0]['reason']})" if errors else ""
        raise ProbeInputError(f"cue-conflict folder {_shown(str(folder))}: no stimulus could be read{first}")
    result = shape_bias(decisions, [s.shape for s in used], [s.texture for s in used])
    result["notes"] = (
        []
        if len(used) == EXPECTED_IMAGES
        else [
            f"{len(used)} stimuli, not the {EXPECTED_IMAGES} of the published set: not comparable with published values"
        ]
    )
    if errors:  # only then: a complete folder's probes.json stays as it was
        result["errors"] = sorted(errors, key=lambda row: row["key"])
    return result
