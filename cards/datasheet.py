"""The card's datasheet sections, in the order and under the headings of the Hugging Face Hub's
dataset card template (huggingface_hub's `templates/datasetcard_template.md`, which follows
Gebru et al., "Datasheets for Datasets", 2021): Dataset Details, Uses, Dataset Structure, Dataset
Creation (Curation Rationale, Source Data, Annotations, Personal and Sensitive Information), Bias,
Risks, and Limitations (Recommendations), Citation, Glossary, More Information, Dataset Card
Authors and Dataset Card Contact.

Every statement is true of any release this toolkit builds, or is computed from its manifests (the
counts, the backends, the fill scores); what a release does not record (who built it, which ImageNet
copy it started from) is said to be unknown, never guessed.
"""

from __future__ import annotations

from builder import __version__
from cards.parts_card import PARTS_CONFIG, PartsSummary, fill_scores_cell
from cards.summary import DATASET_NAME, LICENSE_LINK, ConfigSummary, split_fill_scores

PAPER_LINKS = (
    "*Corner Cases: How Size and Position of Objects Challenge ImageNet-Trained Models*, Mishal Fatima, "
    "Steffen Jung, Margret Keuper, TMLR 2025: [OpenReview](https://openreview.net/forum?id=Yqf2BhqfyZ), "
    "[arXiv:2505.03569](https://arxiv.org/abs/2505.03569)"
)

USES = """### Direct Use

Measuring how the accuracy of ImageNet classifiers changes with an object's size, its position (centre
or corner) and its background (its own, or another class's), group by group and size by size; comparing
models, training methods and augmentations on those groups; studying spurious reliance on backgrounds.

### Out-of-Scope Use

- Any commercial use: ImageNet's terms of access allow non-commercial research and education only.
- Training on a config and reporting results on the same config: the groups are a test of
  generalisation, and a model trained on them no longer measures it.
- Conclusions about how often objects are small or off-centre in real photographs: the sizes and
  positions are set by construction, not observed.
- Recognising, identifying or profiling the people in the images."""

CURATION = """The benchmark isolates what ImageNet confounds: in its photos the object is usually large and
central, and its background is the one it was photographed on. Cutting each object out, inpainting the
hole and pasting the object back at a chosen size and position, on its own or another class's background,
varies size, position and background one at a time, so a model's drop can be attributed to each. The
source images are ImageNet's, so that models trained on ImageNet are tested on their own classes."""

PRODUCERS = """The photographs were collected from the web (image search engines and photo-sharing sites)
by the ImageNet project (Deng et al., CVPR 2009; Russakovsky et al., IJCV 2015), which does not record
their photographers. This release adds no photograph of its own: every pixel of a composite comes from
an ImageNet photo, resized, or from the inpainter's fill of a hole in one."""

ANNOTATION_PROCESS = """- **The boxes are ImageNet's**: the ground-truth object boxes distributed with ILSVRC2012. The
  object cut out is one of them (the compose spec says which; each sample's `json` records the pasted
  box), and every box is erased from the background. Their accuracy is ImageNet's; this release adds
  no human annotation.
- **The labels are ImageNet's**: an object's class is that of the image it was cut from.
- **The groups are ours**: CeO, CoO, CeR, CoR, the sizes and the tiers are assigned by construction
  when composing (where the object was pasted, how large, on whose background), not by annotators; each
  sample's `json` records them."""

ANNOTATORS = """ImageNet's labels and boxes were made by crowd workers (Amazon Mechanical Turk) for the
ImageNet project. No person annotated anything for this release: its groups, sizes and tiers are
written by the compose code."""

PERSONAL = """ImageNet's photographs were collected from the web and show people, in many classes
(as the object's surroundings or as the object itself), some of them identifiable; nothing in ImageNet
or in this release records their consent. This toolkit neither blurs faces nor filters out images with
people, and whether a build started from the original ILSVRC2012 images or from ImageNet's
face-blurred release is not recorded in the manifests, so for this release it is unknown. The samples
carry no other personal information (their `json` holds ImageNet image ids, class names and
geometry)."""

LIMITATIONS = """- The objects are cut out by ImageNet's ground-truth boxes and pasted back; box crops carry some
  of their own background, and the inpainted holes can leave visible traces.
- Labels are ImageNet's; an object's class is that of the image it was cut from.
- The groups measure size and position jointly with background origin (O: own, R: another class's);
  a model's drop on CoR mixes both effects. Compare groups, not single numbers.
- Where an object's boxes cover its whole photo, nothing of the photo is left to inpaint from: its part
  has no background of its own (`background_status` "none"; the count is below). By default compose
  gives no other image that background (no R composite sits on it), while the object's own O
  composites are kept on it; `--paper-exact` uses every background as the paper did. Each sample's
  `json` says which it sits on (`background_status`: "own", "none", null on gray and noise), so such
  composites can be left out without the parts.
- Generated from ImageNet (ILSVRC2012): use is bound by ImageNet's terms of access (non-commercial
  research and education)."""

# the cue a box cut-out brings along (issue 44): named beside the other limitations
BOX_CUTOUT_CUE = """- Cut out by its box, every pasted object carries a rectangle of its own photo around it (the box
  crop of `--paste box`, the paper's; and any paste with the box masker, whose mask is the box). On
  a foreign background (CeR, CoR) that rectangle is a cue of its own, which a model may use or be
  confused by. Parts extracted with `--masker sam` and composed with `--paste mask` paste the
  object's own pixels only."""

RECOMMENDATIONS = """- Report every group and size with its interval, not one average (`hsi eval` writes them, with
  bootstrap intervals over source images).
- Feed the 224 px canvas as it is: a centre crop of 0.875 removes a quarter of a 56 px corner object.
  Declare the preprocessing you used when you submit predictions.
- Compare with the same model on the clean photos and on the backgrounds alone (`hsi eval --clean`,
  `--parts`), so that a drop can be told from a model that was never right on the photo.
- Before reading much into a background effect, check how well the backgrounds were inpainted
  (above): a poor fill can leave a trace of the erased object.
- Respect ImageNet's terms of access: non-commercial research and education only."""

GLOSSARY = {
    "groups": """- **CeO, CoO, CeR, CoR**: the paper's groups. Ce: the object pasted at the centre; Co: pasted
  flush in a corner. O: on its own photo's inpainted background; R: on the inpainted background of a photo of
  another class.""",
    "tier": """- **Tier**: the paper's difficulty grade of a group and size on the 224 px canvas: Easy (CeO and CoO at
  84 and 112 px), Medium (CeO and CoO at 56 px; CeR and CoR at 112 px), Hard (CeR and CoR at 56 and
  84 px).""",
    "part": """- **Part**: what extraction keeps of one ImageNet photo: the object's crop and mask, the inpainted
  background at full resolution and its boxes; composites are made from parts alone.""",
    "fill score": """- **Fill score**: a no-reference measure of an inpainted background, in [0, 1]; 1 where these
  measures cannot tell the fill from the photo around it, 0 where the whole background is fill.""",
}

AUTHORS = f"""Written by the `{DATASET_NAME}` toolkit (`hsi release`, version {__version__}) from the release's
manifests and validation reports; the person who built and published this release is not recorded
in it. The benchmark's design is the paper's authors'."""

CONTACT = """Questions about this release: the repository's Community tab (discussions) on the Hugging Face Hub.
Questions about the benchmark's design: the paper's authors (see Citation)."""


def dataset_details(configs: list[ConfigSummary], parts: PartsSummary | None) -> str:
    """Dataset Details: what the release holds, in numbers from its manifests, and its sources."""
    counts = [f"{c.name}: {sum(c.manifest['splits'][s]['num_samples'] for s in c.splits)} composites" for c in configs]
    if parts is not None:
        counts.append(f"{PARTS_CONFIG}: {parts.num_samples()} parts")
    return "\n\n".join(
        [
            "### Dataset Description",
            "\n".join(
                [
                    "- **Curated by:** not recorded (whoever ran `hsi release`); the benchmark's design is the "
                    "paper's (see Dataset Sources)",
                    f"- **Size:** {'; '.join(counts)}",
                    f"- **License:** ImageNet's [terms of access]({LICENSE_LINK}) (non-commercial research and "
                    "education only)",
                ]
            ),
            "### Dataset Sources",
            "\n".join(
                [
                    f"- **Paper:** {PAPER_LINKS}",
                    "- **Source data:** [ImageNet (ILSVRC2012)](https://image-net.org/), its photos and "
                    "ground-truth boxes",
                    f"- **Built with:** the `{DATASET_NAME}` toolkit, version {__version__}",
                ]
            ),
        ]
    )


def source_data(configs: list[ConfigSummary], parts: PartsSummary | None) -> str:
    """Source Data: how the samples were made (each config's section has the details) and by whom the
    photos were taken."""
    splits = sorted({s for c in configs for s in c.splits} | set(parts.splits if parts is not None else ()))
    processing = (
        "Each ImageNet photo is extracted once: every ground-truth box is erased and the hole inpainted, and "
        "the object is cropped by its box. Composites are then made from those parts alone: the object is "
        "resized and pasted at each size and position of the config's spec, on its own or another class's "
        f"inpainted background. Splits built: {', '.join(splits)}. Each config's *How it was built* section "
        "records its masker, inpainter, checkpoints with their sha256, spec, seed and fingerprints, so the "
        "composites can be rebuilt byte for byte."
    )
    return (
        f"### Source Data\n\n#### Data Collection and Processing\n\n{processing}\n\n"
        f"#### Who are the source data producers?\n\n{PRODUCERS}"
    )


def fill_quality_summary(configs: list[ConfigSummary], parts: PartsSummary | None) -> str:
    """The backgrounds' fill quality in a few lines: each split's median score and share of poor
    fills, from the manifests; unknown where a manifest has no fill-quality record."""
    lines = []
    for c in configs:
        scored = split_fill_scores(c.manifest)
        if scored:
            lines += [f"- {c.name}/{split}: {fill_scores_cell(f)}" for split, f in scored.items()]
        else:
            lines.append(f"- {c.name}: its manifest has no fill-quality record, so the quality of its fills is unknown")
    if parts is not None:
        lines.append(f"- {PARTS_CONFIG}: the fill scores of every part are in its section above")
    lines += no_background_lines(configs, parts)
    lines += fallback_lines(configs, parts)
    return (
        "The backgrounds are inpainted where the objects were, and a poor fill can leave a trace of the "
        "object that a model may use. Fill quality by split (the fill `score`, in [0, 1], 1 where these "
        "no-reference measures cannot tell the fill from the photo; the share of fills under the poor score):\n\n"
        + "\n".join(lines)
    )


def no_background_lines(configs: list[ConfigSummary], parts: PartsSummary | None) -> list[str]:
    """How many parts have no background of their own: from the parts manifest's issue counts, else
    from each config's validation of its parts; nothing where neither records it."""
    if parts is not None:
        by_reason = (parts.manifest.get("errors") or {}).get("by_reason") or {}
        count = by_reason.get("no-background", 0)
        return [f"- {PARTS_CONFIG}: {count} of {parts.num_samples()} parts have no background of their own"]
    lines = []
    for c in configs:
        splits = ((c.validation or {}).get("fill_quality") or {}).get("splits") or {}
        counted = {split: f for split, f in sorted(splits.items()) if isinstance(f.get("no_background"), int)}
        lines += [
            f"- {c.name}/{split}: {f['no_background']} of its {f['parts']} parts have no background of their own"
            for split, f in counted.items()
        ]
    return lines


def fallback_lines(configs: list[ConfigSummary], parts: PartsSummary | None) -> list[str]:
    """The share of parts filled by a fallback inpainter (PatchMatch's Telea), from the parts manifest,
    and per config split (from its validation of its parts) that share and the median fill score per
    bin of the paper's size score: large objects leave little of the photo to fill from."""
    lines = []
    if parts is not None and parts.num_samples():
        by_reason = (parts.manifest.get("errors") or {}).get("by_reason") or {}
        count = by_reason.get("inpaint-fallback", 0)
        lines.append(
            f"- {PARTS_CONFIG}: {count} of {parts.num_samples()} parts ({count / parts.num_samples():.1%}) "
            "filled by a fallback inpainter (Telea, where PatchMatch had under 1% of the photo to copy from)"
        )
    for c in configs:
        splits = ((c.validation or {}).get("fill_quality") or {}).get("splits") or {}
        for split, f in sorted(splits.items()):
            if not isinstance(f.get("fallback_share"), (int, float)) or not isinstance(f.get("by_size_score"), list):
                continue
            bins = "; ".join(
                f"{b['bin']}: {b['parts']} parts, fallback {b['fallback_share']:.0%}, median score "
                + ("n/a" if b.get("score_median") is None else f"{b['score_median']:.2f}")
                for b in f["by_size_score"]
                if isinstance(b, dict)
            )
            lines.append(
                f"- {c.name}/{split}: {f['fallback_share']:.1%} of its parts filled by a fallback inpainter; "
                f"by the size score of their photos: {bins}"
            )
    return lines


def creation_sections(configs: list[ConfigSummary], parts: PartsSummary | None) -> list[str]:
    """Dataset Creation and Bias, Risks, and Limitations, each a card section."""
    return [
        "## Dataset Creation\n\n### Curation Rationale\n\n" + CURATION,
        source_data(configs, parts),
        "### Annotations\n\n#### Annotation process\n\n" + ANNOTATION_PROCESS,
        "#### Who are the annotators?\n\n" + ANNOTATORS,
        "#### Personal and Sensitive Information\n\n" + PERSONAL,
        "## Bias, Risks, and Limitations\n\n"
        + LIMITATIONS
        + "\n"
        + BOX_CUTOUT_CUE
        + "\n\n"
        + fill_quality_summary(configs, parts),
        "### Recommendations\n\n" + RECOMMENDATIONS,
    ]


def glossary(configs: list[ConfigSummary], parts: PartsSummary | None) -> str:
    """The terms this card uses: parts and fill scores only where the release has them."""
    terms = ["groups", "tier"]
    if parts is not None:
        terms.append("part")
    if parts is not None or any(split_fill_scores(c.manifest) for c in configs):
        terms.append("fill score")
    return "\n".join(GLOSSARY[term] for term in terms)


def closing_sections(configs: list[ConfigSummary], parts: PartsSummary | None, more_information: str) -> list[str]:
    """Glossary, More Information, Dataset Card Authors and Dataset Card Contact."""
    return [
        "## Glossary\n\n" + glossary(configs, parts),
        "## More Information\n\n" + more_information,
        "## Dataset Card Authors\n\n" + AUTHORS,
        "## Dataset Card Contact\n\n" + CONTACT,
    ]
