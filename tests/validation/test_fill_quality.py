"""`hsi validate` on parts: the distribution of the fill scores per split, the manifest's summary
checked against the shards, and previews/worst_fills.png with its listing in the report."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from parts_factory import compose_args, fake_images, rewrite_fill_scores, write_parts
from PIL import Image

from builder.core.classes import class_of
from builder.core.hashing import sha256_file
from builder.core.shard_read import iter_shard
from hsi.cli import main

WNIDS = ["n01443537", "n02437312"]


def report_of(folder):
    return json.loads((folder / "validation.json").read_text())


def test_planted_flat_fills_are_the_worst_and_drawn_worst_first(tmp_path, capsys):
    images = fake_images(WNIDS, per_class=3, textured=True)
    flat = {images[1].source_id, images[4].source_id}  # a slab of one colour on textured ground
    images = [replace(im, fill="flat") if im.source_id in flat else im for im in images]
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=4)
    out = tmp_path / "report"
    assert main(["validate", "--parts", str(parts), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    fill = report_of(out)["fill_quality"]
    worst = fill["worst"]
    assert {part["key"] for part in worst[:2]} == flat  # the slabs, before every textured fill
    assert [part["score"] for part in worst] == sorted(part["score"] for part in worst)
    assert all(part["texture"] < 0.3 for part in worst[:2]) and all(part["texture"] > 0.3 for part in worst[2:])
    assert worst[0]["class_name"] == class_of(next(im.wnid for im in images if im.source_id == worst[0]["key"])).name
    assert fill["splits"]["val"]["share_texture_low"] == pytest.approx(2 / 6, abs=1e-4)
    assert fill["sheet"] == "previews/worst_fills.png" and "previews/worst_fills.png" in report_of(out)["previews"]
    sheet = Image.open(out / "previews" / "worst_fills.png")
    assert sheet.width >= 4 * 224 and sheet.height > 2 * 224  # 6 parts: two rows of 224 px canvases
    # the fill's border is drawn in magenta on the worst part's canvas (first tile)
    pixels = np.asarray(sheet.convert("RGB"))
    assert ((pixels[:, :236] == (255, 0, 255)).all(axis=2)).sum() > 100
    md = (out / "validation.md").read_text()
    assert "## Fill quality of the backgrounds" in md and md.index(worst[0]["key"]) < md.index(worst[2]["key"])
    assert f"worst fills: previews/worst_fills.png: 6 parts, worst first: {worst[0]['key']}" in printed
    again = tmp_path / "again"
    assert main(["validate", "--parts", str(parts), "--out", str(again)]) == 0
    assert sha256_file(again / "previews" / "worst_fills.png") == sha256_file(out / "previews" / "worst_fills.png")


def planted(scores):
    return {name: value for name, value in zip(("texture", "seam", "step", "score"), scores)}


def test_distribution_matches_the_figures_computed_by_hand(tmp_path, capsys):
    images = fake_images(WNIDS, per_class=3)
    keys = [im.source_id for im in images]
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=2)
    rewrite_fill_scores(
        parts,
        {
            keys[0]: planted((1.0, 1.0, 0.0, 0.8)),
            keys[1]: planted((0.1, 2.0, 0.5, 0.2)),
            keys[2]: planted((0.5, 1.6, 0.1, 0.4)),
            keys[3]: planted((0.25, 1.2, 0.2, 0.2)),  # ties keys[1] on score: the source id decides
            keys[4]: None,  # nothing filled
            keys[5]: None,
        },
    )
    out = tmp_path / "report"
    assert main(["validate", "--parts", str(parts), "--out", str(out)]) == 0
    figures = report_of(out)["fill_quality"]["splits"]["val"]
    assert (figures["parts"], figures["scored"], figures["unscored"], figures["invalid"]) == (6, 4, 2, 0)
    # numpy's linear percentiles of four values: p10 at rank 0.3, median at 1.5, p90 at 2.7
    assert figures["score"] == {"median": 0.3, "p10": 0.2, "p90": 0.68}  # of 0.2, 0.2, 0.4, 0.8
    assert figures["texture"] == {"median": 0.375, "p10": 0.145, "p90": 0.85}  # of 0.1, 0.25, 0.5, 1.0
    assert figures["seam"] == {"median": 1.4, "p10": 1.06, "p90": 1.88}  # of 1.0, 1.2, 1.6, 2.0
    assert figures["step"] == {"median": 0.15, "p10": 0.03, "p90": 0.41}  # of 0.0, 0.1, 0.2, 0.5
    assert figures["share_texture_low"] == 0.5  # 0.1 and 0.25 under 0.3
    assert figures["share_seam_high"] == 0.5  # 1.6 and 2.0 over 1.5
    assert figures["share_poor_score"] == 0.75  # all but 0.8 under 0.5
    worst = [part["key"] for part in report_of(out)["fill_quality"]["worst"]]
    assert worst == [keys[1], keys[3], keys[2], keys[0]]  # the unscored parts are no candidates
    assert report_of(out)["fill_quality"]["manifest_summary"]["val"] == {
        "recorded": True,
        "agrees": True,
        "differences": [],
    }
    printed = capsys.readouterr().out
    assert "fill scores (val): 4 scored, 2 unscored; median [p10, p90]: texture 0.375 [0.145, 0.850]" in printed
    assert "texture < 0.3: 50.0%, seam > 1.5: 50.0%, score < 0.5: 75.0%; manifest summary agrees" in printed
    md = (out / "validation.md").read_text()
    assert "| val | 6 | 4 | 2 | 0 | 0 | 0 (0.0%) | 50.0% | 50.0% | 75.0% | agrees |" in md
    assert "| val | score | 0.300 | 0.200 | 0.680 |" in md


def test_a_manifest_summary_that_disagrees_with_the_shards_is_a_failure(tmp_path, capsys):
    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(WNIDS, per_class=2, textured=True)}, shard_size=2)
    info = json.loads((parts / "_info.json").read_text())
    summary = info["splits"]["val"]["fill_scores"]
    summary["score"]["median"] = round(summary["score"]["median"] - 0.3, 4)  # a prettier median
    summary["share_below_poor_score"] = 1.0
    (parts / "_info.json").write_text(json.dumps(info, indent=2, sort_keys=True))
    out = tmp_path / "report"
    assert main(["validate", "--parts", str(parts), "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert "fill-summary" in captured.err and "score.median: manifest" in captured.err
    assert "manifest summary DISAGREES" in captured.out
    report = report_of(out)
    assert report["ok"] is False and report["issues"]["by_reason"] == {"fill-summary": 1}
    assert report["fill_quality"]["manifest_summary"]["val"]["agrees"] is False
    assert "share_below_poor_score" in " ".join(report["fill_quality"]["manifest_summary"]["val"]["differences"])
    assert "| DISAGREES |" in (out / "validation.md").read_text()


def test_no_scored_part_gives_no_sheet_and_a_note(tmp_path, capsys):
    images = fake_images(WNIDS, per_class=1)
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=2)
    rewrite_fill_scores(parts, {im.source_id: None for im in images})
    out = tmp_path / "report"
    assert main(["validate", "--parts", str(parts), "--out", str(out)]) == 0
    assert "worst fills: no part has fill scores" in capsys.readouterr().out
    report = report_of(out)
    assert not (out / "previews" / "worst_fills.png").exists()
    assert "previews/worst_fills.png" not in report["previews"] and report["fill_quality"]["worst"] == []
    assert report["fill_quality"]["splits"]["val"]["score"] is None
    assert "No part has fill scores" in (out / "validation.md").read_text()


def test_a_composed_dataset_shows_the_worst_fills_of_its_own_sources(tmp_path, capsys):
    images = fake_images(WNIDS, per_class=2, textured=True)
    images[2] = replace(images[2], fill="flat")
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=2)
    assert main(compose_args(parts, tmp_path / "out", "--no-progress")) == 0
    dataset = tmp_path / "out" / "hard-spurious-imagenet"
    assert main(["validate", str(dataset), "--parts", str(parts)]) == 0
    report = report_of(dataset)
    assert report["fill_quality"]["worst"][0]["key"] == images[2].source_id
    assert report["fill_quality"]["worst_from"] == {"scored": 4, "own_sources_only": True}
    assert "previews/worst_fills.png" in report["previews"]
    assert {key for key, _ in iter_shard(parts / "val-00001.tar")} >= {images[2].source_id}


def test_parts_with_no_background_of_their_own_are_counted_listed_and_marked_on_the_sheet(tmp_path, capsys):
    from parts_factory import rewrite_parts

    images = fake_images(WNIDS, per_class=3)
    covered = images[2].source_id
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=4)

    def erase_all(key, meta, members):
        if key == covered:  # as extract writes a photo whose boxes cover it: all fill, score 0
            meta["background_status"] = "none"
            meta["fill_scores"] = planted((0.0, 1.0, 0.0, 0.0))
        return meta, members

    rewrite_parts(parts, erase_all, summary="recompute")
    out = tmp_path / "report"
    assert main(["validate", "--parts", str(parts), "--out", str(out)]) == 0
    fill = report_of(out)["fill_quality"]
    assert fill["splits"]["val"]["no_background"] == 1
    assert fill["worst"][0]["key"] == covered and fill["worst"][0]["no_background"] is True
    assert not any(part["no_background"] for part in fill["worst"][1:])
    assert "6 scored, 0 unscored, 1 with no background of their own" in capsys.readouterr().out
    md = (out / "validation.md").read_text()
    assert "| val | 6 | 6 | 0 | 0 | 1 | 0 (0.0%) |" in md and " (no background) |" in md


def test_the_fallback_share_and_the_fills_per_size_score_bin_are_reported(tmp_path, capsys):
    from parts_factory import rewrite_parts

    from builder.formats.parts import iter_parts

    images = fake_images(WNIDS, per_class=3)
    fell_back = {images[0].source_id, images[5].source_id}
    parts = tmp_path / "parts"
    write_parts(parts, {"val": images}, shard_size=4)
    telea = {"reason": "inpaint-fallback", "detail": "filled by telea: planted", "inpainter": {"name": "telea"}}

    def plant(key, meta, members):
        if key in fell_back:
            meta["provenance"]["inpaint_fallback"] = telea
        return meta, members

    rewrite_parts(parts, plant, summary="recompute")
    expected: dict[str, list[int]] = {}
    for part in iter_parts(parts):  # the paper's size score, computed here by hand
        m = part.meta
        area = np.mean([(b["x1"] - b["x0"]) * (b["y1"] - b["y0"]) for b in m["boxes"]]) / (m["width"] * m["height"])
        edges = [0.1, 0.25, 0.5, 0.75]
        low = max([0.0, *(e for e in edges if area >= e)])
        high = min([e for e in edges if area < e], default=None)
        name = f"{low:.2f}-{high:.2f}" if high is not None else f"{low:.2f}+"
        counts = expected.setdefault(name, [0, 0])
        counts[0] += 1
        counts[1] += part.key in fell_back
    out = tmp_path / "report"
    assert main(["validate", "--parts", str(parts), "--out", str(out)]) == 0
    figures = report_of(out)["fill_quality"]["splits"]["val"]
    assert (figures["fallbacks"], figures["fallback_share"]) == (2, 0.3333)
    bins = {b["bin"]: b for b in figures["by_size_score"]}
    assert {name: [b["parts"], b["fallbacks"]] for name, b in bins.items()} == expected
    for b in bins.values():
        assert b["fallback_share"] == round(b["fallbacks"] / b["parts"], 4) and b["scored"] == b["parts"]
        assert 0 <= b["score_median"] <= 1
    printed = capsys.readouterr().out
    assert "; 2 filled by a fallback inpainter (33.3%)" in printed and "fill by size score (val): " in printed
    md = (out / "validation.md").read_text()
    assert "By the paper's size score of each part's photo" in md
    assert "| split | size score | parts | fallbacks | no background | median score | score < 0.5 |" in md
