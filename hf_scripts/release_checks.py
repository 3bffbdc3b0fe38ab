"""What `hsi verify` compares besides the shards' bytes: everything else a release records.

A revision is intact only when what `load_dataset` reads from it is what the release recorded:

- huggingface_hub reads the card's header as written (`DatasetCard`, the `DatasetCardData` round
  trip; cards.metadata.hub_card_problems) and it gates the files behind ImageNet's terms;
- the card's `configs` (README.md's YAML) read exactly the manifest's shards, path for path, both
  ways: no config, split or shard the manifest lacks, none of its shards left out, no glob, no
  `data_dir` or other key that changes which files `datasets` resolves; the declared features carry
  the manifest's class names;
- every file `_release.json` records (README.md, each `_info.json`, validation reports, previews)
  has the recorded sha256, and the revision holds no file the release does not list;
- each manifest's `fingerprint` is the fingerprint of the settings it records (recomputed with the
  function that wrote it, `builder.core.config.fingerprint`), and the one `_release.json` records;
- the streamed samples agree with the manifest: their counts by group, size and tier, and each
  sample's class name with the manifest's class names.

Each difference is one line naming the file and what differs; `hf_scripts.verify` collects them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from builder.compose.stage import compose_settings
from builder.core.classes import label_space_problem
from builder.core.config import fingerprint
from builder.core.errors import printable
from builder.core.manifest import COMPOSITES, MANIFEST_NAME, PARTS, Manifest
from builder.formats.composites import COUNT_KINDS, check_composite_json, count_buckets
from builder.formats.parts import PARTS_MEMBERS, PARTS_MEMBERS_V1
from cards.croissant import release_croissant_problems
from cards.hub_benchmark import eval_yaml_problems
from cards.release import RELEASE_META, subset_wnids
from cards.release_fields import previous_release_problems, record_field_problems
from cards.signature import SIGNATURE, SignerCheck, check_signature, signature_problems
from cards.summary import CardError
from hf_scripts.viewer_checks import viewer_problems

CARD = "README.md"
# What a config entry of our cards holds; anything else (`data_dir`, builder arguments) would change
# which files `datasets` resolves or how it reads them.
CARD_CONFIG_KEYS = {"config_name", "data_files", "default"}
KEEP_REMOTE = {".gitattributes"}  # the Hub's own file of every repo (as hf_scripts.publish keeps it)


def manifest_path(config: str) -> str:
    return f"data/{config}/{MANIFEST_NAME}"


def shard_paths(config: str, manifest: Manifest) -> dict[str, list[str]]:
    """{split: [path in the repo]} of the manifest's shards, in its order."""
    return {split: [f"data/{config}/{f}" for f in entry.filenames] for split, entry in sorted(manifest.splits.items())}


def fetched(fetch: Callable[[str], str], path: str) -> Path:
    """The local file `fetch` (hf_hub_download at the revision) gives for `path`: the cache's blob
    itself, not huggingface_hub's link to it."""
    return Path(fetch(path)).resolve()


# -- the card ---------------------------------------------------------------------------------------


def card_text(fetch: Callable[[str], str], present: set[str]) -> str | None:
    """The card's text, or None when the revision has none or it is not UTF-8 (the files record's
    check says which; no config is then streamed)."""
    if CARD not in present:
        return None
    try:
        return fetched(fetch, CARD).read_text("utf-8")
    except UnicodeDecodeError:
        return None


def card_problems(text: str | None, manifests: Mapping[str, Manifest]) -> tuple[list[str], set[str]]:
    """(problems, the configs whose card entry reads exactly the manifest's shards) of the card
    `text` against the release's manifests ({config: Manifest})."""
    from cards.metadata import check_card, hub_card_problems

    if text is None:
        return [f"{CARD}: the revision holds no card that reads as UTF-8 text"], set()
    try:
        metadata = check_card(text)
    except CardError as exc:
        return [f"{CARD}: {printable(str(exc))}"], set()
    # huggingface_hub's card classes, offline (DatasetCard, the DatasetCardData round trip), and the gating
    problems: list[str] = [f"{CARD}: {printable(line)}" for line in hub_card_problems(text, metadata)]
    declared = _declared_data_files(metadata, problems)
    features = _declared_features(metadata, problems)
    exact = set()
    for config in sorted(set(declared) | set(manifests)):
        if config not in manifests:
            problems.append(f"{CARD}: declares config {printable(config)!r}, which {RELEASE_META} does not list")
            continue
        if config not in declared:
            problems.append(f"{CARD}: declares no config {config!r}; {RELEASE_META} lists it")
            continue
        if _data_file_problems(config, declared[config], shard_paths(config, manifests[config]), problems):
            exact.add(config)
        composites = manifests[config].holds == COMPOSITES  # a parts config declares other features
        if composites and not _same_features(
            features.get(config), manifests[config].class_names, manifests[config].schema_version
        ):
            problems.append(
                f"{CARD}: config {config!r} declares other features (class names) than {manifest_path(config)} lists"
            )
        if manifests[config].holds == PARTS and not _same_parts_features(features.get(config)):
            problems.append(f"{CARD}: config {config!r} declares other features than the parts schema")
    return problems, exact


def _declared_data_files(metadata: dict, problems: list[str]) -> dict[str, dict[str, list]]:
    """{config: {split: [patterns]}} as `datasets` reads the card's `configs` (its sanitize_patterns)."""
    from datasets.data_files import sanitize_patterns

    declared = {}
    for entry in metadata.get("configs") or []:
        if not isinstance(entry, dict):
            problems.append(f"{CARD}: a `configs` entry is not a mapping")
            continue
        name = str(entry.get("config_name", "default"))
        extra = sorted(str(key) for key in set(entry) - CARD_CONFIG_KEYS)
        if extra:
            problems.append(
                f"{CARD}: config {printable(name)!r} sets {', '.join(map(printable, extra))}, which `hsi release` "
                "never writes (it changes which files load_dataset reads)"
            )
        try:
            declared[name] = {str(k): list(v) for k, v in sanitize_patterns(entry.get("data_files") or []).items()}
        except (ValueError, TypeError) as exc:
            problems.append(f"{CARD}: config {printable(name)!r}: data_files do not read ({printable(str(exc))[:200]})")
    return declared


def _data_file_problems(config: str, declared: dict[str, list], wanted: dict[str, list[str]], problems: list) -> bool:
    """Append a line for each path the card reads that the manifest does not list and each manifest
    shard it does not read (split by split, exact strings: a glob is never taken for the files it
    matches); True when the two agree."""
    before = len(problems)
    where = manifest_path(config)
    for split in sorted(set(declared) | set(wanted)):
        have, want = [printable(str(p)) for p in declared.get(split, [])], wanted.get(split, [])
        label = f"{CARD}: config {config!r} split {printable(split)!r}"
        if split not in wanted:
            problems.append(f"{label} is not a split of {where}; it reads {', '.join(have) or 'nothing'}")
            continue
        for path in sorted(set(have) - set(want)):
            problems.append(f"{label} reads {path}, which {where} does not list")
        for path in sorted(set(want) - set(have)):
            problems.append(f"{label} does not read {path}, which {where} lists")
        for path in sorted(p for p, n in Counter(have).items() if n > 1):
            problems.append(f"{label} reads {path} more than once")
    return len(problems) == before


def _declared_features(metadata: dict, problems: list[str]) -> dict:
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCardData

    try:
        return dict(DatasetInfosDict.from_dataset_card_data(DatasetCardData(**metadata)))
    except (ValueError, TypeError, KeyError) as exc:
        problems.append(f"{CARD}: dataset_info does not read ({printable(str(exc))[:200]})")
        return {}


def _same_features(info, class_names: list[str] | None, schema_version: int) -> bool:
    from cards.metadata import composite_features

    if info is None or info.features is None or class_names is None:
        return False
    try:
        return info.features == composite_features(list(class_names), schema_version)
    except (ValueError, TypeError):  # duplicate or odd class names in the manifest
        return False


def _same_parts_features(info) -> bool:
    from cards.parts_card import parts_features

    return info is not None and info.features == parts_features()


# -- croissant.json and eval.yaml -------------------------------------------------------------------


def release_document_problems(
    release: dict, manifests: Mapping[str, Manifest], card: str | None, croissant: str | None, eval_yaml: Path | None
) -> list[str]:
    """Lines for a croissant.json (its text, or None when the revision has none) or an eval.yaml (its
    local file, or None) that is not what `hsi release` writes for these manifests and this card."""
    jsons = {config: manifest.to_json() for config, manifest in manifests.items()}
    return release_croissant_problems(release, jsons, card, croissant) + eval_yaml_problems(eval_yaml, release)


# -- the recorded files -----------------------------------------------------------------------------


def recorded_file_problems(
    release: dict, present: Iterable[str], sha256_of: Callable[[str], str], shards: Mapping[str, str]
) -> list[str]:
    """Lines for every file `_release.json` records that the revision lacks or holds with another
    sha256, and every file of the revision (`present`: its paths) it does not record. `sha256_of`
    hashes one path (downloading it if need be); `shards` ({path: sha256} of the configs' shards,
    hashed by the caller) are compared with the record only."""
    present = set(present) - KEEP_REMOTE
    files = release.get("files")
    if files is None:
        return [
            f"{RELEASE_META} records no file's sha256 (made before `hsi release` recorded them), so {CARD} and the "
            "_info.json files cannot be checked: rebuild the release and publish it as a new version"
        ]
    problems = []
    for path in sorted(set(shards) - set(files)):
        problems.append(f"{path}: a shard of {RELEASE_META}'s configs that its `files` record does not list")
    for path, digest in sorted(files.items()):
        if path not in present:
            problems.append(f"{printable(path)}: {RELEASE_META} records it, the revision lacks it")
        elif path in shards:
            if shards[path] != digest:
                problems.append(f"{path}: {RELEASE_META} records two sha256 for it (`files` and `configs`)")
        elif sha256_of(path) != digest:
            problems.append(
                f"{printable(path)}: sha256 differs from {RELEASE_META}'s record (changed since `hsi release` wrote it)"
            )
    for path in sorted(present - set(files) - {RELEASE_META, SIGNATURE}):  # the two files that cannot list themselves
        problems.append(
            f"{printable(path)}: in the revision but not part of the release ({RELEASE_META} does not list it)"
        )
    return problems


# -- the record's own fields, its previous release, its signature ------------------------------------


def record_problems(
    release: dict, card: str | None, previous: tuple[dict, str] | None
) -> tuple[list[str], list[str]]:
    """(report lines, problems) of `_release.json`'s fields besides configs and files
    (cards.release_fields): each against the card and the toolkit's rules, `previous` against the
    previous release's own record when it is at hand (`previous`: (its record, where it was read)),
    else listed as not checked."""
    problems = record_field_problems(release, card)
    kept = release.get("previous")
    if previous is not None:
        return [f"previous: compared with {previous[1]}"], problems + previous_release_problems(release, *previous)
    if kept is None:
        return [], problems
    return [
        f"not checked: previous ({printable(str(kept.get('version')))}) against that release itself "
        "(a folder: give --previous FOLDER; the Hub: the repo has no such tag)"
    ], problems


def release_signature_problems(
    release: dict, card: str | None, folder: Path, present: set[str], request: SignerCheck, cache_links: bool = False
) -> tuple[list[str], list[str]]:
    """(report lines, problems) of the release's signature (cards.signature) in `folder`, the
    revision's files (`cache_links`: huggingface_hub's snapshot folder, its files links to its blobs)."""
    signature = folder / SIGNATURE if SIGNATURE in present else None
    if signature is not None and cache_links:
        signature = signature.resolve()  # huggingface_hub's link to the blob it downloaded: the blob is read
    return signature_problems(release, card, signature, request, lambda: check_signature(folder, request, cache_links))


# -- the manifest's fingerprint ---------------------------------------------------------------------


def recomputed_fingerprint(manifest: Manifest) -> str | None:
    """The fingerprint of the settings `manifest` records, as the stage that wrote it computed it:
    compose records its settings' parts (spec, parts fingerprint, schema), SCGS the settings
    themselves, extract each split's settings (the manifest's fingerprint is that of the splits'
    fingerprints); None when it records neither."""
    if manifest.holds == PARTS and manifest.settings is not None:  # extract: one fingerprint per split
        per_split = {}
        for split, entry in sorted(manifest.splits.items()):
            settings = manifest.settings.get(split)
            per_split[split] = fingerprint(settings) if isinstance(settings, Mapping) else None
            if entry.fingerprint != per_split[split]:
                return f"{per_split[split]} (split {split}'s settings give it; the split records {entry.fingerprint})"
        return fingerprint(per_split)
    if manifest.stage == "compose" and manifest.spec is not None:
        return fingerprint(
            compose_settings(manifest.spec, (manifest.parts or {}).get("fingerprint"), manifest.schema_version)
        )
    if manifest.settings is not None:
        return fingerprint(manifest.settings)
    return None


def label_space_problems(config: str, manifest: Manifest) -> list[str]:
    """A line when a composed config's class names are not ImageNet's for its label space
    (builder.core.classes.label_space_problem; the spec's subset, if any, names it)."""
    if manifest.holds != COMPOSITES:
        return []
    problem = label_space_problem(manifest.class_names, subset_wnids((manifest.spec or {}).get("subset")))
    return [f"{manifest_path(config)}: {printable(problem)}"] if problem else []


def fingerprint_problems(config: str, manifest: Manifest, recorded: str | None) -> list[str]:
    """Lines for a manifest whose fingerprint is not that of its recorded settings, whose spec is
    not its spec_fingerprint's, or whose fingerprint is not the one `_release.json` records."""
    where, problems = manifest_path(config), []
    expected = recomputed_fingerprint(manifest)
    if expected is None:
        problems.append(
            f"{where}: stage {printable(manifest.stage)!r} records no settings to recompute its fingerprint"
        )
    elif manifest.fingerprint != expected:
        problems.append(
            f"{where}: fingerprint {printable(manifest.fingerprint)} is not that of the settings it records "
            f"(spec, parts, schema), which is {expected}"
        )
    if manifest.spec is not None and manifest.spec_fingerprint is not None:
        if fingerprint(manifest.spec) != manifest.spec_fingerprint:
            problems.append(f"{where}: spec_fingerprint {printable(manifest.spec_fingerprint)} is not that of its spec")
    if recorded != manifest.fingerprint:
        problems.append(
            f"{where}: fingerprint {printable(manifest.fingerprint)}, {RELEASE_META} records {printable(str(recorded))}"
        )
    return problems


# -- the streamed samples ---------------------------------------------------------------------------


class SampleTally:
    """The streamed samples of one split, counted as compose counts them, and checked against the
    manifest's class names (a sample's `class_name` is `class_names[label]`)."""

    def __init__(self, config: str, split: str, manifest: Manifest):
        self.label = f"{config}/{split}"
        self.entry = manifest.splits[split]
        self.class_names = list(manifest.class_names or [])
        self.counts: dict[str, Counter] = {kind: Counter() for kind in COUNT_KINDS}
        self.misnamed = 0
        self.composites = manifest.holds == COMPOSITES  # only composites carry these counts and names

    def add(self, meta: Mapping) -> None:
        if not self.composites:
            return
        try:
            buckets = count_buckets(meta)
            label = meta["label"]
            named = isinstance(label, int) and 0 <= label < len(self.class_names)
            self.misnamed += not named or self.class_names[label] != meta["class_name"]
        except (KeyError, TypeError):
            return  # the schema check counts a sample like this one
        for kind, bucket in buckets.items():
            self.counts[kind][bucket] += 1

    def problems(self) -> list[str]:
        if not self.composites:
            return []
        problems = []
        streamed = {kind: dict(sorted(c.items())) for kind, c in self.counts.items()}
        kinds = sorted(set(COUNT_KINDS) | set(self.entry.counts or {}))
        recorded = {kind: dict(sorted((self.entry.counts or {}).get(kind, {}).items())) for kind in kinds}
        for kind in kinds:
            if streamed.get(kind, {}) != recorded[kind]:
                problems.append(
                    f"{self.label}: the manifest counts {printable(str(recorded[kind]))[:300]} by {kind}, the streamed "
                    f"samples are {printable(str(streamed.get(kind, {})))[:300]}"
                )
        if self.misnamed:
            problems.append(
                f"{self.label}: {self.misnamed} samples' class_name is not the manifest's class_names[label]"
            )
        return problems


def parts_sample_problem(sample: Mapping) -> bool:
    """True when a streamed part lacks a member of its schema or its json's identity."""
    meta = sample.get("json")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("source_id"), str):
        return True
    required = PARTS_MEMBERS_V1 if meta.get("schema_version") == 1 else PARTS_MEMBERS
    return any(sample.get(name) is None for name in required)


def part_meaning_problems(sample: Mapping) -> list[str]:
    """What a streamed part's members say against its json (validation.integrity.meaning)."""
    from validation.integrity.meaning import check_part_meaning

    sizes = {
        name: value.size
        for name, value in sample.items()
        if name.endswith(".png") and isinstance(getattr(value, "size", None), tuple)
    }
    # the declared features give every field: a part stored without `crop_box` streams it as None
    meta = {key: value for key, value in sample["json"].items() if not (key == "crop_box" and value is None)}
    return check_part_meaning(meta, sizes, sample.get("cls"))


def config_read_back(
    config: str,
    manifest: Manifest,
    splits: Iterable[str],
    local_shards: Mapping[str, Path],
    card_reads_them: bool,
    stream: Callable[[str, str], Iterable],
) -> tuple[list[str], list[str]]:
    """(report lines, problems) of one config whose shards were hashed (`local_shards`: {filename:
    local file}): what the Hub's dataset viewer would refuse or show in part (hf_scripts.viewer_checks),
    then each split of `splits` streamed by `stream(config, split)` (load_dataset) and checked against
    the manifest, unless the viewer cannot read the samples or the card reads other files than those
    hashed (`card_reads_them` False)."""
    unreadable, partial = viewer_problems(config, manifest, local_shards)
    lines, problems = [], unreadable + partial
    for split in splits:
        hashed = f"{config}/{split}: {len(manifest.splits[split].shards)} shards hashed"
        if unreadable:
            lines.append(f"{hashed}, not streamed (see its samples)")
        elif not card_reads_them:
            lines.append(f"{hashed}, not streamed (see the card)")
        else:
            line, found = streamed_split_problems(config, split, manifest, stream(config, split))
            lines.append(line)
            problems += found
    return lines, problems


def streamed_split_problems(config: str, split: str, manifest: Manifest, samples) -> tuple[str, list[str]]:
    """What `load_dataset` streamed of one split (`samples`, each with its `json`) against the
    manifest: the count, the schema of each json and the tally; with the line verify prints. A parts
    config's samples are counted and each checked for every member of its schema."""
    entry = manifest.splits[split]
    count, bad, tally = 0, 0, SampleTally(config, split, manifest)
    parts, meaningless, first = manifest.holds == PARTS, 0, None
    for sample in samples:
        count += 1
        if parts:
            broken = parts_sample_problem(sample)
            bad += broken
            found = [] if broken else part_meaning_problems(sample)
            meaningless += bool(found)
            first = first or (found and f"{printable(str(sample.get('__key__')))}: {printable(found[0])}")
            continue
        bad += bool(check_composite_json(sample["json"]))
        tally.add(sample["json"])
    problems = []
    if count != entry.num_samples:
        problems.append(f"{config}/{split}: streamed {count} samples, the manifest says {entry.num_samples}")
    if bad:
        problems.append(f"{config}/{split}: {bad} samples' json departs from the schema")
    if meaningless:
        problems.append(
            f"{config}/{split}: {meaningless} parts are not what their json says (first: {str(first)[:300]})"
        )
    problems += tally.problems()
    return f"{config}/{split}: {len(entry.shards)} shards hashed, {count} samples streamed", problems
