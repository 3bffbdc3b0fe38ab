"""How good the parts' inpainted backgrounds are: the distribution of their no-reference fill scores
per split, the manifest's summary checked against the scores in the shards, and the lowest-scoring
parts for `previews/worst_fills.png`.

Only the `json` members are read for the figures (by offset, as compose's index reads them); the
canvas and fill mask are read for the few parts the sheet shows. A `fill_scores` that is not null or
four finite scores is a `fill-scores` row (the check of `builder.formats.fill_scores`, which the
integrity check of a parts folder applies too), never a crash; such a part is counted as invalid,
not scored.
"""

from __future__ import annotations

import json
import math
import os
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from builder.core import markdown
from builder.core.manifest import MANIFEST_NAME, Manifest
from builder.core.records import Issue
from builder.core.shard_read import ShardReadError, json_member_problem, member_problem, tar_members
from builder.formats.fill_scores import (
    POOR_SCORE,
    SCORE_NAMES,
    SEAM_HIGH,
    TEXTURE_LOW,
    canvas_mask,
    check_fill_scores,
    summarise_fill_scores,
)
from builder.formats.parts import BACKGROUND_OWN, background_status, decode_canvas, decode_mask
from validation.integrity.results import DECODE_ERRORS, failure

WORST_COUNT = 12  # parts on the worst-fills sheet
WORST_FILLS = "worst_fills.png"
SUMMARY_TOLERANCE = 1e-4  # the manifest's figures are rounded to 4 places; a tampered one differs by more
# (name in the report, score, comparison, threshold): the shares of poor fills the report counts
SHARES = (
    ("texture_low", "texture", "<", TEXTURE_LOW),
    ("seam_high", "seam", ">", SEAM_HIGH),
    ("poor_score", "score", "<", POOR_SCORE),
)
SCORE_FORMULA = "score = min(1, texture) x min(1, 1/seam) / (1 + step)"
# the bins of the paper's size score (mean box area over photo area) the fills are reported by: large
# objects leave little of the photo to fill from (ImageNet val's mean size score is 0.418)
SIZE_BINS = (0.1, 0.25, 0.5, 0.75)
NO_SCORES_NOTE = f"no part has fill scores (nothing was filled, or parts of schema 1): no {WORST_FILLS}"
_PIXEL_MEMBERS = ("canvas.npy", "fill.png", "erase.png")


def is_poor(name: str, value: float) -> bool:
    """Whether `value` of the score `name` is past its threshold (texture low, seam high, score poor)."""
    for _, score, op, threshold in SHARES:
        if score == name:
            return value < threshold if op == "<" else value > threshold
    return False


@dataclass(frozen=True)
class ScoredPart:
    """One part with valid fill scores, and where its canvas and fill mask lie in its shard."""

    split: str
    key: str
    class_name: str
    scores: dict[str, float]
    shard: str
    locations: tuple[tuple[str, int, int], ...]  # (member, data offset, size) of the pixel members
    has_background: bool = True  # False: `background_status` "none", a fill made from nothing (#46)

    @property
    def rank(self) -> tuple[float, str, str]:
        return (self.scores["score"], self.key, self.split)  # worst first, ties by source id

    def to_json(self) -> dict:
        return {
            "split": self.split,
            "key": self.key,
            "class_name": self.class_name,
            **{name: self.scores[name] for name in SCORE_NAMES},
            "no_background": not self.has_background,
        }


@dataclass
class FillQuality:
    parts_folder: str
    splits: dict[str, dict] = field(default_factory=dict)  # per split: counts, quantiles, shares
    manifest: dict[str, dict] = field(default_factory=dict)  # per split: does its summary agree
    worst: list[ScoredPart] = field(default_factory=list)
    candidates: int = 0  # scored parts the worst were drawn from
    restricted: bool = False  # candidates only of the dataset's own source images
    rows: list[Issue] = field(default_factory=list)  # parts whose fill_scores or json are bad
    mismatches: list[Issue] = field(default_factory=list)  # `fill-summary`: the manifest disagrees
    sheet: str | None = None  # previews/worst_fills.png once drawn

    @property
    def note(self) -> str | None:
        return NO_SCORES_NOTE if not self.worst else None

    def to_json(self) -> dict:
        return {
            "parts_folder": self.parts_folder,
            "thresholds": {"texture_low": TEXTURE_LOW, "seam_high": SEAM_HIGH, "poor_score": POOR_SCORE},
            "splits": self.splits,
            "manifest_summary": self.manifest,
            "worst": [part.to_json() for part in self.worst],
            "worst_from": {"scored": self.candidates, "own_sources_only": self.restricted},
            "sheet": self.sheet,
            "note": self.note,
        }


def size_score(meta: Mapping) -> float | None:
    """The paper's size score of a part's photo (validation.scores: the mean over its boxes of the
    box's area over the photo's, raw VOC corners), or None when its json does not give one."""
    try:
        width, height = float(meta["width"]), float(meta["height"])
        areas = [(float(b["x1"]) - float(b["x0"])) * (float(b["y1"]) - float(b["y0"])) for b in meta["boxes"]]
    except (KeyError, TypeError, ValueError):
        return None
    if not areas or not (width > 0 and height > 0) or not all(math.isfinite(a) for a in areas):
        return None
    return sum(areas) / len(areas) / (width * height)


def size_bin(score: float | None) -> str:
    """The name of the size-score bin `score` falls in (`unknown` without one)."""
    if score is None:
        return "unknown"
    edges = (0.0, *SIZE_BINS)
    for low, high in zip(edges, (*SIZE_BINS, None)):
        if high is None or score < high:
            return f"{low:.2f}-{high:.2f}" if high is not None else f"{low:.2f}+"
    raise AssertionError("unreachable")


@dataclass
class SizeBin:
    """The fills of the parts whose photos fall in one size-score bin."""

    parts: int = 0
    fallbacks: int = 0  # filled by another inpainter than the one asked for (`inpaint_fallback`)
    no_background: int = 0
    scores: list[float] = field(default_factory=list)

    def to_json(self, name: str) -> dict:
        scored = len(self.scores)
        return {
            "bin": name,
            "parts": self.parts,
            "fallbacks": self.fallbacks,
            "fallback_share": round(self.fallbacks / self.parts, 4),
            "no_background": self.no_background,
            "scored": scored,
            "score_median": round(float(np.median(self.scores)), 4) if scored else None,
            "share_poor_score": round(sum(v < POOR_SCORE for v in self.scores) / scored, 4) if scored else None,
        }


def bin_order(name: str) -> tuple[float, str]:
    return (float("inf"), name) if name == "unknown" else (float(name.split("-")[0].rstrip("+")), name)


def _split_figures(scored: list[dict[str, float]], unscored: int, invalid: int, no_background: int) -> dict:
    """The summary the manifest records (the same function extract uses) with the shares past each
    threshold, the count of parts whose scores are invalid and of parts with no background of their
    own."""
    summary = summarise_fill_scores([*scored, *([None] * unscored)])
    figures: dict = {
        "parts": len(scored) + unscored + invalid,
        "scored": len(scored),
        "unscored": unscored,
        "invalid": invalid,
        "no_background": no_background,
    }
    for name in SCORE_NAMES:
        figures[name] = summary[name]
    for share, name, _, _ in SHARES:
        hits = sum(is_poor(name, row[name]) for row in scored)
        figures[f"share_{share}"] = round(hits / len(scored), 4) if scored else None
    figures["recomputed_summary"] = summary
    return figures


def _differences(recorded: Mapping, computed: Mapping, prefix: str = "") -> list[str]:
    """The fields in which the manifest's summary differs from the one recomputed from the shards."""
    found = []
    for name in sorted(set(recorded) | set(computed)):
        a, b, where = recorded.get(name), computed.get(name), f"{prefix}{name}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            found += _differences(a, b, f"{where}.")
        elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            if not math.isclose(float(a), float(b), rel_tol=0, abs_tol=SUMMARY_TOLERANCE):
                found.append(f"{where}: manifest {a}, shards {b}")
        elif a != b:
            found.append(f"{where}: manifest {a}, shards {b}")
    return found


def _shard_parts(path: Path, split: str, rows: list[Issue]):
    """(key, meta or None, pixel member locations) of every sample of one parts shard, from its
    json members; a member that may not be read or a json that does not parse is a row."""
    try:
        members = tar_members(path)
    except (tarfile.TarError, OSError, EOFError) as exc:
        rows.append(failure("unreadable-shard", f"not a readable tar: {exc}", split, path.name))
        return
    except ShardReadError as exc:  # a member name present twice
        rows.append(failure(exc.reason, exc.detail, split, path.name, exc.key))
        return
    metas: dict[str, bytes] = {}
    places: dict[str, list[tuple[str, int, int]]] = {}
    with open(path, "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        for info in members:
            key, _, ext = info.name.partition(".")
            if not info.isfile() or member_problem(info, size):
                continue  # integrity names it; the fill figures skip it
            if ext == "json":
                metas[key] = os.pread(handle.fileno(), info.size, info.offset_data)
            elif ext in _PIXEL_MEMBERS:
                places.setdefault(key, []).append((ext, info.offset_data, info.size))
    for key in sorted(metas):
        deep = json_member_problem(metas[key], f"{key}.json")
        if deep:
            rows.append(failure("deep-json", deep, split, path.name, key))
            continue
        try:
            meta = json.loads(metas[key])
        except ValueError as exc:
            rows.append(failure("json-decode", f"json member does not parse: {exc}", split, path.name, key))
            continue
        if not isinstance(meta, dict):
            rows.append(
                failure("fill-scores", f"json is a {type(meta).__name__}, not an object", split, path.name, key)
            )
            continue
        yield key, meta, tuple(sorted(places.get(key, ())))


def measure_fill_quality(parts_dir: Path, only: set[str] | None = None, count: int = WORST_COUNT) -> FillQuality:
    """Every split's fill-score figures, the manifest's summaries checked against them, and the
    `count` lowest-scoring parts (of the source ids in `only`, when given)."""
    parts_dir = Path(parts_dir)
    manifest = Manifest.read(parts_dir)
    quality = FillQuality(parts_folder=parts_dir.name, restricted=only is not None)
    worst: list[ScoredPart] = []
    for split in sorted(manifest.splits):
        scored: list[dict[str, float]] = []
        unscored = invalid = no_background = fallbacks = 0
        bins: dict[str, SizeBin] = {}
        for filename in manifest.splits[split].filenames:
            found: list[ScoredPart] = []
            for key, meta, locations in _shard_parts(parts_dir / filename, split, quality.rows):
                try:
                    own = background_status(meta) == BACKGROUND_OWN
                    scores = check_fill_scores(meta.get("fill_scores"), "json")
                except ValueError as exc:
                    quality.rows.append(failure("fill-scores", str(exc), split, filename, key))
                    invalid += 1
                    continue
                no_background += not own
                provenance = meta.get("provenance")
                fell_back = isinstance(provenance, dict) and provenance.get("inpaint_fallback") is not None
                fallbacks += fell_back
                size = bins.setdefault(size_bin(size_score(meta)), SizeBin())
                size.parts += 1
                size.fallbacks += fell_back
                size.no_background += not own
                if scores is not None:
                    size.scores.append(scores["score"])
                if scores is None:
                    unscored += 1
                    continue
                scored.append(scores)
                if only is None or key in only:
                    name = meta.get("class_name")
                    name = name if isinstance(name, str) else str(meta.get("wnid", ""))
                    found.append(ScoredPart(split, key, name, scores, filename, locations, own))
            quality.candidates += len(found)
            worst = sorted([*worst, *found], key=lambda part: part.rank)[:count]
        figures = _split_figures(scored, unscored, invalid, no_background)
        figures["fallbacks"] = fallbacks
        figures["fallback_share"] = round(fallbacks / figures["parts"], 4) if figures["parts"] else None
        figures["by_size_score"] = [bins[name].to_json(name) for name in sorted(bins, key=bin_order)]
        recomputed = figures.pop("recomputed_summary")
        quality.splits[split] = figures
        recorded = manifest.splits[split].fill_scores
        if recorded is None:
            quality.manifest[split] = {"recorded": False, "agrees": None, "differences": []}
            continue
        differences = _differences(recorded, recomputed)
        quality.manifest[split] = {"recorded": True, "agrees": not differences, "differences": differences}
        if differences:
            shown = "; ".join(differences[:4]) + (f"; and {len(differences) - 4} more" if len(differences) > 4 else "")
            quality.mismatches.append(
                failure(
                    "fill-summary",
                    f"the parts {MANIFEST_NAME} summary of fill scores disagrees with the shards' scores: {shown}",
                    split,
                )
            )
    quality.worst = worst
    return quality


def _read(handle_of, parts_dir: Path, part: ScoredPart, member: str) -> bytes | None:
    for name, offset, size in part.locations:
        if name == member:
            data = os.pread(handle_of(parts_dir / part.shard), size, offset)
            return data if len(data) == size else None
    return None


def worst_pixels(
    parts_dir: Path, quality: FillQuality
) -> list[tuple[ScoredPart, np.ndarray | None, np.ndarray | None]]:
    """(part, its 224 canvas or None, its fill mask at canvas scale or None) of each worst part:
    the fill mask is fill.png (erase.png for parts of schema 1); what does not read is None."""
    handles: dict[Path, int] = {}

    def handle_of(path: Path) -> int:
        if path not in handles:
            handles[path] = os.open(path, os.O_RDONLY)
        return handles[path]

    shown = []
    try:
        for part in quality.worst:
            canvas = mask = None
            try:
                data = _read(handle_of, parts_dir, part, "canvas.npy")
                canvas = decode_canvas(data) if data is not None else None
            except (*DECODE_ERRORS, EOFError):
                canvas = None
            try:
                data = _read(handle_of, parts_dir, part, "fill.png") or _read(handle_of, parts_dir, part, "erase.png")
                if data is not None and canvas is not None:
                    mask = canvas_mask(decode_mask(data), canvas.shape[0])
            except DECODE_ERRORS:
                mask = None
            shown.append((part, canvas, mask))
    finally:
        for fd in handles.values():
            os.close(fd)
    return shown


def _range(quantiles: dict | None) -> str:
    if not quantiles:
        return "n/a"
    return f"{quantiles['median']:.3f} [{quantiles['p10']:.3f}, {quantiles['p90']:.3f}]"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _manifest_word(entry: dict) -> str:
    if not entry.get("recorded"):
        return "not recorded"
    return "agrees" if entry.get("agrees") else "DISAGREES"


def summary_lines(fill: dict) -> list[str]:
    """The lines `hsi validate` prints: per split the counts, median [p10, p90] of each score, the
    shares past the thresholds and whether the manifest agrees; then the worst fills."""
    lines = []
    for split, figures in fill["splits"].items():
        scores = "; ".join(f"{name} {_range(figures[name])}" for name in SCORE_NAMES)
        shares = ", ".join(
            f"{score} {op} {threshold}: {_share(figures[f'share_{share}'])}" for share, score, op, threshold in SHARES
        )
        invalid = f", {figures['invalid']} invalid" if figures["invalid"] else ""
        if figures.get("no_background"):
            invalid += f", {figures['no_background']} with no background of their own"
        fallbacks = ""
        if figures.get("fallback_share") is not None:
            fallbacks = f"; {figures['fallbacks']} filled by a fallback inpainter ({_share(figures['fallback_share'])})"
        lines.append(
            f"fill scores ({split}): {figures['scored']} scored, {figures['unscored']} unscored{invalid}; "
            f"median [p10, p90]: {scores}; {shares}; manifest summary "
            f"{_manifest_word(fill['manifest_summary'].get(split, {}))}{fallbacks}"
        )
    for split, figures in fill["splits"].items():
        bins = "; ".join(
            f"{b['bin']}: {b['parts']} parts, fallback {_share(b['fallback_share'])}, "
            f"median score {_fmt(b['score_median'])}"
            for b in figures.get("by_size_score", [])
        )
        if bins:
            lines.append(f"fill by size score ({split}): {bins}")
    if fill["worst"]:
        names = ", ".join(f"{part['key']} ({part['score']:.3f})" for part in fill["worst"][:3])
        where = fill["sheet"] or "not drawn"
        lines.append(f"worst fills: {where}: {len(fill['worst'])} parts, worst first: {names}, ...")
    elif fill["note"]:
        lines.append(f"worst fills: {fill['note']}")
    return lines


def markdown_section(fill: dict) -> list[str]:
    """The report's section: what the scores mean, a table of the counts and shares per split, the
    median and 10th/90th percentiles per score, and the worst parts."""
    thresholds = fill["thresholds"]
    lines = [
        "",
        "## Fill quality of the backgrounds",
        "",
        f"No-reference scores of each part's inpainted background on the 224 px canvas "
        f"(parts folder {markdown.code(fill['parts_folder'])}), the filled pixels against a ring of the "
        "photo just outside them: texture is the fill's detail over the ring's (mean |Laplacian|; near 0 "
        "for a flat slab, about 1 when as busy as the ground), seam the edge strength on the fill's "
        "border over the ring's (about 1 when invisible, above when an edge runs around it), step the "
        "colour jump across the border over the ring's colour spread (0 when the colours meet); "
        f"{SCORE_FORMULA}, in [0, 1], higher is better. Poor: texture < {thresholds['texture_low']}, "
        f"seam > {thresholds['seam_high']}, score < {thresholds['poor_score']}. A part with no background of "
        "its own had its whole photo erased: its background is a fill made from nothing (compose uses it as "
        "no other image's background unless its spec says so).",
        "",
    ]
    header = [
        "split",
        "parts",
        "scored",
        "unscored",
        "invalid",
        "no background",
        "fallbacks",
        f"texture < {thresholds['texture_low']}",
        f"seam > {thresholds['seam_high']}",
        f"score < {thresholds['poor_score']}",
        "manifest summary",
    ]
    rows = []
    for split, figures in fill["splits"].items():
        rows.append(
            [
                split,
                figures["parts"],
                figures["scored"],
                figures["unscored"],
                figures["invalid"],
                figures.get("no_background", 0),
                f"{figures.get('fallbacks', 0)} ({_share(figures.get('fallback_share'))})",
                *(_share(figures[f"share_{share}"]) for share, _, _, _ in SHARES),
                _manifest_word(fill["manifest_summary"].get(split, {})),
            ]
        )
    lines += markdown.table_lines(header, rows)
    lines += ["", "Median and 10th / 90th percentile of each score:", ""]
    quantile_rows = []
    for split, figures in fill["splits"].items():
        for name in SCORE_NAMES:
            q = figures[name] or {}
            quantile_rows.append([split, name, *(_fmt(q.get(k)) for k in ("median", "p10", "p90"))])
    lines += markdown.table_lines(["split", "score", "median", "p10", "p90"], quantile_rows)
    size_rows = [
        [
            split,
            b["bin"],
            b["parts"],
            f"{b['fallbacks']} ({_share(b['fallback_share'])})",
            b["no_background"],
            _fmt(b["score_median"]),
            _share(b["share_poor_score"]),
        ]
        for split, figures in fill["splits"].items()
        for b in figures.get("by_size_score", [])
    ]
    if size_rows:
        lines += [
            "",
            "By the paper's size score of each part's photo (mean box area over photo area): large objects "
            "leave little of the photo to fill from. Fallbacks: parts filled by another inpainter than the one "
            "asked for (PatchMatch's Telea fallback, `inpaint-fallback`).",
            "",
        ]
        header = ["split", "size score", "parts", "fallbacks", "no background", "median score"]
        lines += markdown.table_lines([*header, f"score < {thresholds['poor_score']}"], size_rows)
    for split, entry in fill["manifest_summary"].items():
        if entry.get("differences"):
            lines += [
                "",
                f"The manifest's summary of split {markdown.inline(split)} disagrees with the shards:",
                "",
            ]
            lines += [f"- {markdown.inline(text)}" for text in entry["differences"]]
    if fill["worst"]:
        among = fill["worst_from"]
        own = " of the dataset's own source images" if among["own_sources_only"] else ""
        drawn = f" (`{fill['sheet']}`)" if fill["sheet"] else ""
        lines += [
            "",
            f"The {len(fill['worst'])} lowest-scoring of {among['scored']} scored parts{own}, worst first{drawn}:",
            "",
        ]
        lines += markdown.table_lines(
            ["rank", "split", "source id", "class", *SCORE_NAMES],
            (
                [
                    n,
                    part["split"],
                    markdown.code(part["key"]),
                    part["class_name"] + (" (no background)" if part.get("no_background") else ""),
                    *(f"{part[name]:.3f}" for name in SCORE_NAMES),
                ]
                for n, part in enumerate(fill["worst"], 1)
            ),
        )
    elif fill["note"]:
        lines += ["", fill["note"][0].upper() + fill["note"][1:] + "."]
    return lines


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"
