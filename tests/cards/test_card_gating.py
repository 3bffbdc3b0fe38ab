"""The card gates the files behind ImageNet's terms and carries the Hub template's datasheet sections
(issue 32); `hsi verify` reads its header through huggingface_hub's DatasetCard / DatasetCardData,
offline, and refuses a card that lost its gating."""

from __future__ import annotations

import json

import pytest
import yaml
from release_factory import make_composed_dataset, release_with_parts

from builder.core.hashing import sha256_file
from cards.metadata import GATED_FIELDS, GATED_PROMPT, gating_problems, hub_card_problems
from cards.release import build_release
from cards.summary import LICENSE_LINK
from hsi.cli import main

NAME = "hard-spurious-imagenet"


def header(text: str) -> dict:
    return yaml.safe_load(text.split("---\n", 2)[1])


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    root = tmp_path_factory.mktemp("gating")
    dataset = make_composed_dataset(root / "composed", splits={"test": 8}, shard_size=4)
    return build_release(root / "release" / NAME, [dataset], version="v1.0.0")


def test_the_header_gates_on_imagenets_terms_and_names_its_source(plain):
    text = (plain / "README.md").read_text()
    meta = header(text)
    assert meta["extra_gated_prompt"] == GATED_PROMPT
    assert LICENSE_LINK in GATED_PROMPT and "non-commercial research and education only" in GATED_PROMPT
    assert meta["extra_gated_fields"] == GATED_FIELDS and list(GATED_FIELDS.values()) == ["checkbox"]
    assert meta["source_datasets"] == ["extended|imagenet-1k"]
    # huggingface_hub reads the header as written, and gives it back unchanged
    from huggingface_hub import DatasetCard, DatasetCardData

    assert DatasetCard(text).data.to_dict() == meta == DatasetCardData(**meta).to_dict()
    assert hub_card_problems(text, meta) == []


def template_headings() -> list[str]:
    """The section headings of huggingface_hub's own dataset card template (the file the Hub's "Create
    Dataset Card" starts from), without their "[optional]" marks and the templated title."""
    from importlib import resources

    text = resources.files("huggingface_hub").joinpath("templates/datasetcard_template.md").read_text("utf-8")
    body = text.split("---\n", 2)[2]
    headings = [line.replace(" [optional]", "") for line in body.splitlines() if line.startswith("##")]
    assert len(headings) == 23 and "## Dataset Card Contact" in headings  # the template as published
    return headings


def test_every_section_of_the_hubs_template_is_there_in_its_order(plain):
    text = (plain / "README.md").read_text()
    headings = template_headings()
    missing = [h for h in headings if f"\n{h}\n" not in text]
    assert missing == []
    positions = [text.index(f"\n{h}\n") for h in headings]
    assert positions == sorted(positions)
    # and each section has a body of its own before the next heading
    for heading in headings:
        start = text.index(f"\n{heading}\n") + len(heading) + 2
        assert text[start:].lstrip("\n")[:1] not in ("", "#") or heading in (
            "## Dataset Details",
            "## Uses",
            "## Dataset Creation",
            "### Source Data",
            "### Annotations",
        ), heading


def test_the_datasheet_sections_say_what_is_true_and_what_is_unknown(plain):
    text = (plain / "README.md").read_text()
    details = text[text.index("## Dataset Details") : text.index("## Uses")]
    assert "- **Size:** hard-spurious-imagenet: 8 composites" in details
    assert "**Curated by:** not recorded" in details and "arXiv:2505.03569" in details
    assert "the person who built and published this release is not recorded" in text
    assert "Splits built: test." in text
    recommendations = text[text.index("### Recommendations") : text.index("## Licence")]
    assert "a centre crop of 0.875 removes a quarter of a 56 px corner object" in recommendations
    assert "**CeO, CoO, CeR, CoR**" in text and "Hard (CeR and CoR at 56 and\n  84 px)" in text
    assert "**The boxes are ImageNet's**" in text and "**The groups are ours**" in text
    assert "show people" in text and "it is unknown" in text
    assert "Any commercial use" in text
    # a manifest without fill scores: the card says their quality is unknown
    bias = text[text.index("## Bias, Risks, and Limitations") : text.index("### Recommendations")]
    assert f"- {NAME}: its manifest has no fill-quality record, so the quality of its fills is unknown" in bias


def test_the_bias_section_summarises_the_fill_quality(tmp_path):
    built = release_with_parts(tmp_path)
    text = (built["release"] / "README.md").read_text()
    bias = text[text.index("## Bias, Risks, and Limitations") : text.index("### Recommendations")]
    manifest = json.loads((built["release"] / f"data/{NAME}/_info.json").read_text())
    fills = manifest["splits"]["val"]["fill_scores"]
    median = fills["score"]["median"]
    assert f"- {NAME}/val: median score {median:.3f}, " in bias
    assert f"under {fills['poor_score']}" in bias
    assert "- parts: the fill scores of every part are in its section above" in bias
    assert "- parts: 0 of 4 parts have no background of their own" in bias
    assert "- parts: 0 of 4 parts (0.0%) filled by a fallback inpainter" in bias
    assert 'its part\n  has no background of its own (`background_status` "none"' in bias  # the limitation


def test_the_card_counts_parts_with_no_background_from_the_parts_or_the_validation():
    from cards.datasheet import no_background_lines
    from cards.parts_card import PartsSummary
    from cards.summary import ConfigSummary

    parts = PartsSummary({"splits": {"val": {"num_samples": 9}}, "errors": {"by_reason": {"no-background": 2}}})
    assert no_background_lines([], parts) == ["- parts: 2 of 9 parts have no background of their own"]
    validated = {"fill_quality": {"splits": {"val": {"parts": 7, "no_background": 3}, "test": {"parts": 5}}}}
    config = ConfigSummary(NAME, {"splits": {}}, validated)
    assert no_background_lines([config], None) == [f"- {NAME}/val: 3 of its 7 parts have no background of their own"]
    assert no_background_lines([ConfigSummary(NAME, {"splits": {}}, {})], None) == []



def test_the_card_reports_the_fallback_share_and_the_fill_scores_per_size_score_bin():
    from cards.datasheet import fallback_lines
    from cards.parts_card import PartsSummary
    from cards.summary import ConfigSummary

    parts = PartsSummary({"splits": {"val": {"num_samples": 8}}, "errors": {"by_reason": {"inpaint-fallback": 2}}})
    assert fallback_lines([], parts) == [
        "- parts: 2 of 8 parts (25.0%) filled by a fallback inpainter (Telea, where PatchMatch had under 1% of "
        "the photo to copy from)"
    ]
    bins = [
        {"bin": "0.00-0.10", "parts": 3, "fallback_share": 0.0, "score_median": 0.61},
        {"bin": "0.75+", "parts": 2, "fallback_share": 0.5, "score_median": None},
    ]
    validated = {"fill_quality": {"splits": {"val": {"fallback_share": 0.2, "by_size_score": bins}}}}
    assert fallback_lines([ConfigSummary(NAME, {"splits": {}}, validated)], None) == [
        f"- {NAME}/val: 20.0% of its parts filled by a fallback inpainter; by the size score of their photos: "
        "0.00-0.10: 3 parts, fallback 0%, median score 0.61; 0.75+: 2 parts, fallback 50%, median score n/a"
    ]


def reseal_card(folder, text: str) -> None:
    (folder / "README.md").write_text(text)
    meta_path = folder / "_release.json"
    meta = json.loads(meta_path.read_text())
    meta["files"]["README.md"] = sha256_file(folder / "README.md")
    meta_path.write_text(json.dumps(meta, sort_keys=True, indent=2))


def test_verify_refuses_a_card_without_its_gating(tmp_path, capsys):
    dataset = make_composed_dataset(tmp_path / "composed", splits={"test": 4})
    folder = build_release(tmp_path / "release" / NAME, [dataset], version="v1.0.0")
    text = (folder / "README.md").read_text()
    kept = [line for line in text.split("\n") if not line.startswith(("extra_gated", "  I agree", "- extended|"))]
    reseal_card(folder, "\n".join(kept).replace("source_datasets:\n", ""))
    assert main(["verify", str(folder)]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAILED:")]
    assert failed == [
        "FAILED: README.md: extra_gated_prompt does not quote ImageNet's terms of access and their link "
        + LICENSE_LINK,
        "FAILED: README.md: extra_gated_fields is not a mapping of labels to field types",
        "FAILED: README.md: source_datasets does not name ImageNet",
    ]


@pytest.mark.parametrize(
    "change, line",
    [
        ({"extra_gated_fields": {"Name": "text"}}, "extra_gated_fields has no checkbox"),
        ({"extra_gated_fields": {"Agree": "radio", "ok": "checkbox"}}, "'Agree' has type 'radio', not one"),
        ({"extra_gated_prompt": "please be nice"}, "extra_gated_prompt does not quote"),
        ({"source_datasets": ["original"]}, "source_datasets does not name ImageNet"),
    ],
)
def test_each_gating_fault_is_its_own_line(change, line):
    meta = {
        "extra_gated_prompt": GATED_PROMPT,
        "extra_gated_fields": dict(GATED_FIELDS),
        "source_datasets": ["extended|imagenet-1k"],
    }
    problems = gating_problems({**meta, **change})
    assert len(problems) == 1 and line in problems[0]
    assert gating_problems(meta) == []
    select = {"Country": "country", "Use": {"type": "select", "options": ["research", "education"]}}
    assert gating_problems({**meta, "extra_gated_fields": {**GATED_FIELDS, **select}}) == []
