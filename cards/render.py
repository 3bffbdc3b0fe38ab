"""Render the release's dataset card (README.md) from manifests and validation reports: the YAML
header (`cards.metadata`) and a Markdown body of tables made from the same data (`cards.summary`)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from builder import __version__
from builder.core import markdown
from builder.core.taxonomy import sorted_groups, tier_sort_key
from builder.formats.composites import COMPOSITE_FIELDS, SCHEMA_VERSION
from cards.datasheet import USES, closing_sections, creation_sections, dataset_details
from cards.metadata import card_metadata, check_card, dump_metadata
from cards.parts_card import (
    PARTS_CONFIG,
    SCORES_MEANING,
    PartsSummary,
    fill_scores_cell,
    fill_scores_table,
    parts_section,
)
from cards.scgs import scgs_section
from cards.signature import signature_section
from cards.summary import (
    CITATION,
    DATASET_NAME,
    LICENSE_LINK,
    ChangelogEntry,
    ConfigSummary,
    default_title,
    is_paper_benchmark,
    shipped_variant,
    split_fill_scores,
)

# ---------------------------------------------------------------- body


def table(header: list[str], rows: list[list[Any]]) -> str:
    return markdown.table(header, rows, none="None")


def code_block(text: str, language: str = "") -> str:
    return f"```{language}\n{text.rstrip()}\n```"


def groups_table(summary: ConfigSummary) -> str:
    """Samples per group (rows) and object size (columns) for every split, plus tiers."""
    blocks = []
    for split in summary.splits:
        counts = summary.manifest["splits"][split].get("counts", {})
        group_size = counts.get("group_size", {})
        # keys are "<group>/<size>"; groups such as "bottom-left/gray" hold a slash themselves
        sizes = sorted({int(k.rsplit("/", 1)[1]) for k in group_size})
        groups = sorted_groups(k.rsplit("/", 1)[0] for k in group_size)
        rows = [
            [g] + [group_size.get(f"{g}/{s}", 0) for s in sizes] + [counts.get("group", {}).get(g, 0)] for g in groups
        ]
        text = f"**{split}** ({summary.manifest['splits'][split]['num_samples']} samples)\n\n"
        text += table(["group"] + [f"{s} px" for s in sizes] + ["total"], rows) if rows else "(no group counts)"
        tiers = counts.get("tier", {})
        if tiers:
            text += "\n\n" + table(["tier", "samples"], [[t, tiers[t]] for t in sorted(tiers, key=tier_sort_key)])
        blocks.append(text)
    return "\n\n".join(blocks)


def provenance(summary: ConfigSummary) -> str:
    manifest = summary.manifest
    spec = manifest.get("spec", {})
    parts = manifest.get("parts", {})
    rows = [
        ["tool", f"{manifest.get('tool', {}).get('name', '')} {manifest.get('tool', {}).get('version', '')}".strip()],
        ["config fingerprint", manifest.get("fingerprint", "")],
        ["parts fingerprint", parts.get("fingerprint", "")],
        ["seed", spec.get("seed", "")],
        ["schema version", manifest.get("schema_version", SCHEMA_VERSION)],
        ["compose issues (inputs skipped or composites dropped)", issues_cell(manifest.get("errors") or {})],
    ]
    text = backends_prose(parts.get("backends") or {}) + "\n\n" + table(["", ""], rows)
    missing = manifest.get("allowed_missing")
    if missing:
        text += (
            "\n\n**Incomplete by request** (built with `--allow-missing`): this config lacks what its spec "
            "promises, so its groups are not all balanced: " + "; ".join(str(m) for m in missing) + "."
        )
    backends = parts.get("backends") or {}
    if backends:
        text += "\n\nBackends (models, checkpoints and their sha256, parameters):\n\n"
        text += code_block(yaml.safe_dump(backends, sort_keys=True, allow_unicode=True), "yaml")
    if spec:
        shown, note = dict(spec), ""
        if inherited_description(spec):
            shown.pop("description")
            note = " (its `description`, kept from the variant it was derived from, is left out: it does not fit)"
        spec_yaml = yaml.safe_dump(shown, sort_keys=True, allow_unicode=True)
        text += f"\n\nVariant spec{note}:\n\n" + code_block(spec_yaml, "yaml")
    return text


def issues_cell(errors: dict) -> str:
    """The compose issues by reason: a reason names whether an input was skipped (unreadable parts)
    or composites were dropped (no background of the kind)."""
    total = errors.get("total", 0)
    by_reason = errors.get("by_reason") or {}
    reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(by_reason.items()))
    return f"{total}" + (f" ({reasons})" if total and reasons else "")


BACKEND_WORDS = {
    "box": "box masks (the whole ground-truth box, no segmentation)",
    "sam": "Segment Anything (SAM) masks",
    "telea": "OpenCV's Telea inpainting (classical, no model)",
    "patchmatch": "PatchMatch inpainting (classical, no model: texture copied from the rest of the photo)",
    "lama": "LaMa inpainting",
}


def backends_prose(backends: dict) -> str:
    """The parts' masker and inpainter in words, and whether they are the paper's (SAM and LaMa)."""
    if not backends:
        return "The parts' manifest names no backends, so how objects were masked and erased is not recorded."
    names = {role: (backends.get(role) or {}).get("name") for role in ("masker", "inpainter")}
    words = {
        role: BACKEND_WORDS.get(name, f"`{name}`") if name else "an unrecorded backend" for role, name in names.items()
    }
    text = f"Objects were cut out with {words['masker']} and erased with {words['inpainter']}."
    if (names["masker"], names["inpainter"]) == ("sam", "lama"):
        return text + " These are the paper's backends."
    return text + (
        " The paper used SAM masks and LaMa inpainting, so backgrounds (and masked pastes) differ from "
        "the paper's; numbers are comparable in trend, not pixel for pixel."
    )


def _score(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def validation_summary(summary: ConfigSummary) -> str:
    """The validation report's results in words: integrity, box re-detection and the scores."""
    report = summary.validation
    integrity = report.get("integrity") or {}
    rows = [["overall", "passed" if report.get("ok") else "FAILED"]]
    if integrity:
        rows.append(
            [
                "integrity",
                (
                    f"{'passed' if integrity.get('ok') else 'FAILED'}: {integrity.get('shards_checked', 0)} shards and "
                    f"{integrity.get('samples_checked', 0)} samples checked against the manifest and schema; "
                    f"{integrity.get('placements_compared', 0)} pasted boxes compared with their parts"
                ),
            ]
        )
    detection = report.get("detection")
    if detection:
        rows.append(
            [
                "box re-detection",
                (
                    f"Grounding DINO `{detection.get('detector')}`: mean IoU {_score(detection.get('mean_iou'))} over "
                    f"{detection.get('images', 0)} images (the paper reports 0.875); "
                    f"{len(detection.get('below_threshold') or [])} below IoU {detection.get('iou_threshold')}"
                ),
            ]
        )
    else:
        rows.append(["box re-detection", "not run for this release (`hsi validate --boxes`)"])
    scores = (report.get("scores") or {}).get("summary")
    if scores:
        rows.append(
            [
                "centre / size scores",
                (
                    f"class means {_score(scores.get('centre_class_mean'))} / {_score(scores.get('size_class_mean'))} "
                    "over "
                    f"{scores.get('images', 0)} source images (ImageNet val: 0.747 / 0.418)"
                ),
            ]
        )
    return table(["check", "result"], rows) + f"\n\nFull report: `data/{summary.name}/validation.json`."


def usage(
    default: str, configs: list[ConfigSummary], name: str = DATASET_NAME, parts: PartsSummary | None = None
) -> str:
    """The card's code, for this release under its folder's name `name`: every line runs as shown from
    the folder's parent (tests/cards/test_card_snippets.py runs them), for every config and split
    (the parts config's too)."""
    main = next(c for c in configs if c.name == default)
    q = json.dumps  # a Python string literal of any folder name
    split = main.splits[0] if main.splits else "test"
    shards = len(main.manifest["splits"][split]["filenames"]) if main.splits else 1
    each = "".join(f'one = load_dataset({q(name)}, "{c.name}", split="{s}")\n' for c in configs for s in c.splits)
    if parts is not None:
        each += "".join(f'parts = load_dataset({q(name)}, "{PARTS_CONFIG}", split="{s}")\n' for s in parts.splits)
    return "\n\n".join(
        [
            "With `datasets` (from the folder's parent directory, or a Hub repo id):",
            code_block(
                "from datasets import load_dataset\n\n"
                f"ds = load_dataset({q(name)})  # the default config, {default}: splits {', '.join(main.splits)}\n"
                "# one config and split (here every one this release has)\n"
                f"{each}"
                f'stream = load_dataset({q(name)}, split="{split}", streaming=True)\n'
                'sample = next(iter(stream))\nprint(sample["cls"], sample["json"]["group"], sample["json"]["size"])',
                "python",
            ),
            "Straight from the shards into PyTorch training with the toolkit's `hsi.stream` (shuffle buffer, "
            "workers and nodes, group metadata); `transform` turns the PIL image into a tensor, so batches "
            "collate. A shuffled stream repeats the same order every epoch unless `set_epoch` is called:",
            code_block(
                "import os\n\nimport torch\nfrom torchvision import transforms\n\nimport hsi\n\n"
                f'data = hsi.stream({q(name)}, config="{default}", split="{split}", shuffle_buffer=1000, '
                "transform=transforms.ToTensor())\n"
                "workers = min(8, os.cpu_count() or 1)  # decoding processes: one per core, up to 8\n"
                "loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=workers)\n"
                "for epoch in range(2):\n"
                "    data.set_epoch(epoch)  # a new shard and buffer order each epoch, the same on every node\n"
                "    for batch in loader:\n"
                '        pass  # train on batch["image"] and batch["label"]; batch["group"] names the group\n'
                'print(batch["image"].shape, batch["label"][:8], batch["group"][:8])',
                "python",
            ),
            "With WebDataset (each sample has `jpg`, `cls` and `json` members):",
            code_block(
                "import webdataset as wds\n\n"
                f"urls = {q(f'{name}/data/{default}/{split}-{{00000..{shards - 1:05d}}}.tar')}  # see _info.json\n"
                "# shardshuffle: True (or a buffer size) shuffles shards for training; say which, or webdataset warns\n"
                'ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls", "json")\n'
                'image, label, meta = next(iter(ds))\nprint(image.size, label, meta["group"])',
                "python",
            ),
            "Regenerating with new positions or sizes re-runs only the cheap compose stage on the parts"
            + (
                f" (this release ships them: `--parts {name}`, or `--parts hf://datasets/ORG/{name}@REVISION`):"
                if parts is not None
                else ":"
            ),
            code_block(
                f"hsi compose --parts {name if parts is not None else 'PARTS_DIR'} --variant SPEC.yaml --out OUT\n"
                "hsi validate OUT/CONFIG\n"
                f"hsi release --out {name} OUT/CONFIG ..." + (" --parts PARTS_DIR" if parts is not None else ""),
                "bash",
            ),
        ]
    )


PAPER_INTRO = (
    "ImageNet objects made small (56, 84 or 112 px on a 224 px canvas) and moved off-centre, on their own "
    "inpainted background (O) or on another class's (R). ImageNet-trained models collapse on small objects "
    "in the corner of a foreign background; this benchmark measures that, in the groups CeO (centre, own "
    "background), CoO (corner, own), CeR (centre, random) and CoR (corner, random). It is the benchmark of "
    "*Corner Cases: How Size and Position of Objects Challenge ImageNet-Trained Models* (TMLR 2025), "
    f"rebuilt reproducibly with the `{DATASET_NAME}` toolkit."
)


def _words(values) -> str:
    values = [str(v) for v in values]
    return ", ".join(values[:-1]) + f" and {values[-1]}" if len(values) > 1 else "".join(values)


def inherited_description(spec: dict) -> bool:
    """True when a custom spec still carries a shipped variant's description (overrides keep it)."""
    from builder.compose.spec import NAMED_VARIANTS, load_variant

    own = str(spec.get("description") or "").strip()
    shipped = {load_variant(n).description.strip() for n in NAMED_VARIANTS}
    return bool(own) and own in shipped and shipped_variant(spec) is None


def config_description(summary: ConfigSummary) -> str:
    """What the config holds, in words: the spec's own description when it is a shipped variant's, or
    one the user wrote; otherwise (a spec that kept its parent's description) from its fields."""
    spec = summary.manifest.get("spec") or {}
    own = str(spec.get("description") or "").strip()
    if own and not inherited_description(spec):
        return own
    fields = []
    if spec.get("sizes"):
        fields.append(
            f"objects at {_words(spec['sizes'])} px"
            + (f" ({spec['mode']})" if spec.get("mode") else "")
            + (f" on a {spec['canvas']} px canvas" if spec.get("canvas") else "")
        )
    if spec.get("positions"):
        fields.append(f"placed at {_words(spec['positions'])}")
    if spec.get("backgrounds"):
        fields.append(f"on {_words(spec['backgrounds'])} backgrounds")
    groups = summary.groups
    text = "A custom spec" + (": " + "; ".join(fields) if fields else "")
    return text + (f". Groups: {_words(groups)}." if groups else ".")


def classes_cell(summary: ConfigSummary) -> str:
    present = summary.num_classes
    labels = len(summary.class_names)
    if present is None:
        return f"unknown (the manifest has no per-class counts; {labels} labels)"
    return f"{present}" + (f" of {labels} labels" if present != labels else "")


def configs_table(configs: list[ConfigSummary], parts: PartsSummary | None) -> str:
    """The configs with their splits and counts; a column of their backgrounds' fill scores when a
    compose manifest carries them; the parts config last."""
    scored = {c.name: split_fill_scores(c.manifest) for c in configs}
    with_fills = any(scored.values())
    header = ["config", "default", "splits", "samples", "classes"] + (["background fill scores"] if with_fills else [])
    rows = []
    for c in configs:
        row = [
            c.name,
            "yes" if c.default else "",
            ", ".join(c.splits),
            sum(c.manifest["splits"][s]["num_samples"] for s in c.splits),
            classes_cell(c),
        ]
        if with_fills:
            row.append("; ".join(f"{s}: {fill_scores_cell(f)}" for s, f in scored[c.name].items()))
        rows.append(row)
    if parts is not None:
        row = [PARTS_CONFIG, "", ", ".join(parts.splits), parts.num_samples(), "the parts (see below)"]
        rows.append(row + ([""] if with_fills else []))
    return table(header, rows)


def background_fill_scores(summary: ConfigSummary) -> str | None:
    """The fill scores of a composed config's backgrounds, when its compose manifest carries them."""
    scored = split_fill_scores(summary.manifest)
    if not scored:
        return None
    blocks = [f"### Fill scores of the backgrounds\n\n{SCORES_MEANING}"]
    blocks += [f"**{split}**\n\n{fill_scores_table(scores)}" for split, scores in scored.items()]
    return "\n\n".join(blocks)


def more_information(name: str, parts: PartsSummary | None) -> str:
    """Where to go from here: measuring a model, checking the release, composing new positions."""
    lines = [
        f"- Measure a model on every group and size: `hsi eval {name} --model SPEC` (a timm or torchvision "
        f"name, or a model file; the `{DATASET_NAME}` toolkit's docs, *Evaluate*).",
        "- Check that a published version is what it records: `hsi verify ORG/NAME --version vX.Y.Z` (every shard's "
        "sha256, this card, `croissant.json`, `eval.yaml` and the streamed counts).",
        "- `croissant.json` describes the release in Croissant 1.1 with its Responsible-AI fields; `eval.yaml` "
        "registers each config and split as a Hub benchmark task.",
    ]
    if parts is not None:
        lines.append(
            f"- Compose new sizes and positions from the `{PARTS_CONFIG}` config, without ImageNet or a GPU: "
            "`hsi compose --parts hf://datasets/ORG/NAME@REVISION --sizes 40 --positions bottom-left --out OUT`."
        )
    return "\n".join(lines)


CHANGELOG_HEADING = "## Changelog\n\n"  # the card's last section: `hsi verify` compares it with _release.json


def changelog_markdown(changelog: list[ChangelogEntry]) -> str:
    """The card's changelog, below its heading: each version and its lines."""
    return (
        "\n".join(
            f"- **{e.version}**" + ("".join(f"\n  - {line}" for line in e.changes) if e.changes else "")
            for e in changelog
        )
        or "- first release"
    )


def toolkit_sentence(version: str) -> str:
    """The licence section's sentence naming the toolkit's version (`_release.json`'s `tool`)."""
    return f"The toolkit that built them ({DATASET_NAME} {version}) is open source."


def render_body(
    configs: list[ConfigSummary],
    changelog: list[ChangelogEntry],
    version: str | None,
    results: str | None = None,
    title: str | None = None,
    description: str | None = None,
    name: str = DATASET_NAME,
    parts: PartsSummary | None = None,
    signer: dict | None = None,
) -> str:
    default = next(c.name for c in configs if c.default)
    groups = sorted_groups({g for c in configs for g in c.groups})
    custom = (
        f"A custom build made with the `{DATASET_NAME}` toolkit, which rebuilds the benchmark of *Corner Cases: "
        "How Size and Position of Objects Challenge ImageNet-Trained Models* (TMLR 2025). It is not that "
        "benchmark: its sizes, positions or backgrounds differ (each config below says what it holds)"
        + (f"; its groups are {_words(groups)}." if groups else ".")
    )
    sections = [
        f"# {title or default_title(configs)}" + (f" ({version})" if version else ""),
        description or (PAPER_INTRO if is_paper_benchmark(configs) else custom),
        "## Dataset Details\n\n" + dataset_details(configs, parts),
        "## Uses\n\n" + USES,
        "## Dataset Structure\n\n" + configs_table(configs, parts),
        "Each sample holds `jpg` (the 224 px composite), `cls` (the label) and `json` (where and how the object "
        "was pasted: " + ", ".join(f"`{k}`" for k in COMPOSITE_FIELDS) + "; nulls where a field does not apply).",
    ]
    for c in configs:
        sections.append(f"## {c.name}\n\n{config_description(c)}\n\n### Groups, sizes and tiers\n\n{groups_table(c)}")
        fills = background_fill_scores(c)
        if fills:
            sections.append(fills)
        if c.previews:
            sections.append("### Previews\n\n" + "\n\n".join(f"![{p.rsplit('/', 1)[-1]}]({p})" for p in c.previews))
        scgs = scgs_section(c.manifest)  # configs written by hsi scgs (cards.scgs)
        if scgs:
            sections.append(scgs)
        sections.append("### How it was built\n\n" + provenance(c))
        sections.append("### Validation\n\n" + validation_summary(c))
    licence = (
        f"The images derive from ImageNet (ILSVRC2012) and carry [ImageNet's terms of access]({LICENSE_LINK}): "
        "non-commercial research and education only."
    )
    if parts is not None:
        sections.append(parts_section(parts, name, licence))
    if results:
        sections.append("## Results\n\n" + results)
    sections += [
        "## Usage\n\n" + usage(default, configs, name, parts),
        *creation_sections(configs, parts),
        f"## Licence\n\n{licence} {toolkit_sentence(__version__)}",
        "## Citation\n\n" + code_block(CITATION, "bibtex"),
        *closing_sections(configs, parts, more_information(name, parts)),
        *([signature_section(signer)] if signer else []),  # cards.signature
        CHANGELOG_HEADING + changelog_markdown(changelog),
    ]
    return "\n\n".join(sections) + "\n"


def render_card(
    configs: list[ConfigSummary],
    changelog: list[ChangelogEntry] = (),
    version: str | None = None,
    results: str | None = None,
    title: str | None = None,
    description: str | None = None,
    name: str = DATASET_NAME,
    parts: PartsSummary | None = None,
    signer: dict | None = None,
) -> str:
    """The full README.md text, checked with datasets' parsers; raises CardError if it would not load.
    `results`: the rendered Results section (cards.results), if any. `title`/`description` replace
    the heading and introduction, which otherwise say whether this is the paper's benchmark. `name`:
    the release folder's name, which the usage snippets load. `parts`: the release's parts config, if any.
    `signer`: the release record's signer (cards.signature), named in a Signature section."""
    from huggingface_hub import DatasetCard

    body = render_body(configs, list(changelog), version, results, title, description, name, parts, signer)
    text = f"---\n{dump_metadata(card_metadata(configs, title, parts))}---\n\n{body}"
    check_card(text, configs, parts)
    DatasetCard(text)  # huggingface_hub's own parse of the header, as the Hub does on upload
    return text
