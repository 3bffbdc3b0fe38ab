"""`hsi probe` under hostile inputs (issue 21, points 4, 11 and 14 on the probe's side): links and
users' files in --out, a second run into the same folder, corrupt or linked cue-conflict stimuli, a
probes.json or eval.json that is not what it should be, the help's geometry and a degenerate
critical-band fit; and seeded mutation fuzz of the probe's readers (probes.json, eval.json, PNGs).

Every refusal is exit 2 with one line and no traceback; nothing outside --out is written."""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
from functools import reduce
from operator import getitem
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from fake_imagenet import write_tree
from png_factory import IMAGES, png_bytes
from probes.cue_conflict_factory import write_cue_conflict

from builder.core.errors import HsiError
from builder.core.locks import exclusive_folder
from builder.core.owned import RECORD_NAME
from evaluation.model_formats.models import Preprocessing
from evaluation.probes import channel, correlate
from evaluation.probes.report import render_model_markdown
from evaluation.probes.schema import eval_model, eval_values, read_eval, read_probes
from evaluation.probes.shape import CATEGORIES, run_shape
from hsi.cli import main


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("adv-probe")
    torch.manual_seed(0)
    checkpoint = root / "tiny.pth"
    torch.save(timm.create_model("test_efficientnet", pretrained=False).state_dict(), checkpoint)
    write_tree(root / "imagenet", count=4)
    return {
        "root": root,
        "checkpoint": checkpoint,
        "imagenet": root / "imagenet",
        "cue": write_cue_conflict(root / "cue"),
    }


def probe_args(inputs, out: Path, *extra: str, cue: Path | None = None, probes: str = "shape") -> list[str]:
    return [
        "probe",
        "--model",
        str(inputs["checkpoint"]),
        "--arch",
        "test_efficientnet",
        "--probes",
        probes,
        "--source",
        str(inputs["imagenet"]),
        "--limit",
        "1",
        "--cue-conflict",
        str(cue or inputs["cue"]),
        "--device",
        "cpu",
        "--batch-size",
        "8",
        "--out",
        str(out),
        *extra,
    ]


@pytest.fixture(scope="module")
def probed(inputs) -> dict:
    """One legitimate run of every probe: its --out (copied by the tests that attack it) and model folder."""
    out = inputs["root"] / "probed"
    assert main(probe_args(inputs, out, probes="spectral,critical-band,shape")) == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return {"out": out, "folder": folder.name, "report": json.loads((folder / "probes.json").read_text())}


def copy_of(probed, tmp_path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(probed["out"], out)
    return out


def refused(capsys, *phrases: str) -> str:
    """The run's stderr: progress lines, then the error as its one last line, no traceback."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines and lines[-1].startswith("hsi probe: error: "), err
    assert sum("error" in line for line in lines) == 1, err
    for phrase in phrases:
        assert phrase in lines[-1], err
    return err


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def valid_eval(report: dict) -> dict:
    """A small eval.json as `hsi eval` writes it, for the model a probes report describes."""
    metrics = {
        "overall": {"top1": {"value": 0.5}},
        "by_group": [{"group": "CoR", "top1": {"value": 0.25}}],
        "by_group_size": [{"group": "CoR", "size": 56, "top1": {"value": 0.2}}],
        "groups_summary": {"worst_group": {"group": "CoR", "value": 0.25}},
        "background_class": {"overall": {"share_of_errors": {"value": 0.3}}},
    }
    model = {k: report["model"][k] for k in ("spec", "checkpoint_sha256")}
    return {"schema": "hsi-eval/1", "model": model, "metrics": metrics, "clean": {"top1": {"value": 0.7}}}


# -- point 4: every file goes through the owned folder ----------------------------------------


def test_a_linked_out_is_refused_and_nothing_is_written_through_it(inputs, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, tmp_path / "out")
    assert main(probe_args(inputs, tmp_path / "out")) == 2
    refused(capsys, "is a link")
    assert not list(elsewhere.iterdir())


def test_a_linked_model_folder_is_refused_before_any_probe(inputs, probed, tmp_path, capsys):
    out = copy_of(probed, tmp_path)
    users = tmp_path / "users"
    users.mkdir()
    (users / "probes.md").write_text("my notes\n")
    shutil.rmtree(out / probed["folder"])
    os.symlink(users, out / probed["folder"])
    assert main(probe_args(inputs, out, "--overwrite")) == 2
    err = refused(capsys, "is a link or not a folder")
    assert "shape bias on" not in err
    assert snapshot(users) == {"probes.md": b"my notes\n"}


def test_linked_cross_model_files_are_refused(inputs, probed, tmp_path, capsys):
    out = copy_of(probed, tmp_path)
    evals = tmp_path / "evals" / probed["folder"]
    evals.mkdir(parents=True)
    (evals / "eval.json").write_text(json.dumps(valid_eval(probed["report"])))
    users = tmp_path / "users"
    users.mkdir()
    (users / "leaderboard.md").write_text("mine\n")
    os.symlink(users / "leaderboard.md", out / "probe_table.md")
    os.symlink(users, out / "plots")
    assert main(probe_args(inputs, out, "--eval-dir", str(tmp_path / "evals"), "--bootstrap", "10")) == 2
    refused(capsys, "probe_table.md", "is a link")
    os.unlink(out / "probe_table.md")
    assert main(probe_args(inputs, out, "--eval-dir", str(tmp_path / "evals"), "--bootstrap", "10")) == 2
    refused(capsys, "plots", "is a link")
    assert snapshot(users) == {"leaderboard.md": b"mine\n"}
    os.unlink(out / "plots")
    assert main(probe_args(inputs, out, "--eval-dir", str(tmp_path / "evals"), "--bootstrap", "10")) == 0
    assert (out / "probe_table.md").is_file()
    assert not (out / "plots" / "probe_scatter.png").exists()  # one model: a table, no scatter of one point
    assert json.loads((out / RECORD_NAME).read_text())["files"].keys() >= {"probe_table.md", "correlations.md"}


def test_a_second_run_into_the_same_folder_at_once_is_refused(inputs, probed, tmp_path, capsys):
    out = copy_of(probed, tmp_path)
    before = snapshot(out)
    with exclusive_folder(out.resolve()):  # another `hsi probe` holding the folder
        assert main(probe_args(inputs, out, "--overwrite")) == 2
    refused(capsys, "is being written by another hsi run")
    assert snapshot(out) == before


def test_a_users_file_in_out_is_never_overwritten(inputs, probed, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep\n")
    assert main(probe_args(inputs, mine)) == 2
    refused(capsys, RECORD_NAME)
    assert snapshot(mine) == {"notes.txt": b"keep\n"}
    out = copy_of(probed, tmp_path)
    edited = out / probed["folder"] / "probes.md"
    edited.write_text("edited by hand\n")
    assert main(probe_args(inputs, out, "--overwrite")) == 2
    refused(capsys, "was not written by this command")
    assert edited.read_text() == "edited by hand\n"


# -- point 11: stimuli, probes.json and eval.json are data -----------------------------------


def test_a_corrupt_png_and_a_link_among_the_stimuli_are_skipped_and_counted(inputs, tmp_path, capsys):
    cue = write_cue_conflict(tmp_path / "cue")
    (cue / "cat" / "cat5-dog5.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    outside = tmp_path / "outside.png"
    outside.write_bytes(png_bytes(IMAGES["rgb odd width"]))
    os.symlink(outside, cue / "dog" / "dog5-cat5.png")
    out = tmp_path / "out"
    assert main(probe_args(inputs, out, cue=cue)) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    shape = json.loads((folder / "probes.json").read_text())["shape"]
    reasons = {row["key"]: row["reason"] for row in shape["errors"]}
    assert reasons == {"cat/cat5-dog5.png": "unreadable-image", "dog/dog5-cat5.png": "linked-stimulus"}
    assert shape["images"] == 17  # the 17 good stimuli, not the two skipped
    assert "2 stimuli skipped (1 linked-stimulus, 1 unreadable-image" in (folder / "probes.md").read_text()


def test_a_linked_class_folder_is_refused_in_one_line(inputs, tmp_path, capsys):
    cue = write_cue_conflict(tmp_path / "cue")
    shutil.move(cue / "oven", tmp_path / "oven")
    os.symlink(tmp_path / "oven", cue / "oven")
    assert main(probe_args(inputs, tmp_path / "out", cue=cue)) == 2
    refused(capsys, "oven is a link")


def test_a_list_in_probes_json_is_one_line(inputs, probed, tmp_path, capsys):
    out = copy_of(probed, tmp_path)
    target = out / probed["folder"] / "probes.json"
    target.write_text("[]\n")
    assert main(probe_args(inputs, out, probes="spectral,critical-band,shape")) == 2
    refused(capsys, "was not written by this command")  # a file changed since: neither read nor replaced
    assert target.read_text() == "[]\n"
    record = json.loads((out / RECORD_NAME).read_text())  # even with a record that vouches for it
    from builder.core.hashing import sha256_file

    record["files"][f"{probed['folder']}/probes.json"] = sha256_file(target)
    (out / RECORD_NAME).write_text(json.dumps(record))
    assert main(probe_args(inputs, out, probes="spectral,critical-band,shape")) == 2
    refused(capsys, "probes.json: expected an object, got a list", "--overwrite")


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        ("[1, 2]", "eval.json: expected an object, got a list"),
        ('{"model": {"spec": "x"}, "metrics": ', "eval.json is not valid JSON"),
        ("BAD-TOP1", "metrics.by_group[0].top1.value: expected a number, got 'abc'"),
    ],
)
def test_a_bad_eval_json_is_refused_before_any_probe(inputs, probed, tmp_path, capsys, content, phrase):
    evals = tmp_path / "evals" / probed["folder"]
    evals.mkdir(parents=True)
    if content == "BAD-TOP1":
        report = valid_eval(probed["report"])
        report["metrics"]["by_group"][0]["top1"]["value"] = "abc"
        content = json.dumps(report)
    (evals / "eval.json").write_text(content)
    out = tmp_path / "out"
    assert main(probe_args(inputs, out, "--eval-dir", str(tmp_path / "evals"))) == 2
    err = refused(capsys, phrase, str(evals / "eval.json"))
    assert "shape bias on" not in err and not list(out.glob("*/probes.json"))


# -- point 14: the help and the degenerate fit say what is so ----------------------------------


def test_probe_help_says_what_the_probes_do_to_an_image(capsys):
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "canvas as it is" not in text
    assert "shorter side resized to 256, then a centre crop of 224 x 224" in text
    assert "Cue-conflict stimuli (shape): resized to 224 x 224 if they differ, no crop" in text


def test_a_degenerate_fit_gives_its_cause_and_no_bandwidth():
    matrix = np.full((5, 7), 0.40)  # clean accuracy 0.40 under the 50% absolute criterion
    band = channel.summarise(matrix, "absolute", 0.5)
    assert band["degenerate"] and band["bandwidth_octaves"] is None and band["centre_frequency"] is None
    assert "noise-free accuracy (0.40) is not above the absolute criterion (50%)" in band["cause"]
    assert "--criterion relative" in band["suggestion"]
    report = {"model": {"spec": "m"}, "preprocessing": {"description": "d"}, "critical_band": {"images": 5, **band}}
    text = render_model_markdown(report)
    assert "Bandwidth n/a" in text and "--criterion relative" in text and "0.40" in text
    assert "octaves**" not in text and "**bandwidth" not in text  # no figure for a fit that is no channel
    assert correlate.bias_values(report)["cb_bandwidth"] is None


def test_a_degenerate_fit_is_announced_with_its_cause(probed):
    band = probed["report"]["critical_band"]  # a random-init model: no image right, below any criterion
    assert band["degenerate"] and band["bandwidth_octaves"] is None
    assert "absolute criterion" in band["cause"] and "--criterion relative" in band["suggestion"]
    text = (probed["out"] / probed["folder"] / "probes.md").read_text()
    assert "Bandwidth n/a" in text and "**bandwidth" not in text


# -- fuzz of the readers ----------------------------------------------------------------------

JUNK = [None, [], {}, "abc", "", -1, 10**30, 1.5, 7, True, [1, "x"], {"value": "x"}, {"a": {}}]


def _mutated_json(rng: random.Random, data) -> bytes:
    """A structural change (a node replaced by junk, or removed) and sometimes byte damage on top."""
    data = copy.deepcopy(data)
    paths: list[tuple] = []

    def walk(node, prefix):
        paths.append(prefix)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            walk(value, (*prefix, key))

    walk(data, ())
    for _ in range(rng.randrange(1, 3)):
        path = rng.choice(paths)
        try:
            parent = reduce(getitem, path[:-1], data)
        except (KeyError, IndexError, TypeError):
            continue
        if not path:
            data = copy.deepcopy(rng.choice(JUNK))
            break
        if isinstance(parent, dict) and rng.random() < 0.25:
            parent.pop(path[-1], None)
        elif isinstance(parent, (dict, list)):
            try:
                parent[path[-1]] = copy.deepcopy(rng.choice(JUNK))
            except (IndexError, KeyError, TypeError):  # an earlier change moved the node
                continue
    text = json.dumps(data).encode()
    damage = rng.randrange(6)
    if damage == 0 and text:
        return text[: rng.randrange(len(text))]
    if damage == 1 and text:
        i = rng.randrange(len(text))
        return text[:i] + bytes([text[i] ^ (1 << rng.randrange(8))]) + text[i + 1 :]
    if damage == 2:
        return text.replace(b"0.", b"NaN", 1)
    return text


def _outcomes(rng, original, path: Path, read, rounds: int) -> tuple[int, int]:
    valid = refusals = 0
    for _ in range(rounds):
        path.write_bytes(_mutated_json(rng, original))
        try:
            read(path)
        except HsiError as error:
            assert "\n" not in str(error), str(error)
            refusals += 1
        else:
            valid += 1
    return valid, refusals


def test_mutated_probes_json_is_read_or_refused_in_one_line(probed, tmp_path):
    report = probed["report"]
    evaluation = valid_eval(report)

    def read(path):
        back = read_probes(path, report["identity"])
        if back is not None:
            rows = correlate.table_rows([("m", back, evaluation)])
            correlate.correlations(rows * 3, resamples=5)

    valid, refusals = _outcomes(random.Random(21), report, tmp_path / "probes.json", read, 300)
    assert valid > 20 and refusals > 20  # the mutations reach both outcomes, not only the syntax check


def test_mutated_eval_json_is_read_or_refused_in_one_line(probed, tmp_path):
    original = valid_eval(probed["report"])

    def read(path):
        report = read_eval(path)
        eval_model(report, path)
        rows = correlate.table_rows([("m", probed["report"], report)])
        assert set(eval_values(report, path)) <= set(rows[0])
        correlate.correlations(rows * 3, resamples=5)

    valid, refusals = _outcomes(random.Random(11), original, tmp_path / "eval.json", read, 300)
    assert valid > 20 and refusals > 20


class _Uniform:
    """A ProbeModel stand-in: the same probabilities for every image (the reader is what is fuzzed)."""

    def probabilities(self, images):
        return np.full((len(images), 1000), 1e-3, np.float32)


def test_mutated_stimulus_pngs_are_used_or_skipped_with_a_reason(tmp_path):
    from test_adv_png_fuzz import _mutate

    cue = write_cue_conflict(tmp_path / "cue")
    target = cue / CATEGORIES[3] / next(p.name for p in (cue / CATEGORIES[3]).iterdir())
    originals = [png_bytes(IMAGES[name]) for name in ("rgb odd width", "grey", "rgba", "palette", "16-bit grey")]
    pre = Preprocessing(input_size=(32, 32))
    rng, skipped = random.Random(5), 0
    for _ in range(150):
        target.write_bytes(_mutate(rng, rng.choice(originals)))
        result = run_shape(_Uniform(), cue, pre, batch_size=32)
        errors = result.get("errors", [])
        assert result["images"] + len(errors) == 17
        skipped += len(errors)
        assert all(row["key"] == f"{CATEGORIES[3]}/{target.name}" and row["reason"] for row in errors)
    assert skipped > 10
