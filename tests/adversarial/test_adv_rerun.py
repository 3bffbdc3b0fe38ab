"""`hsi leaderboard verify --rerun` and `--record` against hostile submissions (issue 33): an entry
whose spec or weights file names a path, weights that are missing, a link or not the entry's,
predictions made elsewhere, an in-memory model, an untrusted TorchScript file: each refused in one
line saying why, exit status 2, before any shard is read; one changed prediction is found by key;
a forged or foreign verification.json is refused by the reader, a stale one is not shown as
verifying, and a user's verification.json is never replaced. Every command runs through
`hsi.cli.main`."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from colour_entry import colour_entry
from tiny_models import MeanColour
from trusted_code import trust_flags

from builder.core.errors import HsiError
from builder.core.hashing import sha256_file
from evaluation.ranking.entries import read_entry
from evaluation.ranking.verification_record import VERIFICATION_JSON, check_record, read_verification
from hsi.cli import main

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """(the model folder of `hsi eval ts:colour.pt`, its data, the model file)."""
    return colour_entry(tmp_path_factory.mktemp("adv-rerun"))


@pytest.fixture
def submission(evaluated, tmp_path):
    """The entry and its predictions as a submitter sends them, the model file beside them."""
    folder = tmp_path / "submitted"
    shutil.copytree(evaluated[0], folder)
    shutil.copyfile(evaluated[2], folder / "colour.pt")
    return folder


def verify(folder, data, capsys, *extra) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["leaderboard", "verify", str(folder), "--data", str(data), "--no-progress", *extra])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return status, captured.out, captured.err


def refused(folder, data, capsys, *extra) -> str:
    """The one-line refusal of a --rerun: exit 2, nothing printed, and before the data is opened (the
    data given is not there, and it is not what the line says)."""
    status, out, err = verify(folder, data.parent / "no-such-data", capsys, *extra)
    errors = [line for line in err.splitlines() if line.startswith("hsi leaderboard: error:")]
    assert status == 2 and out == "" and len(errors) == 1, (out, err)
    assert "no-such-data" not in errors[0]
    return errors[0].removeprefix("hsi leaderboard: error: ")


def edit_entry(folder, change) -> None:
    entry = json.loads((folder / "entry.json").read_text())
    change(entry)
    (folder / "entry.json").write_text(json.dumps(entry))


def trusted(evaluated) -> list[str]:
    return trust_flags(f"ts:{evaluated[2]}")


def test_the_true_entry_re_runs_from_the_file_beside_it(evaluated, submission, capsys):
    status, out, err = verify(submission, evaluated[1], capsys, "--rerun", *trusted(evaluated))
    assert status == 0, err
    assert out.startswith("re-run: ts:colour.pt") and "top-1 agreement 100.00% (12 of 12 samples)" in out


@pytest.mark.parametrize("flag", [["--weights", "x.pt"], ["--tolerance", "0.1"], ["--device", "cpu"], ["--trust-code"]])
def test_a_rerun_flag_without_rerun_is_refused(evaluated, submission, capsys, flag):
    status, out, err = verify(submission, evaluated[1], capsys, *flag)
    assert status == 2 and out == "" and f"{flag[0]} is for --rerun: pass --rerun, or drop it" in err


@pytest.mark.parametrize("value", ["-0.1", "0.9", "nan", "much"])
def test_a_tolerance_outside_its_range_is_refused(evaluated, submission, capsys, value):
    status, _, err = verify(submission, evaluated[1], capsys, "--rerun", "--tolerance", value)
    assert status == 2 and f"--tolerance is a share of the samples from 0 to 0.5, got '{value}'" in err


@pytest.mark.parametrize("spec", ["ts:../colour.pt", "ts:/etc/colour.pt", "ts:sub/colour.pt", "ts:.."])
def test_a_spec_naming_a_path_is_never_followed(evaluated, submission, capsys, spec):
    edit_entry(submission, lambda e: e["model"].update(spec=spec))
    line = refused(submission, evaluated[1], capsys, "--rerun", *trusted(evaluated))
    assert "--rerun refused: its spec names the path" in line and "beside the entry or from --weights" in line


def test_a_checkpoint_named_by_a_path_is_never_followed(evaluated, submission, capsys):
    digest = sha256_file(evaluated[2])
    edit_entry(
        submission, lambda e: e["model"].update(spec="timm:resnet18", weights={"file": "../w.pth", "sha256": digest})
    )
    line = refused(submission, evaluated[1], capsys, "--rerun")
    assert "--rerun refused: its spec names the path '../w.pth'" in line


def test_weights_that_are_missing_a_link_or_not_the_entrys_are_refused(evaluated, submission, capsys, tmp_path):
    (submission / "colour.pt").unlink()
    line = refused(submission, evaluated[1], capsys, "--rerun", *trusted(evaluated))
    assert line.endswith("--rerun refused: its weights file colour.pt is not beside the entry: pass --weights FILE")
    other = tmp_path / "other.pt"
    torch.jit.trace(MeanColour(seed=1), torch.rand(1, 3, 224, 224)).save(str(other))
    line = refused(submission, evaluated[1], capsys, "--rerun", "--weights", str(other))
    assert f"other.pt has sha256 {sha256_file(other)}, the entry's weights {sha256_file(evaluated[2])}" in line
    (submission / "colour.pt").symlink_to(evaluated[2])
    line = refused(submission, evaluated[1], capsys, "--rerun", *trusted(evaluated))
    assert "weights file is a link; links are never followed" in line


def test_an_entry_without_a_weights_sha256_cannot_prove_its_file(evaluated, submission, capsys):
    edit_entry(submission, lambda e: e["model"]["weights"].update(sha256=None))
    line = refused(submission, evaluated[1], capsys, "--rerun", *trusted(evaluated))
    assert "the entry records no sha256 of colour.pt, so no file can be shown to be its weights" in line


def test_an_untrusted_torchscript_file_is_not_loaded(evaluated, submission, capsys):
    line = refused(submission, evaluated[1], capsys, "--rerun")
    assert "is not one you trust" in line and "--trust-file" in line


def test_predictions_made_elsewhere_and_in_memory_models_have_nothing_to_run(evaluated, submission, capsys):
    edit_entry(submission, lambda e: e["model"].update(spec="predictions:mine.csv"))
    line = refused(submission, evaluated[1], capsys, "--rerun")
    assert "--rerun refused: its predictions were made outside the toolkit (predictions:mine.csv)" in line
    identity = {
        "kind": "module",
        "class": "Net",
        "module": "mine",
        "state_dict_sha256": "a" * 64,
        "weights_sha256": None,
    }
    edit_entry(submission, lambda e: e["model"].update(spec="module:Net", identity=identity))
    line = refused(submission, evaluated[1], capsys, "--rerun")
    assert "module:Net was an in-memory model, with no spec to load" in line


def test_one_changed_prediction_is_found_by_its_key(evaluated, submission, capsys, tmp_path):
    """A submitter changes one prediction and re-scores the entry (`hsi eval --from`): plain verify
    accepts it, the re-run names the sample."""
    path = submission / "predictions.parquet"
    table = pq.read_table(path)
    rows = table.to_pylist()
    changed = next(row for row in rows if row["status"] == "ok")
    new = (changed["pred_class"] + 1) % 1000
    changed.update(pred_class=new, top5_class=[new], top5_prob=None)
    tampered = tmp_path / "tampered.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), tampered)
    out_dir = tmp_path / "rescored"
    assert main(["eval", "--from", str(tampered), "--out", str(out_dir), "--bootstrap", "20"]) == 0
    shutil.copyfile(evaluated[2], out_dir / "colour.pt")
    table_flag = ("--predictions", str(tampered))
    assert verify(out_dir, evaluated[1], capsys, *table_flag)[0] == 0
    status, out, err = verify(out_dir, evaluated[1], capsys, *table_flag, "--rerun", *trusted(evaluated))
    assert status == 1
    assert f"  disagreement: 1 of 12 samples differ: {changed['key']}\n" in out
    assert "top-1 agreement 91.67% (11 of 12 samples)" in out and "disagrees with the submitted predictions" in err


# --- verification.json ------------------------------------------------------------------------------


def recorded(evaluated, submission, capsys) -> dict:
    status, out, _ = verify(submission, evaluated[1], capsys, "--rerun", *trusted(evaluated), "--record")
    assert status == 0 and f"recorded: {submission / VERIFICATION_JSON}" in out
    return json.loads((submission / VERIFICATION_JSON).read_text())


FORGED = [
    (lambda r: r["checked"].remove("rerun"), "a re-run record lists a re-run only when it is one"),
    (lambda r: r.update(kind="re-scored"), "a re-scored record lists a re-run only when it is one"),
    (lambda r: r["checked"].remove("figures"), "checked: leaves out figures: a record is written only when"),
    (lambda r: r["checked"].append("identity_proved"), "checked[7]: 'identity_proved' is not one of"),
    (lambda r: r["rerun"].update(top1_agreement=0.5), "rerun.top1_agreement: 0.5 is below what a re-run that held"),
    (lambda r: r["rerun"].update(differing=3), "rerun.differing: 3 of 12 samples differ, beyond its tolerance 0"),
    (lambda r: r["rerun"].update(tolerance=0.9), "rerun.tolerance: 0.9 is above the largest allowed value 0.5"),
    (lambda r: r["rerun"].update(device="quantum"), "rerun.device: 'quantum' is not one of"),
    (lambda r: r.update(signed_by="maintainers"), "unknown key 'signed_by'"),
    (lambda r: r["entry"].update(file="other.json"), "entry.file: it verified other.json, not the entry.json"),
]


@pytest.mark.parametrize(("forge", "message"), FORGED)
def test_a_forged_record_is_refused_by_the_reader(evaluated, submission, capsys, forge, message):
    record = recorded(evaluated, submission, capsys)
    forge(record)
    (submission / VERIFICATION_JSON).write_text(json.dumps(record))
    with pytest.raises(HsiError) as caught:
        read_verification(submission / "entry.json", read_entry(submission / "entry.json"))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_record_of_other_bytes_is_stale_and_a_link_is_refused(evaluated, submission, capsys, tmp_path):
    record = recorded(evaluated, submission, capsys)
    assert check_record(record, "verification.json")["kind"] == "re-run"
    entry = read_entry(submission / "entry.json")
    assert read_verification(submission / "entry.json", entry).kind == "re-run"
    edit_entry(submission, lambda e: e.update(name="Renamed"))  # the entry rewritten since
    verified = read_verification(submission / "entry.json", read_entry(submission / "entry.json"))
    assert verified.stale and verified.kind is None
    (submission / VERIFICATION_JSON).unlink()
    (tmp_path / "elsewhere.json").write_text(json.dumps(record))
    (submission / VERIFICATION_JSON).symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(HsiError, match="verification record is a link; links are never followed"):
        read_verification(submission / "entry.json", entry)


def test_record_never_replaces_a_users_file(evaluated, submission, capsys):
    (submission / VERIFICATION_JSON).write_text("my notes\n")
    status, out, err = verify(submission, evaluated[1], capsys, "--record")
    assert status == 2 and "is not a verification record hsi leaderboard verify wrote: it is never replaced" in err
    assert (submission / VERIFICATION_JSON).read_text() == "my notes\n"


def test_a_failed_verification_records_nothing(evaluated, submission, capsys):
    edit_entry(submission, lambda e: e["figures"]["top1"].update(value=0.99))
    status, _, _ = verify(submission, evaluated[1], capsys, "--record")
    assert status == 1 and not (submission / VERIFICATION_JSON).exists()


def test_a_sample_predicted_on_one_side_only_agrees_in_neither():
    import pandas as pd

    from evaluation.orchestration.rerun_entry import compare_predictions

    def frame(rows):
        return pd.DataFrame(rows, columns=["key", "status", "pred_class", "top5_class"])

    submitted = frame(
        [
            ("a", "ok", 1, [1, 2]),
            ("b", "ok", 3, [3, 4]),
            ("c", "ok", 5, [5, 6]),
            ("d", "undecodable-sample", None, None),
            (None, "broken-shard", None, None),
        ]
    )
    rerun = frame(
        [
            ("a", "ok", 1, [2, 1]),  # the same classes in another order: top-5 agrees
            ("b", "ok", 3, [3, 9]),  # top-1 agrees, top-5 does not
            ("c", "undecodable-sample", None, None),  # a prediction withheld on one side
            ("d", "undecodable-sample", None, None),  # neither read it: not compared
        ]
    )
    agreement = compare_predictions(submitted, rerun)
    assert (agreement.samples, agreement.top1_same, agreement.top5_same) == (3, 2, 1)
    assert agreement.differing == ["b", "c"]
