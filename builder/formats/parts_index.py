"""The parts index: reading parts without holding them in memory (compose, validation).

`index_parts` reads only the small `json` member of every parts sample and records where each of
its other members lies in its tar (offset and size), so any image can later be read by a seek.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from PIL import Image

from builder.core.classes import class_of
from builder.core.config import ConfigError
from builder.core.manifest import MANIFEST_NAME
from builder.core.records import Issue
from builder.core.shard_read import (
    NPY_MAX_HEADER,
    ShardReadError,
    TarMember,
    json_member_problem,
    member_problem,
    npy_problem,
    tar_members,
)
from builder.formats.fill_scores import SCORE_NAMES, check_fill_scores
from builder.formats.parts import (
    BACKGROUND_NONE,
    background_status,
    decode_mask,
    decode_png_checked,
    object_window,
    stored_crop_box,
)

NEEDED_MEMBERS = ("crop.png", "mask.png", "background.png")
OPTIONAL_MEMBERS = ("canvas.npy",)  # the background pre-resized by extract (see builder.parts)


@dataclass(frozen=True)
class PartsRef:
    """Where one parts sample lives: its tar, and (offset, size) of each needed member."""

    key: str
    split: str
    class_index: int
    wnid: str
    shard: str
    members: tuple[tuple[str, int, int], ...]  # (member name, data offset, size), sorted
    row: int = -1  # position in its split's sorted listing: its row in the background cache
    # crop.png stored with a margin (extract --crop-margin): where the object box lies in it
    # (x0, y0, x1, y1, ends exclusive) and the crop's (width, height); None for a crop of the box
    object_window: tuple[int, int, int, int] | None = None
    crop_size: tuple[int, int] | None = None
    # its background's fill scores in SCORE_NAMES order (texture, seam, step, score; None when extract
    # scored nothing: nothing was filled); `fill_recorded` False for a part whose json has no
    # `fill_scores` (schema 1); `fill_problem` what is wrong with one that is not four finite scores
    fill_scores: tuple[float, ...] | None = None
    fill_recorded: bool = False
    fill_problem: str | None = None
    # False for a part with no background of its own (parts json `background_status` "none", #46)
    has_background: bool = True

    @property
    def fill_score(self) -> float | None:
        """The one-number fill score of its background (`score`), None when unscored."""
        return None if self.fill_scores is None else self.fill_scores[SCORE_NAMES.index("score")]

    def fill_scores_json(self) -> dict[str, float] | None:
        """Its fill scores as the parts json holds them (what `summarise_fill_scores` reads)."""
        return None if self.fill_scores is None else dict(zip(SCORE_NAMES, self.fill_scores, strict=True))

    def has(self, member: str) -> bool:
        return any(name == member for name, _, _ in self.members)

    def location(self, member: str) -> tuple[int, int]:
        for name, offset, size in self.members:
            if name == member:
                return offset, size
        raise KeyError(member)


def resolve_parts_dir(path: Path) -> Path:
    """Accept the parts folder itself or the extract output folder that holds `parts/`."""
    path = Path(path)
    if not (path / MANIFEST_NAME).is_file() and (path / "parts" / MANIFEST_NAME).is_file():
        return path / "parts"
    return path


def index_parts_shard(
    path: Path, split: str, members: Sequence[TarMember] | None = None
) -> tuple[list[PartsRef], list[Issue]]:
    """Read only the `json` members of one parts shard; note where the image members are.
    `members`: the shard's member list when the caller has it already (one header pass).
    A json nested too deep or a `canvas.npy` whose header declares more than it holds is refused
    (`ShardReadError`, naming shard and member); other problems of a sample are rows."""
    if members is None:
        members = tar_members(path, mode="r")
    found: dict[str, dict[str, tuple[int, int]]] = {}
    metas: dict[str, bytes] = {}
    issues = []
    with open(path, "rb", buffering=0) as handle:
        shard_bytes = os.fstat(handle.fileno()).st_size
        for info in members:
            key, _, ext = info.name.partition(".")
            problem = member_problem(info, shard_bytes)  # the rule iter_shard applies
            if problem:
                issues.append(
                    Issue(
                        key or info.name,
                        "unreadable-parts",
                        f"{path.name}: {problem}",
                        "compose",
                        split=split,
                        shard=path.name,
                        key=key or None,
                    )
                )
                continue
            if ext == "json":
                metas[key] = os.pread(handle.fileno(), info.size, info.offset_data) if info.isfile() else b""
                deep = json_member_problem(metas[key], info.name)
                if deep:  # refused, not a row: Python's parser would recurse past its limit
                    raise ShardReadError("deep-json", deep, path.name, key)
            elif ext in NEEDED_MEMBERS or ext in OPTIONAL_MEMBERS:
                found.setdefault(key, {})[ext] = (info.offset_data, info.size)
                if ext.endswith(".npy") and info.isfile():
                    # the header bounded here, before compose allocates what it declares
                    head = os.pread(handle.fileno(), min(info.size, NPY_MAX_HEADER + 12), info.offset_data)
                    bad_array = npy_problem(head, info.size, info.name)
                    if bad_array:
                        raise ShardReadError("oversized-array", bad_array, path.name, key)
    refs = []
    for key in sorted(set(found) | set(metas)):
        places = found.get(key, {})
        missing = [m for m in NEEDED_MEMBERS if m not in places] + ([] if key in metas else ["json"])
        if missing:
            issues.append(
                Issue(
                    key,
                    "unreadable-parts",
                    f"{path.name}: lacks members {missing}",
                    "compose",
                    split=split,
                    shard=path.name,
                    key=key,
                )
            )
            continue
        try:
            meta = json.loads(metas[key])
            wnid, class_index = meta["wnid"], int(meta["class_index"])
            if class_of(wnid).index != class_index:
                raise ValueError(f"class_index {class_index} does not match {wnid}")
            window = object_window(meta)
            fill_scores, fill_recorded, fill_problem = read_fill_scores(meta, f"{path.name}: {key}.json")
            has_background = background_status(meta) != BACKGROUND_NONE
            crop_size = None
            if window is not None:
                cx0, cy0, cx1, cy1 = stored_crop_box(meta)
                crop_size = (cx1 - cx0 + 1, cy1 - cy0 + 1)
        except (ValueError, KeyError, TypeError) as exc:
            issues.append(
                Issue(
                    key,
                    "unreadable-parts",
                    f"{path.name}: bad json member: {exc}",
                    "compose",
                    split=split,
                    shard=path.name,
                    key=key,
                )
            )
            continue
        located = tuple(sorted((name, offset, size) for name, (offset, size) in places.items()))
        refs.append(
            PartsRef(
                key,
                split,
                class_index,
                wnid,
                path.name,
                located,
                -1,
                window,
                crop_size,
                fill_scores,
                fill_recorded,
                fill_problem,
                has_background,
            )
        )
    return refs, issues


def read_fill_scores(meta: dict, where: str) -> tuple[tuple[float, ...] | None, bool, str | None]:
    """(scores, recorded, problem) of a parts json's `fill_scores`: the four scores in SCORE_NAMES
    order (None when null), whether the json has the key at all (schema 1 has not), and the one-line
    problem of a value that is not null or four finite, non-negative scores with `score` at most 1
    (the scores are then None)."""
    if "fill_scores" not in meta:
        return None, False, None
    try:
        scores = check_fill_scores(meta["fill_scores"], where)
    except ValueError as exc:
        return None, True, str(exc)
    if scores is None:
        return None, True, None
    if scores["score"] > 1:
        return None, True, f"{where}: fill_scores.score must lie in [0, 1], got {scores['score']!r:.40}"
    return tuple(scores[name] for name in SCORE_NAMES), True, None


def index_parts(
    parts_dir: Path, manifest: dict, splits: Sequence[str]
) -> tuple[dict[str, list[PartsRef]], list[Issue]]:
    missing = [s for s in splits if s not in manifest.get("splits", {})]
    if missing:
        raise ConfigError(
            f"parts in {parts_dir} have no split {missing}; they have {sorted(manifest.get('splits', {}))} "
            "(choose with --splits)"
        )
    index: dict[str, list[PartsRef]] = {}
    issues: list[Issue] = []
    for split in splits:
        refs: list[PartsRef] = []
        for filename in manifest["splits"][split]["filenames"]:
            shard_refs, shard_issues = index_parts_shard(Path(parts_dir) / filename, split)
            refs.extend(shard_refs)
            issues.extend(shard_issues)
        index[split] = [replace(ref, row=row) for row, ref in enumerate(sorted(refs, key=lambda ref: ref.key))]
    return index, issues


@dataclass
class MemberReader:
    """Reads parts members by offset, keeping each parts shard open once per output shard."""

    parts_dir: Path
    handles: dict[str, int] = field(default_factory=dict)  # shard name or file path -> descriptor

    def read(self, ref: PartsRef, member: str) -> bytes:
        offset, size = ref.location(member)
        fd = self.handles.get(ref.shard)
        if fd is None:
            fd = self.handles[ref.shard] = os.open(self.parts_dir / ref.shard, os.O_RDONLY)
        data = os.pread(fd, size, offset)  # one call, no buffered copy
        if len(data) != size:
            raise ValueError(f"{ref.shard}: member {ref.key}.{member} is truncated")
        return data

    def open_fd(self, path: Path) -> int:
        """A raw read-only descriptor of `path` (for pread), opened once and closed with the reader."""
        fd = self.handles.get(str(path))
        if fd is None:
            fd = self.handles[str(path)] = os.open(path, os.O_RDONLY)
        return fd

    def close(self) -> None:
        for fd in self.handles.values():
            os.close(fd)
        self.handles.clear()


def read_object_image(
    reader: MemberReader, ref: PartsRef, with_mask: bool = True, whole: bool = False
) -> tuple[Image.Image, np.ndarray | None]:
    """The object's crop as a decoded RGB image (compose resizes it as it is: converting it to an
    array and back for every size cost more than a resize) and, if asked, its mask (bool,
    crop-sized); ValueError when they do not fit together. The crop is the object box, out of a
    crop stored with a margin too; `whole`: the stored crop, margin included."""
    crop = decode_png_checked(reader.read(ref, "crop.png"))
    if crop.mode != "RGB":
        raise ValueError("crop.png is not RGB")
    mask = decode_mask(reader.read(ref, "mask.png")) if with_mask else None
    if mask is not None and mask.shape != (crop.height, crop.width):
        raise ValueError(f"mask.png is {mask.shape}, crop.png is {(crop.height, crop.width)}")
    if ref.object_window is None:
        return crop, mask
    if crop.size != ref.crop_size:
        raise ValueError(f"crop.png is {crop.width}x{crop.height}, its crop_box holds {ref.crop_size}")
    if whole:
        return crop, mask
    x0, y0, x1, y1 = ref.object_window
    return crop.crop(ref.object_window), (mask[y0:y1, x0:x1] if mask is not None else None)
