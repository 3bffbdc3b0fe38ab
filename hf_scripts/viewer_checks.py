"""What the Hub's dataset viewer needs of a WebDataset config, checked on the shards `hsi verify`
hashed (a release folder's own files, or the revision's downloads).

What the viewer does with `.tar` data files (it runs `datasets`' WebDataset builder):

- a member name is split at its **first dot**: key before it, extension (column) after it
  (`datasets.packaged_modules.webdataset` calls webdataset's `base_plus_ext`, whose pattern is
  `^((?:.*/|)[^.]+)[.]([^/]*)$`), so `a.b.jpg` is sample `a` with a column `b.jpg`;
- without declared features it infers them from the **first 5 samples of the first shard**
  (`NUM_EXAMPLES_FOR_FEATURES_INFERENCE = 5` in datasets 5.2.0), and it refuses a split whose
  samples do not share the same extensions ("the files in the archive don't share the same prefix or
  the same types"; huggingface/datasets#7055 asks for that check to be relaxed; it stands);
- for data in formats other than Parquet it shows, filters and searches only the **first 5 GB**
  (huggingface/hub-docs#1174, docs/hub/datasets-viewer.md: "For datasets >5GB in other formats (e.g.
  WebDataset or JSON Lines): the Dataset Viewer only shows the first 5GB"), read in shard order.

So, for each config (`viewer_problems`): every sample has the same set of extensions as the config's
first sample; no key has a dot (a member's key is its name less one of the schema's member names,
which may hold dots themselves, `crop.png`); every sample's features (its extensions, its `json`'s
field names and the JSON type of each field's value) are those of the first 5 samples, a `null`
agreeing with any type (the schema writes nulls rather than leaving keys out, and the card declares
each field's type) and an integer with a float; and, for composites, the samples within the first
`VIEWER_BUDGET_BYTES` of each split (its shards in the manifest's order, counted by the manifest's
bytes, a sample counted when its last member ends inside the budget) hold every group and size the
split holds, read from each sample's `json`, so the viewer does not show only the first classes.

Each failure is one line (its count and the first few samples that show it).
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.errors import printable, shown
from builder.core.manifest import COMPOSITES, MANIFEST_NAME, PARTS, Manifest
from builder.core.shard_read import MAX_MEMBER_BYTES, content_problem, nests_deeper
from builder.formats.composites import COMPOSITE_MEMBERS
from builder.formats.parts import PARTS_MEMBERS, PARTS_MEMBERS_V1

VIEWER_BUDGET_BYTES = 5_000_000_000  # the viewer's first 5 GB of a non-Parquet split (tests lower it)
FEATURE_SAMPLES = 5  # datasets' NUM_EXAMPLES_FOR_FEATURES_INFERENCE
EXAMPLES_SHOWN = 3  # samples named in each line
JSON_LIMIT = 1 << 20  # a sample's json larger than this is not read (our schema's are a few KB)


def first_dot_split(name: str) -> tuple[str, str] | None:
    """(key, extension) as the viewer reads a member name: split at the first dot of its last path
    component; None for a name without one (the viewer skips it)."""
    directory, _, base = name.rpartition("/")
    if "." not in base:
        return None
    key, _, extension = base.partition(".")
    return (f"{directory}/{key}" if directory else key), extension


def schema_key(name: str, members: Sequence[str]) -> str | None:
    """The key a member name has under our schema (its name less the longest member name it ends
    with, `.crop.png` before `.png`), None when it ends with none of them."""
    for member in sorted(members, key=len, reverse=True):
        if name.endswith("." + member) and len(name) > len(member) + 1:
            return name[: -len(member) - 1]
    return None


def json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


@dataclass
class ViewedSample:
    """One sample as the viewer groups it: its key (to the first dot), the shard it is in, its
    extensions, its json's {field: kind} (None when it has no json that reads as an object), its
    group and size, and the offset in the split (shard bytes before it + its last member's end)."""

    shard: str
    key: str
    extensions: set[str] = field(default_factory=set)
    json_kinds: dict[str, str] | None = None
    group: object = None
    size: object = None
    end: int = 0

    @property
    def label(self) -> str:
        return f"{self.shard}:{printable(self.key)}"


class Findings:
    """Failures by kind, each with its count and the first samples that show it: one line each."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {}
        self.order: list[str] = []

    def add(self, kind: str, example: str) -> None:
        if kind not in self.counts:
            self.counts[kind], self.examples[kind] = 0, []
            self.order.append(kind)
        self.counts[kind] += 1
        if len(self.examples[kind]) < EXAMPLES_SHOWN:
            self.examples[kind].append(example)

    def lines(self) -> list[str]:
        out = []
        for kind in self.order:
            count, shown = self.counts[kind], self.examples[kind]
            more = f" and {count - len(shown)} more" if count > len(shown) else ""
            out.append(f"{kind} ({count}: {'; '.join(shown)}{more})")
        return out


def schema_members(manifest: Manifest) -> tuple[str, ...]:
    if manifest.holds == PARTS:
        return tuple(sorted(set(PARTS_MEMBERS) | set(PARTS_MEMBERS_V1)))
    return COMPOSITE_MEMBERS


def read_json_member(tar: tarfile.TarFile, info: tarfile.TarInfo) -> dict | None:
    handle = tar.extractfile(info)
    if handle is None or info.size > JSON_LIMIT:
        return None
    data = handle.read()
    if nests_deeper(data):  # the reader's findings name it; parsing it would recurse past Python's limit
        return None
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def refused_member(tar: tarfile.TarFile, info: tarfile.TarInfo, seen: set[str]) -> str | None:
    """What the one shard reader (builder.core.shard_read) refuses in a member before `load_dataset`
    reads it (its webdataset builder dies in a traceback on a name present twice, and numpy
    allocates whatever an npy header declares): a duplicate name, a json nested too deep, an npy
    whose header declares more than it holds. None for a member it reads."""
    if info.name in seen:
        return "appears twice"
    seen.add(info.name)
    if not info.name.endswith(("json", ".npy")) or info.size > MAX_MEMBER_BYTES:
        return None
    handle = tar.extractfile(info)
    found = content_problem(info.name, handle.read()) if handle is not None else None
    return found[1].removeprefix(f"member {shown(info.name)} ").split(";")[0] if found else None


def viewed_samples(
    path: Path, shard: str, start: int, members: Sequence[str], findings: Findings, where: str
) -> Iterator[ViewedSample]:
    """The samples of one shard as the viewer groups them (consecutive members with the same key
    up to the first dot), reporting into `findings` each member whose key holds a dot, each name
    without an extension and a shard that does not read as a tar."""
    current: ViewedSample | None = None
    seen: set[str] = set()
    try:
        with tarfile.open(path, mode="r:") as tar:
            for info in tar:
                name = info.name
                if not info.isfile():
                    findings.add(f"{where}: members that are not regular files", f"{shard}:{printable(name)}")
                    continue
                refused = refused_member(tar, info, seen)
                if refused:  # named, and its json left unparsed; its extension still counts for the sample
                    findings.add(
                        f"{where}: members the shard reader refuses (the release was not written by this toolkit)",
                        f"{shard}:{printable(name)} {refused}",
                    )
                split = first_dot_split(name)
                if split is None:
                    findings.add(
                        f"{where}: members without an extension (the viewer skips them)", f"{shard}:{printable(name)}"
                    )
                    continue
                ours = schema_key(name, members)
                if ours is not None and "." in ours.rpartition("/")[2]:
                    findings.add(
                        f"{where}: keys hold a dot (the viewer splits a name at its first dot, so the sample's "
                        "members become other columns of another key)",
                        f"{shard}:{printable(name)}",
                    )
                key, extension = split
                if current is None or current.key != key:
                    if current is not None:
                        yield current
                    current = ViewedSample(shard=shard, key=key)
                current.extensions.add(extension)
                current.end = start + info.offset_data + info.size
                if extension == "json" and not refused:
                    meta = read_json_member(tar, info)
                    if meta is not None:
                        current.json_kinds = {str(k): json_kind(v) for k, v in meta.items()}
                        current.group, current.size = meta.get("group"), meta.get("size")
    except (tarfile.TarError, EOFError, OSError) as exc:
        findings.add(f"{where}: shards that do not read as tar archives", f"{shard} ({printable(str(exc))[:120]})")
    if current is not None:
        yield current


def kinds_agree(kind: str, seen: set[str]) -> bool:
    """A field's kind agrees with the kinds of the first samples: null agrees with anything (and
    anything with a field only null so far), an integer with a float."""
    non_null = seen - {"null"}
    return kind == "null" or not non_null or kind in non_null or (kind == "int" and "float" in non_null)


def feature_difference(sample: ViewedSample, extensions: set[str], fields: dict[str, set[str]] | None) -> str | None:
    """How `sample`'s features differ from the first samples' (their extensions, json fields and
    kinds), or None when they agree."""
    if sample.extensions != extensions:
        return None  # the extensions line names it
    if fields is None or sample.json_kinds is None:
        return None if (fields is None) == (sample.json_kinds is None) else "json does not read as an object"
    missing, extra = sorted(set(fields) - set(sample.json_kinds)), sorted(set(sample.json_kinds) - set(fields))
    if missing or extra:
        return f"json fields {'lacks ' + ','.join(map(printable, missing)) if missing else ''}" + (
            f"{' and ' if missing else ''}adds {','.join(map(printable, extra))}" if extra else ""
        )
    for name, kind in sorted(sample.json_kinds.items()):
        if not kinds_agree(kind, fields[name]):
            return f"json {printable(name)} is {kind}, the first samples' is {'/'.join(sorted(fields[name]))}"
    return None


def sorted_values(values: Iterable[str]) -> list[str]:
    """Numbers in numeric order (sizes: 56, 84, 112), then the rest."""
    return sorted((printable(v) for v in values), key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0, v))


class FirstSamples:
    """The samples the viewer infers features from (the first `FEATURE_SAMPLES` of the config's first
    shard) and, once complete, the {json field: kinds} every later sample is compared with."""

    def __init__(self) -> None:
        self.samples: list[ViewedSample] = []
        self.shard: tuple[str, str] | None = None  # (split, shard filename)
        self.complete = False
        self.fields: dict[str, set[str]] | None = None

    def offer(self, split: str, sample: ViewedSample) -> bool:
        """Take `sample` if it is one of the first samples; False once they are complete."""
        if self.shard is None:
            self.shard = (split, sample.shard)
        if not self.complete and self.shard == (split, sample.shard) and len(self.samples) < FEATURE_SAMPLES:
            self.samples.append(sample)
            return True
        self.finish()
        return False

    def finish(self) -> None:
        if not self.complete:
            self.complete = True
            self.fields = first_fields(self.samples)


def viewer_problems(config: str, manifest: Manifest, shards: Mapping[str, Path]) -> tuple[list[str], list[str]]:
    """(lines for what the Hub's viewer, and `load_dataset`, would misread or refuse; lines for what
    the viewer would show only in part) of `config`, whose shards ({shard filename: local path}; a
    shard missing from it is left out, its bytes still counted) have already been listed and hashed.
    One pass over the shards; only the first samples are held. A config with lines of the first kind
    is not streamed by `hsi verify`."""
    members = schema_members(manifest)
    findings = Findings()
    first = FirstSamples()
    first_extensions: set[str] | None = None
    differs = f"{config}: samples whose features differ from those the viewer infers from its first samples"
    problems: list[str] = []
    for split, entry in sorted(manifest.splits.items()):
        where = f"{config}/{split}"
        in_budget: dict[str, set[str]] = {"group": set(), "size": set()}
        everywhere: dict[str, set[str]] = {"group": set(), "size": set()}
        start = 0
        for shard in entry.shards:
            path = shards.get(shard.filename)
            for sample in viewed_samples(path, shard.filename, start, members, findings, where) if path else ():
                if first_extensions is None:
                    first_extensions = set(sample.extensions)
                if sample.extensions != first_extensions:
                    findings.add(
                        f"{config}: samples whose extensions differ from the first sample's "
                        f"{{{', '.join(sorted(map(printable, first_extensions)))}}} (the viewer refuses such archives)",
                        f"{sample.label} {{{', '.join(sorted(map(printable, sample.extensions)))}}}",
                    )
                if not first.offer(split, sample):
                    difference = feature_difference(sample, first_extensions or set(), first.fields)
                    if difference is not None:
                        findings.add(differs, f"{sample.label}: {difference}")
                if manifest.holds == COMPOSITES:
                    for kind in ("group", "size"):
                        value = getattr(sample, kind)
                        if value is not None:
                            everywhere[kind].add(str(value))
                            if sample.end <= VIEWER_BUDGET_BYTES:
                                in_budget[kind].add(str(value))
            start += shard.bytes
        for kind in ("group", "size"):
            missing = everywhere[kind] - in_budget[kind]
            if missing:
                problems.append(
                    f"{where}: the viewer shows only the first {VIEWER_BUDGET_BYTES:,} bytes of a split "
                    f"(its shards in order); they hold {kind}s {', '.join(sorted_values(in_budget[kind])) or 'none'} "
                    f"of {', '.join(sorted_values(everywhere[kind]))}, not {', '.join(sorted_values(missing))} "
                    "(interleave the samples so every shard holds every group and size)"
                )
    first.finish()
    for sample in first.samples:  # the first samples among themselves: one json each, the same fields
        if first.fields is not None and (sample.json_kinds is None or set(sample.json_kinds) != set(first.fields)):
            findings.add(differs, f"{sample.label}: json fields differ among the first samples")
    return findings.lines(), problems


def first_fields(samples: Sequence[ViewedSample]) -> dict[str, set[str]] | None:
    """{json field: the kinds its values have} over the first samples (those with a json), None
    when none of them has one."""
    with_json = [s.json_kinds for s in samples if s.json_kinds is not None]
    if not with_json:
        return None
    fields: dict[str, set[str]] = {}
    for kinds in with_json:
        for name, kind in kinds.items():
            fields.setdefault(name, set()).add(kind)
    return fields


def release_folder_viewer_problems(folder: Path, release: Mapping) -> list[str]:
    """Every viewer line of the release folder `folder` (its `_release.json` already read and its
    names checked): what `hsi publish` refuses before it uploads. Each config's manifest is read
    through the untrusted-input layer; a shard that is missing or a link is left to `hsi verify`."""
    from builder.core.untrusted import read_json

    problems: list[str] = []
    for config in sorted(release.get("configs") or {}):
        where = f"data/{config}/{MANIFEST_NAME}"
        manifest = Manifest.from_json(read_json(Path(folder) / where, where))
        local = {
            shard.filename: Path(folder) / "data" / config / shard.filename
            for entry in manifest.splits.values()
            for shard in entry.shards
        }
        present = {name: path for name, path in local.items() if path.is_file() and not path.is_symlink()}
        unreadable, partial = viewer_problems(config, manifest, present)
        problems += unreadable + partial
    return problems
