"""`hsi validate` checks what samples mean, not only their bytes, writes only where it validated, and
scopes its scores and previews to the dataset (issue 10, points 6-11, 14, 22 and the scores-only
header). Each test failed before its fix."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from manifest_io import read_manifest
from parts_factory import compose_quietly, fake_images, fresh_copy, write_parts
from PIL import Image, ImageDraw, ImageFont
from validate_cli import scores_from_csv

from builder.core.manifest import write_json_atomic
from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from builder.formats.composites import count_composites
from hsi.cli import main
from validation.integrity import check_dataset

WNIDS = ["n01443537", "n02437312", "n01440764", "n01484850"]  # goldfish, camel, tench, great white shark
TEN = [
    "n01443537",
    "n02437312",
    "n02134084",
    "n02391049",
    "n02690373",
    "n04273569",
    "n01614925",
    "n04146614",
    "n04310018",
    "n04465501",
]  # the -10 subset's classes
EXTRA = ["n01440764", "n01484850"]  # in the parts, not in the -10 subset


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The paper's set from 4 classes x 2 flat-colour images (96 composites, 4 shards) and its parts."""
    root = tmp_path_factory.mktemp("meaning")
    write_parts(root / "extract" / "parts", {"val": fake_images(WNIDS, per_class=2)}, shard_size=4)
    summary = compose_quietly(
        root / "extract" / "parts", "hard-spurious-imagenet", root / "composed", overrides={"shard_size": 24}
    )
    return summary.dataset_dir, root / "extract" / "parts"


@pytest.fixture
def copy(built, tmp_path):
    dataset, parts = built
    return fresh_copy(dataset, tmp_path / "composed"), parts


def tree_digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def rewrite(dataset: Path, change) -> None:
    """Apply `change(samples) -> samples` to every shard, then fix the manifest's counts, lengths and
    hashes, as an attacker who knows the format would."""
    manifest = read_manifest(dataset)
    entry = manifest["splits"]["val"]
    metas = []
    for shard in entry["shards"]:
        samples = change(list(iter_shard(dataset / shard["filename"])))
        stats = write_shard(dataset / shard["filename"], samples)
        shard.update(num_samples=stats.num_samples, bytes=stats.bytes, sha256=stats.sha256)
        metas += [json.loads(members["json"]) for _, members in samples]
    entry["shard_lengths"] = [s["num_samples"] for s in entry["shards"]]
    entry["num_samples"] = sum(entry["shard_lengths"])
    entry["counts"] = count_composites(metas)
    write_json_atomic(dataset / "_info.json", manifest)


def relabel_as_own_background(meta: dict) -> dict:
    return {
        **meta,
        "group": "CeO",
        "tier": "Easy",
        "background": "original",
        "background_source_id": meta["source_id"],
        "background_wnid": meta["wnid"],
        "background_class_index": meta["class_index"],
    }


def found(dataset: Path, parts: Path | None = None) -> set[tuple[str, str | None]]:
    return {(f.reason, f.key) for f in check_dataset(dataset, parts).failures}


# --- 6: group, tier, key and background follow from what the sample is --------------------------


def test_a_sample_relabelled_as_its_own_background_is_caught(copy):
    dataset, parts = copy
    victim = next(k for k, _ in iter_shard(dataset / "val-00000.tar") if k.endswith("_center_112_random"))

    def relabel(samples):
        def relabelled(members):
            meta = relabel_as_own_background(json.loads(members["json"]))
            return {**members, "json": json.dumps(meta, sort_keys=True).encode()}

        return [(k, relabelled(m) if k == victim else m) for k, m in samples]

    rewrite(dataset, relabel)
    assert ("key", victim) in found(dataset)  # the key still says random: no parts needed
    assert {("key", victim), ("background-pixels", victim)} <= found(dataset, parts)


def test_a_relabel_that_also_renames_the_key_is_caught_by_the_background_pixels(copy):
    dataset, parts = copy
    victim = next(k for k, _ in iter_shard(dataset / "val-00000.tar") if k.endswith("_center_112_random"))
    renamed = victim.replace("_random", "_original")

    def swap(samples):
        out = []
        for key, members in samples:
            if key == renamed:
                continue  # the real own-background sample makes way for the relabelled one
            if key == victim:
                meta = relabel_as_own_background(json.loads(members["json"]))
                key, members = renamed, {**members, "json": json.dumps(meta, sort_keys=True).encode()}
            out.append((key, members))
        return out

    rewrite(dataset, swap)
    assert found(dataset) == set()  # every label is consistent: only the pixels can tell
    assert found(dataset, parts) == {("background-pixels", renamed)}
    assert main(["validate", str(dataset), "--parts", str(parts), "--no-previews"]) == 1


def test_a_tier_or_group_that_does_not_follow_from_the_sample_is_named(copy):
    dataset, _ = copy
    samples = list(iter_shard(dataset / "val-00001.tar"))
    tiered = next(k for k, m in samples if json.loads(m["json"])["group"] == "CoO" and k.endswith("_56_original"))
    grouped = next(k for k, m in samples if json.loads(m["json"])["group"] == "CeR")

    def change(shard_samples):
        out = []
        for key, members in shard_samples:
            meta = json.loads(members["json"])
            if key == tiered:
                meta["tier"] = "Easy"
            if key == grouped:
                meta["group"], meta["tier"] = "CoR", "Hard"
            out.append((key, {**members, "json": json.dumps(meta, sort_keys=True).encode()}))
        return out

    rewrite(dataset, change)
    failures = {(f.reason, f.key): f.detail for f in check_dataset(dataset).failures}
    assert set(failures) == {("taxonomy", tiered), ("taxonomy", grouped)}
    assert "expected 'Medium'" in failures[("taxonomy", tiered)]
    assert "expected CeR" in failures[("taxonomy", grouped)]


# --- 7: only datasets are validated, and only where the report may go ----------------------------


def test_a_folder_that_is_not_a_dataset_is_described_and_left_untouched(copy, capsys):
    dataset, _ = copy
    root = dataset.parent  # the compose --out root
    before = tree_digest(root)
    assert main(["validate", str(root)]) == 2
    err = capsys.readouterr().err
    assert "not a dataset" in err and f"holds 1 dataset(s): {dataset.name}" in err
    assert tree_digest(root) == before


def test_a_release_folder_and_its_configs_are_never_written_into(copy, tmp_path, capsys):
    dataset, parts = copy
    release = tmp_path / "release"
    config = release / "data" / dataset.name
    shutil.copytree(dataset, config)
    (config / "validation.json").write_text('{"ok": true, "shipped": true}\n')
    (release / "_release.json").write_text('{"name": "hsi", "version": "1.0.0"}\n')
    before = tree_digest(release)
    assert main(["validate", str(release)]) == 2
    err = capsys.readouterr().err
    assert "is a release folder" in err and f"data/{dataset.name}" in err
    assert main(["validate", str(config)]) == 2
    assert "pass --out DIR" in capsys.readouterr().err
    out = tmp_path / "report"
    assert main(["validate", str(config), "--parts", str(parts), "--out", str(out)]) == 0
    assert tree_digest(release) == before
    assert json.loads((out / "validation.json").read_text())["ok"] is True


# --- 8: parts from another build are refused before anything is written ---------------------------


def test_parts_of_another_build_are_refused_and_the_earlier_report_kept(copy, tmp_path, capsys):
    dataset, parts = copy
    assert main(["validate", str(dataset), "--parts", str(parts), "--no-previews"]) == 0
    report = tree_digest(dataset)
    other = tmp_path / "other-parts"
    write_parts(other, {"val": fake_images(WNIDS, per_class=2, prefix="ILSVRC2012_other")})
    assert main(["validate", str(dataset), "--parts", str(other)]) == 2
    err = capsys.readouterr().err
    assert "fingerprint" in err and "pass the parts folder it was composed from" in err
    assert tree_digest(dataset) == report


# --- 9: scores and previews are the dataset's own ------------------------------------------------


def test_scores_and_the_parts_grid_cover_only_the_datasets_own_sources(tmp_path):
    parts = tmp_path / "parts"
    write_parts(
        parts, {"val": fake_images(TEN, per_class=4) + fake_images(EXTRA, per_class=4, prefix="extra")}, shard_size=8
    )
    summary = compose_quietly(parts, "hard-spurious-imagenet-10", tmp_path / "out")
    dataset = summary.dataset_dir
    assert main(["validate", str(dataset), "--parts", str(parts)]) == 0
    report = json.loads((dataset / "validation.json").read_text())
    assert report["scores"]["summary"]["classes"] == 10 and report["scores"]["summary"]["images"] == 40
    rows = list(csv.DictReader(open(dataset / "scores_per_class.csv")))
    assert sorted(r["wnid"] for r in rows) == sorted(TEN)
    # scores asked for explicitly are scoped the same way
    assert main(["validate", str(dataset), "--parts", str(parts), "--scores", "--out", str(tmp_path / "r2")]) == 0
    again = json.loads((tmp_path / "r2" / "validation.json").read_text())
    assert again["scores"]["summary"]["classes"] == 10


def test_the_parts_grid_skips_sources_the_dataset_does_not_use(tmp_path):
    from validation.previews import parts_grid

    parts = tmp_path / "parts"
    images = fake_images(WNIDS, per_class=2)
    write_parts(parts, {"val": images})
    own = {images[-1].source_id}
    only = parts_grid(parts, tmp_path / "own.png", only=own)
    every = parts_grid(parts, tmp_path / "all.png")
    assert Image.open(only).height < Image.open(every).height  # one row, not six


# --- 10: boxes from a CSV are clipped to their images, scores stay in [0, 1], correlations tested -


def write_loc(path: Path, rows) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["ImageId", "PredictionString"])
        for image_id, boxes in rows:
            writer.writerow([image_id, " ".join(f"{w} {x0} {y0} {x1} {y1}" for w, x0, y0, x1, y1 in boxes)])
    return path


def test_boxes_past_their_image_are_clipped_and_reported(tmp_path):
    images = tmp_path / "sizes"
    images.mkdir()
    rows = []
    for n, wnid in enumerate(WNIDS * 2):
        image_id = f"ILSVRC2012_val_{n + 1:08d}"
        Image.new("RGB", (100, 80), (90, 90, 90)).save(images / f"{image_id}.JPEG")
        # boxes drawn for images of 500 x 375: past the 100 x 80 files, the last one wholly outside
        rows.append((image_id, [(wnid, 40, 30, 400, 300), (wnid, 200, 150, 300, 250)]))
    csv_path = write_loc(tmp_path / "LOC_val_solution.csv", rows)
    out = tmp_path / "report"
    assert main(scores_from_csv(csv_path, images, out, "--no-previews")) == 0
    report = json.loads((out / "validation.json").read_text())["scores"]
    assert report["box_issues"]["by_reason"] == {"box-empty": 8, "box-outside-image": 8}
    assert report["summary"]["boxes_clipped"] == 8 and report["summary"]["boxes_dropped"] == 8
    for row in csv.DictReader(open(out / "scores_per_class.csv")):
        assert 0.0 <= float(row["centre"]) <= 1.0 and 0.0 <= float(row["size"]) <= 1.0
    assert "box-outside-image: 8" in (out / "validation.md").read_text()


def test_scores_outside_zero_one_are_refused():
    from builder.core.errors import InputError
    from builder.core.records import Box
    from validation.scores.boxes import ImageBoxes
    from validation.scores.report import compute_scores

    with pytest.raises(InputError, match=r"outside \[0, 1\].*--sizes-from"):
        compute_scores([ImageBoxes("a", WNIDS[0], 100, 80, (Box(40, 30, 400, 300, WNIDS[0]),))])


def test_correlations_carry_p_values_and_bootstrap_intervals(tmp_path):
    from scipy.stats import kendalltau, spearmanr

    from validation.scores.boxes import ClassScore
    from validation.scores.correlations import correlate_with_accuracy

    classes = [
        ClassScore(w, "", 3, centre, size)
        for w, centre, size in zip(
            "abcdef", [0.9, 0.8, 0.5, 0.6, 0.3, 0.2], [0.5, 0.4, 0.45, 0.2, 0.1, 0.15], strict=True
        )
    ]
    accuracy = dict(zip("abcdef", [0.95, 0.9, 0.7, 0.6, 0.4, 0.5], strict=True))
    result = correlate_with_accuracy(classes, accuracy)
    centres, acc = [c.centre for c in classes], list(accuracy.values())
    assert result["centre"]["spearman"] == pytest.approx(spearmanr(centres, acc).statistic)
    assert result["centre"]["spearman_p"] == pytest.approx(spearmanr(centres, acc).pvalue)
    assert result["centre"]["kendall_tau_b_p"] == pytest.approx(kendalltau(centres, acc).pvalue)
    low, high = result["centre"]["spearman_ci"]
    assert -1 <= low <= result["centre"]["spearman"] <= high <= 1
    assert correlate_with_accuracy(classes, accuracy) == result  # the bootstrap is seeded


# --- 11: --workers gives the same report ---------------------------------------------------------


def test_any_worker_count_gives_the_same_report(built, tmp_path):
    dataset, parts = built
    reports = {}
    for workers in (1, 3):
        out = tmp_path / f"workers-{workers}"
        args = ["validate", str(dataset), "--parts", str(parts), "--workers", str(workers), "--out", str(out)]
        assert main(args) == 0
        reports[workers] = tree_digest(out)
    assert reports[1] == reports[3]
    assert json.loads((tmp_path / "workers-3" / "validation.json").read_text())["integrity"]["samples_checked"] == 96


def test_failures_are_the_same_for_any_worker_count(copy):
    dataset, parts = copy
    (dataset / "val-00002.tar").unlink()
    serial = check_dataset(dataset, parts, workers=1)
    parallel = check_dataset(dataset, parts, workers=4)
    assert serial.to_json() == parallel.to_json() and not serial.ok


def test_ctrl_c_during_a_parallel_validate_stops_with_one_line_and_status_130(built, tmp_path, monkeypatch, capsys):
    import validation.integrity.driver as integrity

    dataset, parts = built
    out = tmp_path / "report"
    out.mkdir()
    (out / "validation.json").write_text('{"ok": true}\n')  # an earlier PASS

    def interrupted(task):
        raise KeyboardInterrupt

    monkeypatch.setattr(integrity, "check_shard", interrupted)
    assert main(["validate", str(dataset), "--parts", str(parts), "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted after 0 of 4 shards" in err and "run the same command again" in err
    assert not (out / "validation.json").exists()


# --- 14: contact sheets that can be read; histograms with n and the paper's values ---------------


def test_row_labels_fit_and_thumbnails_span_classes(tmp_path):
    from validation.previews import collect_cells, row_label_width

    font = ImageFont.load_default()
    groups = ["CeO", "bottom-left/gray", "random-corner/original"]
    probe = Image.new("RGB", (1, 1))
    widest = max(ImageDraw.Draw(probe).textlength(g, font=font) for g in groups)
    assert row_label_width(groups, font) > widest

    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(WNIDS, per_class=3)})
    dataset = compose_quietly(parts, "hard-spurious-imagenet", tmp_path / "out").dataset_dir
    cells = collect_cells(dataset, "val", per_cell=3, seed=0)
    assert all(len({p.wnid for p in picks}) == len(picks) == 3 for picks in cells.values())
    assert all(p.class_name and p.tier for picks in cells.values() for p in picks)
    sources = {p.key.split("_center")[0].split("_top-right")[0] for picks in cells.values() for p in picks}
    assert len(sources) > 3  # not always the first three source ids
    assert collect_cells(dataset, "val", per_cell=3, seed=0) == cells
    assert collect_cells(dataset, "val", per_cell=3, seed=1) != cells


def test_score_histograms_state_n_and_the_papers_values():
    from validation.scores.boxes import ClassScore
    from validation.scores.plots import distribution_labels

    classes = [ClassScore("a", "", 2, 0.5, 0.2), ClassScore("b", "", 3, 0.7, 0.4)]
    centre, size = distribution_labels(classes, "centre"), distribution_labels(classes, "size")
    assert "n = 2 classes, 5 images" in centre["title"]
    assert "0.747" in centre["reference"] and "0.418" in size["reference"]


# --- 22: --parts takes the extract --out folder --------------------------------------------------


def test_parts_may_be_given_as_the_extract_out_folder(built, tmp_path):
    dataset, parts = built
    out = tmp_path / "report"
    assert main(["validate", str(dataset), "--parts", str(parts.parent), "--out", str(out), "--no-previews"]) == 0
    report = json.loads((out / "validation.json").read_text())
    assert report["parts_checked"] and report["integrity"]["placements_compared"] == 96


# --- small: the scores-only report says what it scored -------------------------------------------


def test_a_scores_only_report_names_what_was_scored(tmp_path):
    images = tmp_path / "sizes"
    images.mkdir()
    Image.new("RGB", (100, 80)).save(images / "ILSVRC2012_val_00000001.JPEG")
    csv_path = write_loc(tmp_path / "LOC_val_solution.csv", [("ILSVRC2012_val_00000001", [(WNIDS[0], 10, 10, 50, 40)])])
    out = tmp_path / "report"
    assert (
        main(["validate", "--scores", "--boxes-csv", str(csv_path), "--sizes-from", str(images), "--out", str(out)])
        == 0
    )
    text = (out / "validation.md").read_text()
    assert "None" not in text.split("## ")[0]
    assert "Scored: boxes of `LOC_val_solution.csv`" in text
