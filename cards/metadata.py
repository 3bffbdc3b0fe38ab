"""The card's YAML header as data (huggingface_hub's `DatasetCardData`, dumped with
`yaml.safe_dump`), checked with `datasets`' own parsers before anything is written: the `configs`
list (explicit `data_files` per split, exactly one default) and the declared features per config,
so `load_dataset` never infers features from the first samples."""

from __future__ import annotations

from collections.abc import Iterable

import yaml

from builder.core.errors import printable
from builder.formats.composites import SCHEMA_VERSION, fields_of_version
from cards.parts_card import PARTS_CONFIG, PartsSummary, parts_features
from cards.summary import LICENSE_LINK, LICENSE_NAME, TAGS, TASK_CATEGORIES, CardError, ConfigSummary, default_title

# ---------------------------------------------------------------- features


def unique_label_names(names: Iterable[str]) -> list[str]:
    """ClassLabel needs unique names; ImageNet repeats two ("crane", "maillot"), so a repeated
    name gets its label index appended: `crane (134)`, `crane (517)`."""
    names = list(names)
    repeated = {n for n in names if names.count(n) > 1}
    return [f"{n} ({i})" if n in repeated else n for i, n in enumerate(names)]


def composite_features(class_names: list[str], schema_version: object = SCHEMA_VERSION):
    """The declared `datasets` features of a composed config: jpg image, cls label, json struct (the
    fields of its manifest's composite `schema_version`: an older config declares what it holds)."""
    from datasets import ClassLabel, Features, Image, Value

    dtype = {int: "int64", str: "string", float: "float64"}
    return Features(
        {
            "__key__": Value("string"),
            "jpg": Image(),
            "cls": ClassLabel(names=unique_label_names(class_names)),
            "json": {name: Value(dtype[kind]) for name, (kind, _, _) in fields_of_version(schema_version).items()},
        }
    )


# ---------------------------------------------------------------- gating and sources

# The Hub gates a dataset whose card sets `extra_gated_prompt` and `extra_gated_fields` (a field is a
# label and its type: text, checkbox, date_picker, country, or a select with options; a user must
# fill every field, so a checkbox must be ticked, before the files are shown; docs/hub/datasets-gated).
GATED_PROMPT = (
    "The images derive from ImageNet (ILSVRC2012) and carry ImageNet's terms of access "
    f"({LICENSE_LINK}): non-commercial research and education only. Read those terms and accept them "
    "below to access the files."
)
GATED_FIELDS = {  # a label under 128 characters: yaml.safe_dump writes a longer key in its `? key` form
    "I agree to use this dataset only for non-commercial research and education, under ImageNet's terms of access": (
        "checkbox"
    ),
}
GATED_FIELD_TYPES = {"text", "checkbox", "date_picker", "country"}  # and {"type": "select", "options": [...]}
SOURCE_DATASETS = ["extended|imagenet-1k"]  # the datasets-tagging form: derived from ImageNet-1k


def gating_problems(metadata: dict) -> list[str]:
    """Lines for a card header that would not gate the files behind ImageNet's terms: no prompt
    quoting them and their link, gating fields that are not a mapping of label to a known type, no
    checkbox to accept, or no ImageNet among `source_datasets`."""
    problems = []
    prompt = metadata.get("extra_gated_prompt")
    if not isinstance(prompt, str) or LICENSE_LINK not in prompt or "non-commercial" not in prompt:
        problems.append(f"extra_gated_prompt does not quote ImageNet's terms of access and their link {LICENSE_LINK}")
    fields = metadata.get("extra_gated_fields")
    if not isinstance(fields, dict) or not fields:
        problems.append("extra_gated_fields is not a mapping of labels to field types")
    else:
        for label, kind in fields.items():
            select = isinstance(kind, dict) and kind.get("type") == "select" and isinstance(kind.get("options"), list)
            if not isinstance(label, str) or not ((isinstance(kind, str) and kind in GATED_FIELD_TYPES) or select):
                problems.append(
                    f"extra_gated_fields: {str(label)[:80]!r} has type {str(kind)[:40]!r}, not one the Hub shows"
                )
        if "checkbox" not in fields.values():
            problems.append("extra_gated_fields has no checkbox for the user to accept ImageNet's terms")
    sources = metadata.get("source_datasets")
    if not isinstance(sources, list) or not any(isinstance(v, str) and "imagenet" in v.lower() for v in sources):
        problems.append("source_datasets does not name ImageNet")
    return problems


def hub_card_problems(text: str, metadata: dict) -> list[str]:
    """Lines for what huggingface_hub's own card classes make of the card, offline: `DatasetCard`
    parses it (the check `push_to_hub` makes before it asks the Hub's /api/validate-yaml, which needs
    the network), and its `DatasetCardData` round trip (`DatasetCardData(**yaml).to_dict()`) gives
    back the header unchanged, so no field is dropped or rewritten; then the gating fields."""
    from huggingface_hub import DatasetCard, DatasetCardData

    problems = []
    try:
        card = DatasetCard(text)
    except (ValueError, TypeError) as exc:
        return [f"huggingface_hub's DatasetCard does not read it ({printable(str(exc))[:200]})"]
    if card.data.to_dict() != metadata:
        problems.append("huggingface_hub's DatasetCard reads another header than the YAML")
    try:
        round_trip = DatasetCardData(**metadata).to_dict()
    except (ValueError, TypeError) as exc:
        return problems + [f"huggingface_hub's DatasetCardData does not take the header ({printable(str(exc))[:200]})"]
    if round_trip != metadata:
        changed = sorted(
            str(k)
            for k in set(round_trip) | set(metadata)
            if k not in round_trip or round_trip[k] != metadata.get(k, ...)
        )
        problems.append(
            f"huggingface_hub's DatasetCardData changes {printable(', '.join(map(str, changed)))[:200]} of the header"
        )
    return problems + gating_problems(metadata)


# ---------------------------------------------------------------- metadata


def size_category(total: int) -> str:
    for bound, label in (
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
        (10_000_000, "1M<n<10M"),
    ):
        if total < bound:
            return label
    return "10M<n<100M"


def card_metadata(configs: list[ConfigSummary], title: str | None = None, parts: PartsSummary | None = None) -> dict:
    """The card's YAML header as a plain dict (huggingface_hub's DatasetCardData field names); with
    `parts`, the `parts` config too (listed last, never the default)."""
    from huggingface_hub import DatasetCardData

    defaults = [c.name for c in configs if c.default]
    if len(defaults) != 1:
        raise CardError(f"exactly one config must be the default, got {defaults or 'none'}")
    total = sum(c.manifest["splits"][s]["num_samples"] for c in configs for s in c.splits)
    data = DatasetCardData(
        pretty_name=title or default_title(configs),
        license="other",
        license_name=LICENSE_NAME,
        license_link=LICENSE_LINK,
        task_categories=TASK_CATEGORIES,
        tags=TAGS,
        source_datasets=SOURCE_DATASETS,
        size_categories=[size_category(total)],
        configs=[
            {
                "config_name": c.name,
                "data_files": [{"split": s, "path": c.data_files(s)} for s in c.splits],
                **({"default": True} if c.default else {}),
            }
            for c in configs
        ]
        + ([parts_config(parts)] if parts else []),
        dataset_info=[
            {
                "config_name": c.name,
                "features": composite_features(c.class_names, c.schema_version)._to_yaml_list(),
                "splits": [
                    {
                        "name": s,
                        "num_bytes": sum(sh["bytes"] for sh in c.manifest["splits"][s]["shards"]),
                        "num_examples": c.manifest["splits"][s]["num_samples"],
                    }
                    for s in c.splits
                ],
            }
            for c in configs
        ]
        + ([parts_info(parts)] if parts else []),
        extra_gated_prompt=GATED_PROMPT,
        extra_gated_fields=dict(GATED_FIELDS),
    )
    return data.to_dict()


def parts_config(parts: PartsSummary) -> dict:
    return {
        "config_name": PARTS_CONFIG,
        "data_files": [{"split": s, "path": parts.data_files(s)} for s in parts.splits],
    }


def parts_info(parts: PartsSummary) -> dict:
    return {
        "config_name": PARTS_CONFIG,
        "features": parts_features()._to_yaml_list(),
        "splits": [
            {"name": s, "num_bytes": parts.num_bytes(s), "num_examples": parts.num_samples(s)} for s in parts.splits
        ],
    }


def dump_metadata(metadata: dict) -> str:
    return yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True, width=1000)


def check_card(text: str, expected: list[ConfigSummary] | None = None, parts: PartsSummary | None = None) -> dict:
    """Parse a card the way `datasets` does and raise CardError for anything it would not load as
    declared: duplicate YAML keys, invalid configs or data_files, not exactly one default, features
    that do not parse or differ from the expected ones. Returns the parsed metadata."""
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs, _NoDuplicateSafeLoader, _split_yaml_from_readme
    from huggingface_hub import DatasetCardData

    block, _ = _split_yaml_from_readme(text)
    if block is None:
        raise CardError("the card has no YAML header between '---' lines")
    try:
        metadata = yaml.load(block, Loader=_NoDuplicateSafeLoader)
    except (TypeError, yaml.YAMLError) as exc:  # datasets raises TypeError for duplicate keys
        raise CardError(f"the card's YAML does not parse: {exc}") from None
    if not isinstance(metadata, dict):
        raise CardError("the card's YAML header is not a mapping")
    try:
        card_data = DatasetCardData(**metadata)
        configs = MetadataConfigs.from_dataset_card_data(card_data)
        default = configs.get_default_config_name()
        infos = DatasetInfosDict.from_dataset_card_data(card_data)
    except (ValueError, TypeError, KeyError) as exc:
        raise CardError(f"datasets rejects the card's metadata: {exc}") from None
    if not configs:
        raise CardError("the card declares no configs")
    explicit = [name for name, cfg in configs.items() if cfg.get("default")]
    if len(explicit) != 1 or default != explicit[0]:
        raise CardError(f"exactly one config must say default: true, got {explicit or 'none'}")
    for name, cfg in configs.items():
        if not cfg.get("data_files"):
            raise CardError(f"config {name!r} lists no data_files")
        if name not in infos or infos[name].features is None:
            raise CardError(f"config {name!r} has no declared features in dataset_info")
    for summary in expected or []:
        if summary.name not in configs:
            raise CardError(f"config {summary.name!r} is missing from the card")
        if infos[summary.name].features != composite_features(summary.class_names, summary.schema_version):
            raise CardError(f"config {summary.name!r}: declared features differ from the schema")
        declared = {row["split"]: row["path"] for row in configs[summary.name]["data_files"]}
        wanted = {s: summary.data_files(s) for s in summary.splits}
        if declared != wanted:
            raise CardError(f"config {summary.name!r}: data_files {declared} differ from the manifest {wanted}")
    if parts is not None:
        if PARTS_CONFIG not in configs:
            raise CardError(f"config {PARTS_CONFIG!r} is missing from the card")
        if infos[PARTS_CONFIG].features != parts_features():
            raise CardError(f"config {PARTS_CONFIG!r}: declared features differ from the parts schema")
        declared = {row["split"]: row["path"] for row in configs[PARTS_CONFIG]["data_files"]}
        wanted = {s: parts.data_files(s) for s in parts.splits}
        if declared != wanted:
            raise CardError(f"config {PARTS_CONFIG!r}: data_files {declared} differ from the parts manifest {wanted}")
    return metadata
