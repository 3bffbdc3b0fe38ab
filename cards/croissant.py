"""`croissant.json`: the release described in Croissant 1.1 (mlcommons.org/croissant), with the
minimal Responsible-AI (RAI) fields, rendered from the release's manifests only, so that `hsi verify`
can render it again from the folder (or a published revision) and compare.

What it holds:

- `distribution`: one `cr:FileObject` per shard (`@id` and `contentUrl` its release path
  `data/<config>/<split>-NNNNN.tar`, `application/x-tar`, the manifest's sha256 and byte size), and
  per config one `cr:FileSet` per sample member (`<config>/<member>-members`, contained in the
  config's shards: `*.jpg`, `*.cls`, `*.json`; for parts `*.background.png`, `*.cls`, `*.json`).
- per composed config, three record sets, the mapping from a WebDataset sample:
  `<config>` (key = the member name without `.jpg`; `image` = the `jpg` member; `label` = the `cls`
  member, joined on the key through `<config>/labels`), and `<config>/metadata` (key = the member name
  without `.json`; one field per key of the sample's `json`, `jsonPath: $.<name>`, typed and described
  as `builder.formats.composites.COMPOSITE_FIELDS` had them in the manifest's `schema_version`). The
  parts config has `parts` (key, `background` = the inpainted background, `label`), `parts/labels`
  and `parts/metadata` (the scalar fields of a part's `json`, its fill scores by
  `$.fill_scores.<name>`; the boxes, conversions and provenance lists stay in the member).
- the card's licence (ImageNet's terms of access), citation, and the RAI fields written from the
  manifests: synthetic data, how it was collected (ImageNet photos and boxes, the masker and inpainter
  the parts manifest records, each config's compose spec), biases, limitations (the fill-score
  summaries of the manifests), use cases, personal information, and the counts.

mlcroissant 1.1.1 extracts tar members for a `FileSet` contained in a tar `FileObject` and reads
their file properties (name, content: key, image, label load), but it does not parse the content of a
member (`jsonPath` on a JSON member inside an archive is mlcommons/croissant issue #1010), so
the `<config>/metadata` record sets validate but do not load with it; `datasets`/`webdataset` read the same
members as a `json` struct.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from builder import __version__
from builder.formats.composites import SCHEMA_VERSION, fields_of_version
from builder.formats.fill_scores import SCORE_NAMES
from cards.parts_card import PARTS_CONFIG
from cards.summary import CITATION, LICENSE_LINK, LICENSE_NAME, TAGS

CROISSANT_NAME = "croissant.json"
PAPER_URL = "https://openreview.net/forum?id=Yqf2BhqfyZ"
IMAGENET_URL = "https://image-net.org/"
POOR_FILL = 0.5

# The JSON-LD context of Croissant 1.1, as mlcroissant writes it (mlcroissant._src.core.rdf.make_context).
CONTEXT: dict = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "arrayShape": "cr:arrayShape",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "containedIn": "cr:containedIn",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "description": {"@container": "@language"},
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isArray": "cr:isArray",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "name": {"@container": "@language"},
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}
DATA_TYPES = {str: "sc:Text", int: "sc:Integer", float: "sc:Float"}
# (field name, member, data type, description) of the record set each config's samples load as
COMPOSITE_MEMBERS = (("image", "jpg", "sc:ImageObject", "the composite, a JPEG (the sample's `jpg` member)"),)
PARTS_MEMBERS = (
    ("background", "background.png", "sc:ImageObject", "the inpainted background, every box erased (`background.png`)"),
)
LABEL_DESCRIPTION = "the training label, ASCII digits (the sample's `cls` member; the same as the json's `label`)"


def _field(record_set: str, name: str, data_type: str, description: str, source: dict, **extra) -> dict:
    return {
        "@type": "cr:Field",
        "@id": f"{record_set}/{name}",
        "name": name,
        "description": description,
        "dataType": data_type,
        "source": source,
        **extra,
    }


def _member_source(config: str, member: str, extract: dict, key_regex: bool = False) -> dict:
    source: dict = {"fileSet": {"@id": f"{config}/{member}-members"}, "extract": extract}
    if key_regex:
        # keys contain no dots (builder.formats.composites.sample_key). The extension is optional because
        # mlcroissant 1.1.1 applies the transform again to the key it already stripped (when it joins the
        # members), and warned "Could not match" once per sample where the extension was required.
        source["transform"] = {"regex": "^([^.]*)(?:\\." + member.replace(".", "\\.") + ")?$"}
    return source


def _key_field(record_set: str, config: str, member: str, **extra) -> dict:
    return _field(
        record_set,
        "key",
        "sc:Text",
        f"the sample's key: the name of its `{member}` member without the extension",
        _member_source(config, member, {"fileProperty": "filename"}, key_regex=True),
        **extra,
    )


def _record_set(record_set_id: str, description: str, fields: list[dict]) -> dict:
    return {
        "@type": "cr:RecordSet",
        "@id": record_set_id,
        "name": record_set_id,
        "description": description,
        "key": {"@id": f"{record_set_id}/key"},
        "field": fields,
    }


def _count(manifest: Mapping) -> int:
    return sum(int(entry["num_samples"]) for entry in manifest["splits"].values())


def _split_counts(manifest: Mapping) -> str:
    return ", ".join(f"{split} {entry['num_samples']}" for split, entry in sorted(manifest["splits"].items()))


def sample_record_sets(config: str, manifest: Mapping, members, parts: bool = False) -> list[dict]:
    """`<config>/labels` (key, label from `cls`) and `<config>` (key, the image members, label joined on
    the key): what mlcroissant loads from the shards' members."""
    first = members[0][1]
    labels = f"{config}/labels"
    what = "parts" if parts else "composites"
    return [
        _record_set(
            labels,
            f"the `cls` member of every sample of {config}, by key (joined into `{config}`)",
            [
                _key_field(labels, config, "cls"),
                _field(
                    labels,
                    "label",
                    "sc:Integer",
                    LABEL_DESCRIPTION,
                    _member_source(config, "cls", {"fileProperty": "content"}),
                ),
            ],
        ),
        _record_set(
            config,
            f"the {_count(manifest)} {what} of {config} ({_split_counts(manifest)}), one record per WebDataset sample",
            [_key_field(config, config, first, references={"field": {"@id": f"{labels}/key"}})]
            + [
                _field(
                    config, name, data_type, description, _member_source(config, member, {"fileProperty": "content"})
                )
                for name, member, data_type, description in members
            ]
            + [_field(config, "label", "sc:Integer", LABEL_DESCRIPTION, {"field": {"@id": f"{labels}/label"}})],
        ),
    ]


# The scalar fields of a part's `json` (builder.formats.parts.parts_metadata), with the paths that read
# them; its lists (boxes, conversions) and provenance stay in the member, described by the parts card.
PARTS_JSON_FIELDS = (
    ("source_id", "$.source_id", str, False, "the ImageNet image id the part was extracted from"),
    ("wnid", "$.wnid", str, False, "the ImageNet class (WordNet id) of the image"),
    ("class_index", "$.class_index", int, False, "the class index 0-999 in sorted-wnid order"),
    ("class_name", "$.class_name", str, False, "the class's readable name"),
    ("width", "$.width", int, False, "the source image's width in px (the background's)"),
    ("height", "$.height", int, False, "the source image's height in px (the background's)"),
    ("object_box_index", "$.object_box_index", int, False, "which of the image's boxes the crop is"),
    ("object_box_rule", "$.object_box_rule", str, False, "the rule that chose that box (e.g. largest)"),
    *(
        (f"fill_{name}", f"$.fill_scores.{name}", float, True, f"the background's fill score `{name}`")
        for name in SCORE_NAMES
    ),
    ("schema_version", "$.schema_version", int, False, "the parts schema version"),
)


def metadata_record_set(config: str, parts: bool = False, schema_version: object = SCHEMA_VERSION) -> dict:
    """`<config>/metadata`: one field per key of a composite's `json` (those of the config's composite
    `schema_version`), or the scalar fields of a part's."""
    record_set = f"{config}/metadata"
    if parts:
        rows = [
            (name, path, kind, nullable, description) for name, path, kind, nullable, description in PARTS_JSON_FIELDS
        ]
        what = f"the `json` member of every part of {config}: its scalar fields, null where nothing was filled"
    else:
        rows = [
            (name, f"$.{name}", kind, nullable, description)
            for name, (kind, nullable, description) in fields_of_version(schema_version).items()
        ]
        what = f"the `json` member of every sample of {config}: one field per key, null where it does not apply"
    return _record_set(
        record_set,
        what,
        [_key_field(record_set, config, "json")]
        + [
            _field(
                record_set,
                name,
                DATA_TYPES[kind],
                description + (" (may be null)" if nullable else ""),
                _member_source(config, "json", {"jsonPath": path}),
            )
            for name, path, kind, nullable, description in rows
        ],
    )


def _distribution(config: str, manifest: Mapping, members: tuple[tuple[str, str], ...]) -> list[dict]:
    shards = [shard for _, entry in sorted(manifest["splits"].items()) for shard in entry["shards"]]
    files = [
        {
            "@type": "cr:FileObject",
            "@id": f"data/{config}/{shard['filename']}",
            "name": f"data/{config}/{shard['filename']}",
            "description": f"a WebDataset shard of {config}, {shard['num_samples']} samples",
            "contentUrl": f"data/{config}/{shard['filename']}",
            "contentSize": f"{shard['bytes']} B",
            "encodingFormat": "application/x-tar",
            "sha256": shard["sha256"],
        }
        for shard in shards
    ]
    sets = [
        {
            "@type": "cr:FileSet",
            "@id": f"{config}/{member}-members",
            "name": f"{config}/{member}-members",
            "description": f"the `{member}` member of every sample of {config}",
            "containedIn": [{"@id": f["@id"]} for f in files],
            "encodingFormat": encoding,
            "includes": f"*.{member}",
        }
        for member, encoding in members
    ]
    return files + sets


def _backend_words(backends: Mapping | None) -> str:
    if not backends:
        return "not recorded"
    words = []
    for role in ("masker", "inpainter"):
        backend = backends.get(role) or {}
        name = backend.get("name") or "unknown"
        sha = backend.get("checkpoint_sha256")
        fallback = ((backend.get("params") or {}).get("fallback") or {}).get("name")
        words.append(
            f"{role} {name}"
            + (f" (checkpoint sha256 {sha})" if sha else " (no checkpoint)")
            + (f", falling back to {fallback}" if fallback else "")
        )
    return "; ".join(words)


def _spec_words(config: str, spec: Mapping) -> str:
    def listed(key: str) -> str:
        return ", ".join(str(v) for v in spec.get(key) or []) or "none"

    return (
        f"{config}: sizes {listed('sizes')} px on a {spec.get('canvas')} px canvas ({spec.get('mode')}, "
        f"{spec.get('paste')} paste), positions {listed('positions')}, backgrounds {listed('backgrounds')}, "
        f"seed {spec.get('seed')}"
    )


def _fill_words(config: str, manifest: Mapping) -> list[str]:
    lines = []
    for split, entry in sorted(manifest["splits"].items()):
        fills = entry.get("fill_scores")
        if not isinstance(fills, Mapping) or not fills.get("scored"):
            continue
        median = (fills.get("score") or {}).get("median")
        share = fills.get("share_below_poor_score")
        poor = fills.get("poor_score", POOR_FILL)
        lines.append(
            f"{config}/{split}: median fill score {median}, {round(100 * share, 1)}% of {fills['scored']} scored "
            f"fills under {poor}"
        )
    return lines


def croissant_metadata(title: str, version: str | None, default_config: str, manifests: Mapping[str, Mapping]) -> dict:
    """The Croissant document of a release: `manifests` {config: its `_info.json`}, the parts config's
    under `parts` (if any); `title` is the card's `pretty_name`."""
    composed = sorted(c for c in manifests if c != PARTS_CONFIG)
    order = [default_config] + [c for c in composed if c != default_config]
    parts = manifests.get(PARTS_CONFIG)
    distribution: list[dict] = []
    record_sets: list[dict] = []
    for config in order:
        distribution += _distribution(
            config, manifests[config], (("jpg", "image/jpeg"), ("cls", "text/plain"), ("json", "application/json"))
        )
        record_sets += sample_record_sets(config, manifests[config], COMPOSITE_MEMBERS)
        record_sets.append(metadata_record_set(config, schema_version=manifests[config].get("schema_version")))
    if parts is not None:
        distribution += _distribution(
            PARTS_CONFIG, parts, (("background.png", "image/png"), ("cls", "text/plain"), ("json", "application/json"))
        )
        record_sets += sample_record_sets(PARTS_CONFIG, parts, PARTS_MEMBERS, parts=True)
        record_sets.append(metadata_record_set(PARTS_CONFIG, parts=True))

    backends = (parts or {}).get("backends") or (manifests[default_config].get("parts") or {}).get("backends")
    imagenet_splits = sorted({s for c in composed for s in (manifests[c].get("spec") or {}).get("splits") or []})
    sources = sorted(
        {int(manifests[c]["splits"][s].get("source_images") or 0) for c in composed for s in manifests[c]["splits"]}
    )
    total = sum(_count(manifests[c]) for c in composed)
    counts = "; ".join(f"{c}: {_count(manifests[c])} composites ({_split_counts(manifests[c])})" for c in order)
    if parts is not None:
        counts += f"; parts: {_count(parts)} parts ({_split_counts(parts)})"
    fills = [
        line for c in order + ([PARTS_CONFIG] if parts is not None else []) for line in _fill_words(c, manifests[c])
    ]
    licence = (
        f"The images derive from ImageNet (ILSVRC2012) and carry ImageNet's terms of access ({LICENSE_LINK}): "
        "non-commercial research and education only."
    )
    document = {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": "http://mlcommons.org/croissant/1.1",
        "name": title,
        "description": (
            f"{title}: ImageNet objects cut out by their ground-truth boxes, erased from their photos (the holes "
            "inpainted) and pasted back small, at the centre or in a corner, on their own inpainted background or "
            f"on another class's; the benchmark of 'Corner Cases: How Size and Position of Objects Challenge "
            f"ImageNet-Trained Models' (TMLR 2025), built with the hard-spurious-imagenet toolkit {__version__}. "
            f"Configs: "
            f"{counts}. WebDataset shards (members jpg, cls, json); {licence}"
        ),
        "license": LICENSE_LINK,
        "conditionsOfAccess": f"{LICENSE_NAME}: {licence}",
        "url": PAPER_URL,
        "citeAs": CITATION,
        "keywords": list(TAGS),
        "isBasedOn": {"@type": "sc:Dataset", "name": "ImageNet (ILSVRC2012)", "url": IMAGENET_URL},
        "isAccessibleForFree": True,
        **({"version": version[1:] if version.startswith("v") else version} if version else {}),
        "rai:hasSyntheticData": True,
        "rai:dataCollection": (
            f"Synthetic composites, {total} in all, made from {'/'.join(map(str, sources)) or 'unknown'} ImageNet "
            f"(ILSVRC2012) {', '.join(imagenet_splits) or 'unknown'} photographs per config and ImageNet's own "
            "ground-truth boxes. Extract: every box of a photo is erased and the hole inpainted "
            f"({_backend_words(backends)}); "
            "the object is cropped by its box (the largest box unless the spec says otherwise). Compose: "
            + "; ".join(_spec_words(c, manifests[c].get("spec") or {}) for c in order)
            + ". No new photographs were collected and no annotation was done by people."
        ),
        "rai:dataBiases": (
            "The composites inherit ImageNet's biases: its class list, the photos' geographic and cultural skew "
            "towards the web of 2009-2012, its label noise and its boxes. By construction every object is small and "
            "placed on a chosen or random background; backgrounds of another class (R groups) are drawn from the "
            "same release's images, so the background classes follow the classes present, not the world."
        ),
        "rai:dataLimitations": (
            "Box crops carry some of their own background and the inpainted holes can leave visible traces; a "
            "model's drop on the R groups mixes size, position and background effects. Fill quality (no-reference "
            "fill scores of the inpainted backgrounds, 0-1, higher is better): "
            + ("; ".join(fills) if fills else "not recorded")
            + ". Labels are ImageNet's; a small release (few classes or images) supports no per-class conclusions."
        ),
        "rai:dataUseCases": (
            "For: evaluating and analysing ImageNet-trained classifiers' robustness to object size, position and "
            "background (groups CeO, CoO, CeR, CoR; tiers Easy, Medium, Hard), and non-commercial research on "
            "spurious correlations, under ImageNet's terms. Not for: commercial use, training models deployed on "
            "people, identifying or profiling people, or as a measure of real-world accuracy (the images are "
            "synthetic composites)."
        ),
        "rai:personalSensitiveInformation": (
            "ImageNet photographs show people, some identifiable (faces), in backgrounds and objects; this toolkit "
            "made no attempt to blur or remove faces, and the composites keep whatever the source photos show. No "
            "other personal information is recorded: sample metadata names only ImageNet image ids and classes."
        ),
        "distribution": distribution,
        "recordSet": record_sets,
    }
    return document


def render_croissant(document: Mapping) -> str:
    """The file's text: the same document gives the same bytes."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def first_difference(expected: object, found: object, path: str = "") -> str | None:
    """The JSON path of the first value that differs (list items named by their `@id`), or None."""
    if isinstance(expected, dict) and isinstance(found, dict):
        for key in list(expected) + [k for k in found if k not in expected]:
            where = f"{path}.{key}" if path else str(key)
            if key not in expected or key not in found:
                return where
            inner = first_difference(expected[key], found[key], where)
            if inner is not None:
                return inner
        return None
    if isinstance(expected, list) and isinstance(found, list):
        for index, (a, b) in enumerate(zip(expected, found)):
            name = a.get("@id", index) if isinstance(a, dict) else index
            inner = first_difference(a, b, f"{path}[{name}]")
            if inner is not None:
                return inner
        return None if len(expected) == len(found) else f"{path} (length {len(found)}, expected {len(expected)})"
    if type(expected) is not type(found) or expected != found:
        return path or "(the document)"
    return None


def croissant_problem(text: str, expected: Mapping) -> str | None:
    """One line when `text` (the release's croissant.json) is not the document its manifests give."""
    try:
        found = json.loads(text)
    except ValueError as exc:
        return f"{CROISSANT_NAME} does not parse as JSON ({exc})"
    where = first_difference(dict(expected), found)
    if where is not None:
        return f"{CROISSANT_NAME}: {where} differs from the release's manifests; rebuild it with `hsi release`"
    if text != render_croissant(expected):
        return f"{CROISSANT_NAME}: same content, other bytes than `hsi release` writes; rebuild it with `hsi release`"
    return None


def release_croissant_problems(
    release: Mapping, manifests: Mapping[str, Mapping], card_text: str | None, croissant_text: str | None
) -> list[str]:
    """`hsi verify`'s check of croissant.json: rendered again from the release's `_release.json`
    (version, default config), manifests ({config: `_info.json` as JSON}) and card (its `pretty_name`),
    and compared with the file; one line naming the first field that differs. A release that does not
    record a croissant.json (built before it was written) has none to check."""
    import yaml

    files = release.get("files")
    if croissant_text is None:
        recorded = isinstance(files, Mapping) and CROISSANT_NAME in files
        return [f"{CROISSANT_NAME}: missing or not UTF-8 text"] if recorded else []
    title = None
    if card_text is not None and card_text.startswith("---\n"):
        try:
            header = yaml.safe_load(card_text.split("\n---\n", 1)[0][4:])
        except yaml.YAMLError:
            header = None
        title = header.get("pretty_name") if isinstance(header, dict) else None
    if not isinstance(title, str):
        return [f"{CROISSANT_NAME}: cannot be checked, the card names no pretty_name"]
    default = release.get("default_config")
    if default not in manifests:
        return [f"{CROISSANT_NAME}: cannot be checked, the default config {default!r} has no manifest"]
    expected = croissant_metadata(title, release.get("version"), default, manifests)
    problem = croissant_problem(croissant_text, expected)
    return [problem] if problem else []
