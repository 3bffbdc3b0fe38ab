"""`hsi report` on two planted predictors evaluated by `hsi eval` (tests/site_factory.py): every page
exists and names its data revision, the galleries' labels are the predictions.parquet rows', each
thumbnail is its sample's own JPEG from the shards, the leaderboard is ordered by worst group, a
shard that fails its sha256 is refused, the -10 config's galleries name the paired background
class, and the same seed shows the same samples."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image
from site_factory import CORNER, FINDER, evaluate_paired_set, report, shared_evaluation, thumbnails
from trusted_code import trust_flags

from builder.core.classes import imagenet_classes
from builder.formats.stream import iter_tar_samples

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit, as the planted models are traced


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    return shared_evaluation(tmp_path_factory)


@pytest.fixture(scope="module")
def site(evaluation, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    assert report(evaluation.evals, out=out, data=evaluation.dataset) == 0
    return out


def pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def predictions(evaluation, folder: str) -> pd.DataFrame:
    return pd.read_parquet(evaluation.evals / folder / "predictions.parquet").set_index("key")


def shard_samples(dataset: Path) -> dict[str, dict[str, bytes]]:
    return {
        key: members for shard in sorted(dataset.glob("val-*.tar")) for key, members in iter_tar_samples(str(shard))
    }


def test_every_page_exists_and_names_the_data_revision(site, evaluation):
    expected = {"index.html", f"models/1-{CORNER}/index.html", f"models/1-{FINDER}/index.html"}
    assert {p.relative_to(site).as_posix() for p in pages(site)} == expected
    report_json = json.loads((evaluation.evals / CORNER / "eval.json").read_text())
    data, version = report_json["data"], report_json["toolkit"]["version"]
    for page in pages(site):
        text = page.read_text("utf-8")
        for value in (data["config"], data["split"], data["fingerprint"], f"hard-spurious-imagenet <code>{version}"):
            assert value in text, (page, value)
        assert "<script" not in text and "http://" not in text and "https://" not in text
        for src in re.findall(r'(?:src|href)="([^"#]+)"', text):  # every image and link is a file of the site
            target = (page.parent / src).resolve()
            assert target.is_file() and target.is_relative_to(site.resolve()), (page, src)
    index = (site / "index.html").read_text("utf-8")
    assert (site / "leaderboard" / "board-1-accuracy_vs_size.png").is_file()
    assert "position_size_heatmaps" not in index  # two placements only: no heat map
    model = (site / "models" / f"1-{CORNER}" / "index.html").read_text("utf-8")
    for heading in ("Top-1 by group and size", "Tiers", "Background gap", "Neutral controls", "Background-class"):
        assert heading in model
    for plot in ("accuracy_vs_size.png", "background_class_share.png"):  # the plots hsi eval wrote, as plain files
        copied = site / "models" / f"1-{CORNER}" / "plots" / plot
        assert (
            not copied.is_symlink() and copied.read_bytes() == (evaluation.evals / CORNER / "plots" / plot).read_bytes()
        )


def test_gallery_labels_are_the_predictions_rows(site, evaluation):
    names = imagenet_classes()
    for folder in (CORNER, FINDER):
        rows = predictions(evaluation, folder)
        shown = thumbnails(site / "models" / f"1-{folder}" / "index.html")
        assert shown and len({t["key"] for t in shown}) == len(shown)
        for thumb in shown:
            row = rows.loc[thumb["key"]]
            labels = thumb["labels"]
            assert thumb["kind"] == ("success" if row["label_class"] == row["pred_class"] else "error")
            assert labels["true"]["name"].strip() == names[int(row["label_class"])].name
            assert labels["true"]["p"] == f"{row['prob_label']:.3f}"
            assert labels["predicted"]["name"].strip() == names[int(row["pred_class"])].name
            assert labels["predicted"]["p"] == f"{row['top5_prob'][0]:.3f}"
            assert labels["background"]["name"].strip() == names[int(row["background_class_index"])].name
            assert labels["background"]["p"] == f"{row['prob_background_class']:.3f}"
            assert "paired" not in labels  # not a paired config
        by_cell = pd.DataFrame(
            [{"kind": t["kind"], **rows.loc[t["key"], ["group", "size"]].to_dict()} for t in shown]
        ).value_counts()
        ok = rows[rows["status"] == "ok"]
        for (group, size), cell in ok.groupby(["group", "size"]):
            errors = int((cell["label_class"] != cell["pred_class"]).sum())
            assert by_cell.get(("error", group, size), 0) == min(8, errors)
            assert by_cell.get(("success", group, size), 0) == min(4, len(cell) - errors)
    corner = thumbnails(site / "models" / f"1-{CORNER}" / "index.html")
    errors = [t for t in corner if t["kind"] == "error"]
    assert len(errors) == 18  # every CoR sample, each predicted as its background's class
    assert all(t["labels"]["predicted"]["name"] == t["labels"]["background"]["name"] for t in errors)


def test_thumbnails_are_the_samples_own_jpgs(site, evaluation):
    samples = shard_samples(evaluation.dataset)
    for thumb in thumbnails(site / "models" / f"1-{CORNER}" / "index.html"):
        path = (site / "models" / f"1-{CORNER}" / thumb["src"]).resolve()
        data = path.read_bytes()
        assert data == samples[thumb["key"]]["jpg"]
        with Image.open(io.BytesIO(data)) as image, Image.open(io.BytesIO(samples[thumb["key"]]["jpg"])) as sample:
            assert image.format == "JPEG" and image.size == sample.size == (224, 224)
            assert image.tobytes() == sample.tobytes()


def test_leaderboard_is_ordered_by_worst_group_not_by_top1(evaluation, tmp_path):
    evals = tmp_path / "evals"
    shutil.copytree(evaluation.evals, evals)
    for folder, worst, top1 in ((CORNER, 0.9, 0.2), (FINDER, 0.5, 0.99)):  # by top-1 the finder would lead
        path = evals / folder / "eval.json"
        data = json.loads(path.read_text())
        data["metrics"]["groups_summary"]["worst_group"].update(value=worst, low=worst, high=worst)
        data["metrics"]["overall"]["top1"].update(value=top1, low=top1, high=top1)
        path.write_text(json.dumps(data))
    assert report(evals, out=tmp_path / "site") == 0
    index = (tmp_path / "site" / "index.html").read_text("utf-8")
    order = re.findall(r'href="models/1-([^/"]+)/index.html"', index)
    assert order == [CORNER, FINDER]


def test_without_data_the_galleries_are_left_out_with_a_note(evaluation, tmp_path):
    assert report(evaluation.evals, out=tmp_path / "site") == 0
    page = (tmp_path / "site" / "models" / f"1-{FINDER}" / "index.html").read_text("utf-8")
    assert "Failure galleries need the data" in page and "--data SOURCE" in page
    assert not thumbnails(tmp_path / "site" / "models" / f"1-{FINDER}" / "index.html")
    assert not (tmp_path / "site" / "thumbs").exists()


def test_a_shard_whose_sha256_differs_is_refused(evaluation, tmp_path, capsys):
    dataset = tmp_path / evaluation.dataset.name
    shutil.copytree(evaluation.dataset, dataset)
    shard = dataset / "val-00002.tar"  # holds CoR samples, which the corner rule's gallery shows
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert report(evaluation.evals, out=tmp_path / "site", data=dataset) == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("hsi report: error:") and "sha256" in message and "\n" not in message
    assert not (tmp_path / "site").exists()


def test_the_same_seed_shows_the_same_samples_another_seed_others(evaluation, tmp_path):
    def shown(name: str, seed: int) -> list[str]:
        out = tmp_path / name
        assert report(evaluation.evals, out=out, data=evaluation.dataset, extra=["--seed", str(seed)]) == 0
        return [t["key"] for t in thumbnails(out / "models" / f"1-{FINDER}" / "index.html")]

    first, again, other = shown("a", 0), shown("b", 0), shown("c", 1)
    assert first == again and first != other and len(first) == len(other) == 12 * 4


def test_a_rerun_replaces_its_own_files_and_removes_what_it_no_longer_writes(evaluation, tmp_path):
    site = tmp_path / "site"
    assert report(evaluation.evals, out=site, data=evaluation.dataset) == 0
    assert (site / "thumbs").is_dir()
    single = tmp_path / "single"
    shutil.copytree(evaluation.evals / FINDER, single / FINDER)
    assert report(single, out=site) == 0  # one model, no galleries
    assert {p.relative_to(site).as_posix() for p in pages(site)} == {"index.html", f"models/1-{FINDER}/index.html"}
    assert not any(site.glob("thumbs/**/*.jpg"))


def test_a_paired_config_labels_each_thumbnail_with_its_paired_class(tmp_path):
    paired = evaluate_paired_set(tmp_path)
    assert report(paired.evals, out=tmp_path / "site", data=paired.dataset) == 0
    rows = predictions(paired, CORNER)
    shown = thumbnails(tmp_path / "site" / "models" / f"1-{CORNER}" / "index.html")
    assert {t["kind"] for t in shown} == {"error", "success"}
    names = imagenet_classes()
    for thumb in shown:
        row = rows.loc[thumb["key"]]
        assert thumb["labels"]["paired"]["name"].strip() == names[int(row["paired_class_index"])].name
        assert thumb["labels"]["paired"]["p"] == f"{row['prob_paired_class']:.3f}"
        if row["background"] == "paired":  # on the paired background, its class is the paired class
            assert thumb["labels"]["background"]["name"] == thumb["labels"]["paired"]["name"]


def figure_model(spec: str, positions: list[str], value: float = 0.5):
    """A ModelEval holding only what the leaderboard's figures read."""
    from cards.site.collect import ModelEval

    cells = [{"size": s, "top1": {"value": value, "low": value - 0.1, "high": value + 0.1, "n": 36}} for s in (56, 84)]
    metrics = {
        "has_groups": True,
        "by_group_size": [{"group": g, **c} for g in ("CeO", "CoR") for c in cells],
        "by_position_size": [{"position": p, **c} for p in positions for c in cells],
    }
    return ModelEval(1, Path(spec), {}, {"spec": spec, "classes": 1000}, metrics, {}, None, [])


def test_the_figures_draw_every_model_with_chance_and_heat_maps_only_past_two_placements():
    from cards.site.figures import accuracy_vs_size, png_bytes, position_heat_maps

    two = figure_model("$\\frac{$ <b>", ["center", "top-right"], 0.2)
    three = figure_model("timm:resnet18", ["center", "top-right", "bottom-left"], 0.8)
    curves = accuracy_vs_size([two, three])
    assert [ax.get_title() for ax in curves.axes] == ["CeO", "CoR"]
    labels = [text.get_text() for text in curves.legends[0].get_texts()]
    assert labels == ["\\$\\frac{\\$ <b>", "timm:resnet18", "chance (1/1000)"]  # `$` is text, not mathtext
    low, high = curves.axes[0].get_ylim()
    assert low <= 0.001 and 0.9 <= high <= 1.02  # the data's range, down to the chance line
    assert png_bytes(curves).startswith(b"\x89PNG")
    assert position_heat_maps([two]) is None
    heat_maps = position_heat_maps([two, three])
    panels = [ax for ax in heat_maps.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["timm:resnet18"]
    assert sorted(t.get_text() for t in panels[0].texts) == ["0.80\nn=36"] * 6
    with Image.open(io.BytesIO(png_bytes(heat_maps))) as image:
        assert image.size[0] > 300 and image.size[1] > 150


def test_the_leaderboard_entries_name_and_describe_the_models(evaluation, tmp_path, capsys):
    """A model described by `hsi eval --entry-name/--architecture/--training-data` is listed by that
    name with its description; an entry of another run than its eval.json is refused."""
    from hsi.cli import main

    evals = tmp_path / "evals"
    shutil.copytree(evaluation.evals, evals)
    described = [
        "--entry-name",
        "Corner rule (planted)",
        "--architecture",
        "two-colour lookup",
        "--training-data",
        "none: planted",
    ]
    corner = evaluation.root / "planted_corner.pt"
    args = [
        "eval",
        str(evaluation.dataset),
        "--model",
        f"ts:{corner}",
        *trust_flags(f"ts:{corner}"),
        "--out",
        str(evals),
        "--split",
        "val",
    ]
    assert main([*args, "--mean", "0", "--std", "1", "--bootstrap", "50", "--no-progress", *described]) == 0
    assert json.loads((evals / CORNER / "entry.json").read_text())["name"] == "Corner rule (planted)"
    out = tmp_path / "site"
    assert report(evals, out=out) == 0
    index = (out / "index.html").read_text("utf-8")
    assert f'href="models/1-{CORNER}/index.html">Corner rule (planted)</a>' in index
    assert "two-colour lookup" in index and "none: planted" in index
    assert f">ts:{corner.name}<" not in index.split("Corner rule (planted)", 1)[0][-200:]  # the name, not the spec
    page = (out / "models" / f"1-{CORNER}" / "index.html").read_text("utf-8")
    assert "<td>leaderboard name</td><td>Corner rule (planted)</td>" in page
    assert "<td>architecture</td><td>two-colour lookup</td>" in page
    # the finder's folder now holds the corner's entry: refused, not shown under the wrong name
    shutil.copyfile(evals / CORNER / "entry.json", evals / FINDER / "entry.json")
    capsys.readouterr()
    assert report(evals, out=tmp_path / "other") != 0
    message = capsys.readouterr().err
    assert "entry.json" in message and "another run" in message and not (tmp_path / "other").exists()


def test_the_evaluation_folder_row_names_the_folder_without_a_leading_slash(evaluation, tmp_path, monkeypatch):
    """Failed before: a model folder given by itself (`hsi report E`, E holding an eval.json) showed as
    `/E`, its parent having no name; inside an `hsi eval --out` folder it shows as `OUT/<model>`."""
    shutil.copytree(evaluation.evals / CORNER, tmp_path / "E")
    monkeypatch.chdir(tmp_path)
    assert report(Path("E"), out=tmp_path / "alone") == 0
    page = (tmp_path / "alone" / "models" / "1-E" / "index.html").read_text("utf-8")
    assert "<td>evaluation folder</td><td>E</td>" in page
    assert report(evaluation.evals, out=tmp_path / "board") == 0
    page = (tmp_path / "board" / "models" / f"1-{CORNER}" / "index.html").read_text("utf-8")
    assert f"<td>evaluation folder</td><td>{evaluation.evals.name}/{CORNER}</td>" in page
