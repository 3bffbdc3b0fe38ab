"""The paper's published figures (the authors' released evaluation logs) ship as data with a source
per row; docs/evaluate.md and leaderboard/published-paper.md show them as rendered from that data,
and `hsi report --reference paper` shows them in a section of their own, apart from re-run models."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from evaluation.ranking.published import (
    CLEAN,
    GROUPS,
    LABEL,
    SIZES,
    UnknownReference,
    published_markdown,
    published_runs,
    read_cells,
)
from hsi.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
EVALUATE = ROOT / "docs" / "evaluate.md"
# the runs docs/evaluate.md shows: the log folders without a suffix
MAIN_RUNS = ("CoAtNet", "ConvNeXt", "DeiT_Small", "Eva", "Hiera", "ResNet50", "ViT", "ViT_Large", "ViT_Small")
MAIN_RUNS += ("ViT_Tiny", "mViT")
LOG = re.compile(
    r"^https://github\.com/Mishalfatima/Corner_Cases/blob/c382c4b7317994292007dbe700c426683aa14e5b/"
    r"pytorch-image-models/slurm/Evaluate_(?P<run>\w+)/\w+_\d+_(?P<id>\d+)\.out$"
)


def test_every_row_names_its_log_and_the_array_id_gives_its_group_and_size():
    cells = read_cells("paper")
    assert len(cells) == 298  # 23 runs x 13 logs, less ViT_Tiny's id 1 (its log holds no result)
    for cell in cells:
        match = LOG.match(cell.source)
        assert match and match["run"] == cell.run, cell.source
        array_id = int(match["id"])
        expected = (CLEAN, None) if array_id == 12 else (GROUPS[array_id % 4], SIZES[array_id // 4])
        assert (cell.group, cell.size) == expected
        assert 0 < cell.top1 <= cell.top5 <= 100


def test_the_resnet50_log_as_published():
    (run,) = [r for r in published_runs() if r.run == "ResNet50"]
    assert (run.model, run.input_size, run.crop_pct, run.interpolation) == ("resnet50.a1_in1k", 288, 1.0, "bicubic")
    assert run.top1("CeO", 56) == 57.778 and run.top1("CoR", 56) == 29.202 and run.top1("CoR", 112) == 67.434
    assert run.clean.top1 == 81.21 and run.worst.top1 == 29.202


def test_the_inferred_order_is_borne_out_accuracy_rises_with_size_in_every_run():
    """What docs/evaluate.md says of the inferred order (one cell bucks it: ConvNeXt_old's CeR is
    7.4 at 56 px and 4.3 at 84 px)."""
    for run in published_runs():
        means = []
        for size in SIZES:
            figures = [run.top1(group, size) for group in GROUPS if run.top1(group, size) is not None]
            means.append(sum(figures) / len(figures))
        assert means == sorted(means), (run.run, means)
        for group in GROUPS:
            small = run.top1(group, 56)
            assert small is None or run.top1(group, 112) > small, (run.run, group)
        assert run.worst.top1 < run.clean.top1


def test_the_pages_show_the_table_as_the_data_renders_it():
    assert published_markdown(runs=MAIN_RUNS) in EVALUATE.read_text("utf-8")
    board = (ROOT / "leaderboard" / "published-paper.md").read_text("utf-8")
    assert published_markdown() in board and "not re-run" in board


def test_the_reproduce_commands_are_real_commands():
    text = EVALUATE.read_text("utf-8")
    section = text[text.index("## Reproduce the paper") :]
    block = section[section.index("```bash\n") + 8 :]
    lines = [line for line in block[: block.index("```")].splitlines() if line.strip()]
    assert [shlex.split(line)[1] for line in lines] == ["extract", "compose", "validate", "eval", "report"]
    parser = build_parser()
    for line in lines:
        parser.parse_args(shlex.split(line.replace("$IMAGENET", "imagenet"))[1:])
    assert "--input-size 288 --crop-pct 1.0" in block  # what the ResNet50 log records


def test_an_unknown_reference_is_refused():
    with pytest.raises(UnknownReference, match="the published tables are paper"):
        read_cells("the-paper")


def test_the_report_shows_them_apart_from_the_re_run_models(tmp_path, tmp_path_factory):
    from site_factory import report, shared_evaluation

    evaluation = shared_evaluation(tmp_path_factory)
    assert report(evaluation.evals, out=tmp_path / "site", extra=["--reference", "paper"]) == 0
    index = (tmp_path / "site" / "index.html").read_text("utf-8")
    start = index.index("Published, not re-run (paper)")
    ranked, published = index[:start], index[start:]
    assert "resnet50.a1_in1k" in published and "resnet50.a1_in1k" not in ranked
    assert LABEL.capitalize() in published and published.count("<tr>") == 1 + len(published_runs())
    assert "57.8" in published  # ResNet50, CeO at 56 px
    assert report(evaluation.evals, out=tmp_path / "plain") == 0
    assert "Published, not re-run" not in (tmp_path / "plain" / "index.html").read_text("utf-8")
