"""`hsi report` on a zero-shot model and a vision-language model (issue 34): the zero-shot page shows
one table per prompt set and the paired differences from the reference, as eval.json has them; the
VLM's page shows the shares of unmapped answers per group and its gallery names no class for an
answer that named none; a zero-shot section of the wrong type is refused in one line."""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from site_factory import report, shared_evaluation, thumbnails
from tiny_clip import save_tiny_openclip, tiny_openclip_spec

from hsi.cli import main

pytest.importorskip("open_clip")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The paper's set (shared with the site tests), the tiny CLIP over its three classes (three
    prompt sets), and answers in words for it: "a goldfish" and "goldfishes" (unmapped) in turn."""
    import hsi

    evaluation = shared_evaluation(tmp_path_factory)
    root = tmp_path_factory.mktemp("site-zero-shot")
    classes = root / "classes.txt"
    wnids = sorted(hsi.open(evaluation.dataset, split="val", announce=lambda _: None).metadata["wnid"].unique())
    classes.write_text("\n".join(wnids) + "\n")
    spec = tiny_openclip_spec(save_tiny_openclip(root / "tiny" / "tiny-clip.safetensors"))
    flags = ["--classes", str(classes), "--split", "val", "--workers", "0", "--bootstrap", "20", "--no-progress"]
    assert main(["eval", str(evaluation.dataset), "--model", spec, "--out", str(root / "zero-shot"), *flags]) == 0
    said = iter(["a goldfish", "goldfishes"] * 1000)
    answers = hsi.evaluate(
        lambda batch: [next(said) for _ in batch],
        evaluation.dataset,
        outputs="text",
        split="val",
        workers=0,
        progress=False,
        announce=lambda _: None,
    )
    answers.save(root / "vlm", "vlm")
    out = root / "site"
    assert report(root / "zero-shot", root / "vlm", out=out, data=evaluation.dataset) == 0
    (folder,) = (root / "zero-shot").glob("*/eval.json")
    return {"root": root, "site": out, "zero_shot": folder.parent, "vlm": root / "vlm" / "vlm"}


class Sections(HTMLParser):
    """Each <section>'s id and its text, and every table's rows as text cells."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: dict[str, str] = {}
        self.rows: dict[str, list[list[str]]] = {}
        self.section: str | None = None
        self.row: list[str] | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.section = dict(attrs).get("id")
            self.text[self.section] = ""
            self.rows[self.section] = []
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.row is not None and self.cell is not None:
            self.row.append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tr" and self.row is not None and self.section:
            self.rows[self.section].append(self.row)
            self.row = None

    def handle_data(self, data):
        if self.section:
            self.text[self.section] += data
        if self.cell is not None:
            self.cell.append(data)


def page_of(site: Path, folder: str) -> Sections:
    (page,) = site.glob(f"models/*-{folder}/index.html")
    sections = Sections()
    sections.feed(page.read_text("utf-8"))
    return sections


def test_the_zero_shot_page_shows_each_prompt_set_and_the_paired_differences(runs):
    report_json = json.loads((runs["zero_shot"] / "eval.json").read_text())
    page = page_of(runs["site"], runs["zero_shot"].name)
    text, rows = page.text["prompt-sets"], page.rows["prompt-sets"]
    assert "Label space: 3 classes (the 3 classes given with --classes)" in text
    assert "CLIP's curated ImageNet class names" in text
    summary = {row[0]: row[1] for row in rows if row and row[0] in ("openai", "simple", "no-scale")}
    assert summary == {"openai": "80", "simple": "7", "no-scale": "72"}
    for comparison in report_json["paired_differences"]:
        assert f"{comparison['set']} minus {comparison['reference']}: top-1, paired by sample" in text
        overall = comparison["overall"]
        shown = [row for row in rows if row[0] == "all" and row[1] == f"{overall['set_top1']:.3f}"]
        assert shown and shown[0][3].startswith(f"{overall['difference']['value']:.3f}")
    assert "a photo of a small {}." in text and "names the object's size" in text  # what no-scale leaves out
    assert "prompt-sets" in page.text and "answers" not in page.text


def test_the_vlm_page_shows_unmapped_shares_and_its_gallery_names_no_class_for_them(runs):
    report_json = json.loads((runs["vlm"] / "eval.json").read_text())
    page = page_of(runs["site"], "vlm")
    rows = page.rows["answers"]
    overall = report_json["answers"]["overall"]
    assert [
        "all",
        str(overall["answers"]),
        str(overall["unmapped"]),
        f"{overall['unmapped_share']:.3f}",
        "0",
        "0.000",
    ] in rows
    assert (
        'Each image was asked: "What is the main object in this image? Answer with its name only."'
        in page.text["answers"]
    )
    (html,) = runs["site"].glob("models/*-vlm/index.html")
    labels = {thumb["labels"]["predicted"]["name"] for thumb in thumbnails(html)}
    assert labels == {"goldfish", "no class"}  # never the class at index -1
    text = html.read_text("utf-8")
    assert "predicted (mapped: a goldfish)" in text and "predicted (unmapped: goldfishes)" in text


def test_a_zero_shot_section_of_the_wrong_type_is_refused_in_one_line(runs, tmp_path, capsys):
    copy = tmp_path / "evals"
    shutil.copytree(runs["root"] / "zero-shot", copy)
    (folder,) = copy.glob("*/eval.json")
    report_json = json.loads(folder.read_text())
    report_json["zero_shot"]["sets"]["simple"]["templates"] = "seven"
    folder.write_text(json.dumps(report_json))
    assert report(copy, out=tmp_path / "site") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "zero_shot.sets.simple.templates: expected an integer" in err, err
    assert not (tmp_path / "site" / "index.html").exists()
