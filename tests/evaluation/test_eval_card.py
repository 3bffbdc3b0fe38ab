"""`hsi release --results DIR`: the card's Results section rendered from eval.json, with the plot,
each model's spec, checkpoint sha256 and preprocessing; reports of other data are refused."""

from __future__ import annotations

import json
import shutil

import pytest
from eval_cli import eval_args

from hf_scripts.publish import release_files
from hsi.cli import main
from validation.report import validate_dataset


@pytest.fixture(scope="module")
def validated(paper_set, flat_parts, tmp_path_factory):
    dataset = tmp_path_factory.mktemp("validated") / "hard-spurious-imagenet"
    shutil.copytree(paper_set, dataset)
    assert validate_dataset(dataset, parts_dir=flat_parts[0], previews=False).ok
    return dataset


def test_release_card_gets_a_results_section_from_eval_reports(
    validated, planted_corner, planted_finder, tmp_path, capsys
):
    evals = tmp_path / "evals"
    assert main(eval_args(validated, f"ts:{planted_corner},ts:{planted_finder}", evals)) == 0
    release = tmp_path / "release" / "hard-spurious-imagenet"
    assert main(["release", str(validated), "--out", str(release), "--results", str(evals)]) == 0, (
        capsys.readouterr().err
    )
    card = (release / "README.md").read_text()
    section = card[card.index("## Results") : card.index("## Usage")]
    report = json.loads((evals / "ts_planted_corner.pt" / "eval.json").read_text())
    sha = report["model"]["checkpoint_sha256"]
    assert f"`{sha}`" in section and "`ts:planted_corner.pt`" in section and "canvas as is (no crop)" in section
    assert "| model | split | top-1 | CeO | CoO | CeR | CoR | mean over groups | worst group |" in section
    assert (
        "| `ts:planted_corner.pt` | val | 0.750 [0.750, 0.750] | 1.000 [1.000, 1.000] | 1.000 [1.000, 1.000] | "
        "1.000 [1.000, 1.000] | 0.000 [0.000, 0.000] | 0.750 [0.750, 0.750] | CoR 0.000 [0.000, 0.000] |" in section
    )
    assert section.index("planted_finder") < section.index("planted_corner")  # best worst group first
    plot = "results/hard-spurious-imagenet_ts_planted_corner.pt_accuracy_vs_size.png"
    assert f"]({plot})" in section and (release / plot).is_file()
    # and publishing takes the plots along: they are part of the release's layout, not strays
    published = dict(release_files(release, json.loads((release / "_release.json").read_text())))
    assert plot in published and "README.md" in published


def test_results_of_other_data_are_refused(validated, planted_corner, tmp_path, capsys):
    evals = tmp_path / "evals"
    assert main(eval_args(validated, f"ts:{planted_corner}", str(evals), "--limit", "10", bootstrap=50)) == 0
    capsys.readouterr()
    # a partial (--limit) run never blocks a release (issue 21, 6): it is left out of the card, with a note
    assert main(["release", str(validated), "--out", str(tmp_path / "r1"), "--results", str(evals)]) == 0
    assert "a partial evaluation (the first 10 samples" in capsys.readouterr().err
    assert "## Results" not in (tmp_path / "r1" / "README.md").read_text()
    path = evals / "ts_planted_corner.pt-limit10" / "eval.json"  # a --limit run has a folder of its own
    report = json.loads(path.read_text())
    report["data"].update(limit=None, partial=False, fingerprint="0123456789abcdef")
    path.write_text(json.dumps(report))
    assert main(["release", str(validated), "--out", str(tmp_path / "r2"), "--results", str(evals)]) == 2
    assert "measured on another build of hard-spurious-imagenet" in capsys.readouterr().err
    assert main(["release", str(validated), "--out", str(tmp_path / "r3"), "--results", str(tmp_path)]) == 2
    assert not (tmp_path / "r2").exists()
