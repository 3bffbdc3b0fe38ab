"""The hostile-input sweep of issue 21's "Done when": what a fresh sweep over every model-half command
still found. A lock file linked to a stranger's file, flag values a user can type (a huge or
non-numeric input size, NaN or zero normalisation, a negative seed, an unknown device, NaN or
out-of-range training settings) are each one line and exit 2, with nothing touched or written.
Each test failed on the code before its fix (a traceback, a truncated foreign file, or a run that
trained or evaluated on NaN)."""

from __future__ import annotations

import hashlib

import pytest
from release_factory import make_composed_dataset, two_releases
from tiny_models import MeanColour
from trusted_code import sha256, trust_flags

from builder.core.errors import HsiError
from builder.core.locks import exclusive_folder, lock_path
from hsi.cli import main

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("adv-sweep")
    dataset = make_composed_dataset(root / "composed", splits={"train": 4, "val": 4, "test": 4}, shard_size=4)
    model = root / "colour.pt"
    torch.jit.trace(MeanColour(), torch.rand(1, 3, 224, 224)).save(str(model))
    return dataset, model


def refused(capsys, argv, command) -> str:
    """The one line a refused command prints: exit 2 (argparse's own exit for a flag's type), no traceback."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exit_:
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith(f"hsi {command}: error:")]
    assert len(lines) == 1, err
    return lines[0]


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the lock beside --out --------------------------------------------------------------------


def test_a_lock_file_linked_to_a_strangers_file_is_refused_and_the_file_is_untouched(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("the user's notes\n")
    before = digest(victim)
    out = tmp_path / "eval-output"
    lock_path(out).symlink_to(victim)
    with pytest.raises(HsiError, match="lock file.*is a link"):
        with exclusive_folder(out):
            pass
    assert digest(victim) == before and not out.exists()


def test_a_lock_file_that_is_a_folder_is_one_line(tmp_path):
    out = tmp_path / "eval-output"
    lock_path(out).mkdir()
    with pytest.raises(HsiError, match="lock file"):
        with exclusive_folder(out):
            pass


def test_eval_through_a_linked_lock_leaves_the_linked_file_as_it_was(setup, tmp_path, capsys):
    dataset, model = setup
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    before = digest(victim)
    out = tmp_path / "out"
    lock_path(out).symlink_to(victim)
    line = refused(
        capsys,
        ["eval", dataset, "--model", f"ts:{model}", *trust_flags(f"ts:{model}"), "--out", out, "--workers", "0"],
        "eval",
    )
    assert "is a link" in line
    assert digest(victim) == before and not out.exists()


def test_a_lock_left_by_an_earlier_run_is_reused(tmp_path):
    out = tmp_path / "out"
    with exclusive_folder(out):
        pass
    with exclusive_folder(out) as path:
        assert path.read_text().strip().isdigit()


# -- hsi eval's flags -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--input-size", "abc"], "--input-size takes S, H,W or 3,H,W"),
        (["--input-size", "99999999999"], "at most 8192"),
        (["--mean", "nan,1,1"], "--mean takes finite numbers"),
        (["--std", "0,0,0"], "--std divides the pixels"),
        (["--std", "inf"], "--std takes finite numbers"),
        (["--seed", "-1"], "--seed: must be a whole number"),
        (["--device", "xyz"], "--device 'xyz' is not a device"),
        (["--device", "meta"], "--device 'meta' is not supported"),
    ],
)
def test_eval_flags_a_user_can_type_are_one_line_before_any_output(setup, tmp_path, capsys, flags, says):
    dataset, model = setup
    out = tmp_path / "out"
    argv = [
        "eval",
        dataset,
        "--model",
        f"ts:{model}",
        *trust_flags(f"ts:{model}"),
        "--out",
        out,
        "--workers",
        "0",
        "--no-progress",
        *flags,
    ]
    assert says in refused(capsys, argv, "eval")
    assert not out.exists() or not any(out.rglob("*"))


def test_a_models_yaml_input_size_too_large_for_a_tensor_is_one_line(setup, tmp_path, capsys):
    dataset, model = setup
    listing = tmp_path / "models.yaml"
    listing.write_text(f'- {{model: "ts:{model}", input_size: 99999999999999999999}}\n')
    line = refused(capsys, ["eval", dataset, "--models", listing, "--out", tmp_path / "out", "--workers", "0"], "eval")
    assert "input_size: every side must lie in 1..8192" in line


# -- hsi train's flags ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--lr", "nan"], "--lr a finite number above 0"),
        (["--momentum", "inf"], "--momentum must be a finite number"),
        (["--weight-decay", "nan"], "--weight-decay must be a finite number"),
        (["--label-smoothing", "2"], "--label-smoothing must lie in [0, 1)"),
        (["--schedule", "step", "--step-epochs", "0"], "--step-epochs"),
        (["--warmup-epochs", "-1"], "--warmup-epochs must be at least 0"),
        (["--shuffle-buffer", "0"], "--shuffle-buffer at least 1"),
        (["--input-size", "0"], "--input-size must lie in 1..8192"),
        (["--input-size", "999999999"], "--input-size must lie in 1..8192"),
        (["--seeds", "0"], "--seeds: must be at least 1"),
        (["--method", "dfr", "--dfr-c", "nan"], "--dfr-c: takes finite numbers"),
        (["--method", "dfr", "--dfr-c", "0"], "--dfr-c lists inverse strengths"),
        (["--device", "xyz"], "--device 'xyz' is not a device"),
    ],
)
def test_train_flags_a_user_can_type_are_one_line_before_any_training(setup, tmp_path, capsys, flags, says):
    dataset, _ = setup
    out = tmp_path / "runs"
    argv = ["train", dataset, "--out", out, "--model", "test_efficientnet", "--epochs", "1", "--workers", "0"]
    assert says in refused(capsys, [*argv, "--device", "cpu", *flags], "train")
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))


# -- hsi probe's flags ------------------------------------------------------------------------


def test_a_negative_probe_seed_is_one_line(setup, tmp_path, capsys):
    _, model = setup
    line = refused(
        capsys,
        ["probe", "--model", f"ts:{model}", *trust_flags(f"ts:{model}"), "--out", tmp_path / "p", "--seed", "-1"],
        "probe",
    )
    assert "--seed: must be a whole number" in line


# -- hsi publish --to-git through a link --------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--yes"]])
def test_a_linked_mirror_folder_is_refused_and_what_it_leads_to_stays_empty(tmp_path, capsys, extra):
    v1, _ = two_releases(tmp_path / "releases")
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "mirror").symlink_to(real)
    argv = ["publish", v1, "--to-git", tmp_path / "mirror", "--version", "v1.0.0", *extra]
    assert "is a link" in refused(capsys, argv, "publish")
    assert list(real.iterdir()) == []


def test_a_checkpoint_for_a_torchscript_model_is_refused_not_ignored(tmp_path):
    """Found by the sweep: `- {model: ts:FILE, checkpoint: OTHER}` evaluated FILE and ignored OTHER."""
    from pathlib import Path

    from evaluation.model_formats.models import ModelError, ModelOptions, load_model

    with pytest.raises(ModelError, match="carries its own weights"):
        load_model(f"ts:{tmp_path / 'm.pt'}", ModelOptions(checkpoint=Path("/nonexistent/weights.pt")))


def test_eval_from_a_folder_says_it_is_a_folder(tmp_path, capsys):
    from hsi.cli import main

    assert main(["eval", "--from", str(tmp_path)]) == 2
    assert "is a folder, not a predictions file" in capsys.readouterr().err


# -- issue 30: a sweep proves its data once, and a changed shard refuses the whole run ---------------


@pytest.fixture
def two_models(tmp_path):
    """A composed test split of four shards, and models.yaml listing two models."""
    dataset = make_composed_dataset(tmp_path / "composed", splits={"test": 8}, shard_size=2)
    entries = []
    for name in ("colour-a.pt", "colour-b.pt"):
        torch.jit.trace(MeanColour(), torch.rand(1, 3, 224, 224)).save(str(tmp_path / name))
        digest = sha256(tmp_path / name)  # the test's own file, trusted by the listing
        entries.append(f'- {{model: "ts:{tmp_path / name}", trusted_sha256: "{digest}"}}\n')
    listing = tmp_path / "models.yaml"
    listing.write_text("".join(entries))
    return dataset, listing


def test_a_sweep_hashes_its_data_once_for_all_models(two_models, tmp_path, monkeypatch):
    import evaluation.predicting.verified_shards as verified

    dataset, listing = two_models
    hashed = []
    monkeypatch.setattr(verified, "sha256_file", lambda path: hashed.append(path.name) or digest(path))
    argv = ["eval", dataset, "--models", listing, "--out", tmp_path / "out", "--workers", "0", "--no-progress"]
    assert main([*map(str, argv), "--bootstrap", "10"]) == 0
    assert sorted(hashed) == [f"test-0000{n}.tar" for n in range(4)]  # once each, not once per model
    assert len(list((tmp_path / "out").glob("*/eval.json"))) == 2


def test_a_changed_shard_refuses_the_whole_sweep_in_one_line(two_models, tmp_path, capsys):
    dataset, listing = two_models
    shard = dataset / "test-00002.tar"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    out = tmp_path / "out"
    line = refused(capsys, ["eval", dataset, "--models", listing, "--out", out, "--workers", "0"], "eval")
    assert f"shard {shard} does not match the sha256 its manifest lists" in line
    assert "nothing was evaluated" in line and "others were evaluated" not in line
    assert not out.exists()  # no model folder, no failed.json, no leaderboard
