"""What a leaderboard says of its entries (#33), in leaderboard.md/.csv and on the site alike: each
entry by its name (`--entry-name`), its preprocessing (predictions made elsewhere without a
declaration are "unknown" and ranked apart, below the others, with the reason), its clean-photo
top-1 (`--clean`), and ranks where equal figures share a rank (1, 2, 2, 4).

The board: the object finder (never wrong), the corner rule under a name and with its clean photos,
the same corner rule under another file name (equal figures), and the corner rule's predictions as a
CSV scored with `--predictions` (preprocessing unknown)."""

from __future__ import annotations

import csv
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from eval_cli import eval_args
from test_eval_spuriosity import write_clean_tree

from evaluation.predicting.predictions import read_predictions
from evaluation.ranking.ranks import competition_ranks
from hsi.cli import main

CORNER, FINDER, COPY = "ts_planted_corner.pt", "ts_planted_finder.pt", "ts_planted_corner_copy.pt"


def row(worst: float | None, top1: float, partial: bool = False) -> dict:
    return {"worst_group_top1": worst, "top1": top1, "partial": "true" if partial else "false", "model": "m"}


def test_equal_figures_share_a_rank_and_the_next_skips_their_places():
    rows = [row(0.9, 0.95), row(0.5, 0.8), row(0.5, 0.8), row(0.5, 0.8), row(0.5, 0.7), row(0.1, 0.9, partial=True)]
    assert competition_ranks(rows) == [1, 2, 2, 2, 5, None]
    # without groups, top-1 is what ranks; the same worst group with another top-1 is not a tie
    assert competition_ranks([row(None, 0.8), row(None, 0.8), row(0.3, 0.9), row(0.3, 0.5)]) == [1, 1, 3, 4]
    assert competition_ranks([]) == []


@pytest.fixture(scope="module")
def board(paper_set, flat_parts, planted_corner, planted_finder, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("standings")
    out = root / "out"
    clean = write_clean_tree(root / "imagenet", flat_parts[1])
    named = ["--entry-name", "Corner rule", "--clean", str(clean)]
    assert main(eval_args(paper_set, f"ts:{planted_corner}", out, *named)) == 0
    copy = shutil.copyfile(planted_corner, root / "planted_corner_copy.pt")
    assert main(eval_args(paper_set, f"ts:{planted_finder},ts:{copy}", out)) == 0
    frame, _ = read_predictions(out / CORNER / "predictions.parquet")
    ok = frame[frame["status"] == "ok"]
    table = pd.DataFrame({"key": ok["key"], "pred_class": ok["pred_class"]})
    table.to_csv(root / "corner.csv", index=False)
    scored = ["eval", str(paper_set), "--predictions", str(root / "corner.csv"), "--out", str(out)]
    assert main([*scored, "--entry-name", "Corner rule as a CSV", "--bootstrap", "100"]) == 0
    return out


def test_leaderboard_csv_names_ranks_and_sections_each_entry(board):
    with open(board / "leaderboard.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["rank"], r["name"], r["folder"], r["preprocessing"], r["preprocessing_status"]) for r in rows] == [
        ("1", "ts:planted_finder.pt", FINDER, "canvas as is", "applied"),
        ("2", "Corner rule", CORNER, "canvas as is", "applied"),
        ("2", "ts:planted_corner_copy.pt", COPY, "canvas as is", "applied"),
        ("1", "Corner rule as a CSV", "Corner_rule_as_a_CSV", "unknown", "unknown"),  # ranked apart
    ]
    assert [r["clean_top1"] for r in rows] == ["", "1.0", "", ""]  # the corner rule sees every clean photo
    assert rows[3]["model"] == "predictions:corner.csv" and rows[3]["worst_group_top1"] == "0.0"


def test_leaderboard_md_ranks_unknown_preprocessing_apart_and_says_why(board):
    md = (board / "leaderboard.md").read_text("utf-8")
    known, unknown = md.split("## Unknown preprocessing (ranked apart)")
    assert "| rank | model | preprocessing | top-1 | clean top-1 |" in known
    lines = [line for line in known.splitlines() if line.startswith("| ") and "rank" not in line]
    assert [line.split(" | ")[:3] for line in lines] == [
        ["| 1", "`ts:planted_finder.pt`", "canvas as is"],
        ["| 2", "Corner rule (`ts:planted_corner.pt`)", "canvas as is"],
        ["| 2", "`ts:planted_corner_copy.pt`", "canvas as is"],
    ]
    assert lines[1].split(" | ")[4].startswith("1.000") and lines[0].split(" | ")[4] == "n/a"
    assert "do not declare how the images were preprocessed" in unknown and "centre crop" in unknown
    assert "| 1 | Corner rule as a CSV (`predictions:corner.csv`) | unknown |" in unknown
    assert "share a rank" in known


class _Boards(HTMLParser):
    """The cells' text of each leaderboard table of a page, row by row."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.depth = 0  # inside a leaderboard table
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and "leaderboard" in (dict(attrs).get("class") or ""):
            self.tables.append([])
            self.depth = 1
        elif self.depth and tag == "tr":
            self.tables[-1].append([])
        elif self.depth and tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if self.depth and tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "table":
            self.depth = 0

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data + " ")


def test_the_site_ranks_and_sections_as_the_leaderboard_and_shows_clean_results(board, tmp_path):
    site = tmp_path / "site"
    assert main(["report", str(board), "--out", str(site), "--no-progress"]) == 0
    index = (site / "index.html").read_text("utf-8")
    parser = _Boards()
    parser.feed(index)
    known, unknown = parser.tables
    header = known[0]
    assert header[:6] == ["rank", "model", "preprocessing", "samples", "top-1", "clean top-1"]
    assert [(r[0], r[1].split(" ")[0], r[2]) for r in known[1:]] == [
        ("1", "ts:planted_finder.pt", "canvas as is"),
        ("2", "Corner", "canvas as is"),
        ("2", "ts:planted_corner_copy.pt", "canvas as is"),
    ]
    assert known[2][5].startswith("1.000") and known[1][5] == "n/a"
    assert [(r[0], r[2]) for r in unknown[1:]] == [("1", "unknown")] and "Corner rule as a CSV" in unknown[1][1]
    assert index.index("Unknown preprocessing (ranked apart)") < index.index("Corner rule as a CSV")
    assert "do not declare how the images were preprocessed" in index
    page = (site / "models" / f"1-{CORNER}" / "index.html").read_text("utf-8")
    clean = page.split('id="clean"', 1)[1].split("</section>", 1)[0]
    assert "clean photos: the original photos of the same source images" in clean
    assert '<span class="v">1.000</span>' in clean.split("Drop from clean", 1)[0]
    drops = clean.split("Drop from clean", 1)[1]
    cor = re.search(r"<tr><td>CoR</td>(.*?)</tr>", drops).group(1)
    assert re.findall(r'<span class="v">([^<]+)</span>', cor) == ["0.000", "1.000"]  # CoR top-1, its drop
    other = (site / "models" / f"1-{FINDER}" / "index.html").read_text("utf-8")
    assert "Not measured in this evaluation: hsi eval --clean" in other


def test_a_predictions_run_alone_writes_its_leaderboard(paper_set, board, tmp_path, capsys):
    """Failed before: `hsi eval --predictions` wrote its model folder and no leaderboard."""
    out = tmp_path / "out"
    csv_file = board.parent / "corner.csv"
    assert main(["eval", str(paper_set), "--predictions", str(csv_file), "--out", str(out), "--bootstrap", "50"]) == 0
    assert f"leaderboard: {out / 'leaderboard.md'}" in capsys.readouterr().out
    with open(out / "leaderboard.csv", newline="") as handle:
        (only,) = list(csv.DictReader(handle))
    assert (only["rank"], only["name"], only["folder"], only["preprocessing"]) == (
        "1",
        "predictions:corner.csv",
        "corner",  # the file's stem
        "unknown",
    )
    md = (out / "leaderboard.md").read_text("utf-8")
    assert "## Unknown preprocessing (ranked apart)" in md and "| 1 | `predictions:corner.csv` | unknown |" in md
