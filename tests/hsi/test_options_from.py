"""`options_from`: an option object filled from a command's flags by field name, refusing a field
no flag gives; and every command that builds one from its flags finds all its fields."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest

from hsi.cli import build_parser
from hsi.commands.common import OptionsMismatch, options_from, run_options


@dataclass(frozen=True)
class Knobs:
    size: int
    name: str = "plain"
    verbose: bool = False


def test_fields_come_from_the_flags_by_name_and_overrides_win():
    args = argparse.Namespace(size=3, name="flag", verbose=True, unrelated="ignored")
    assert options_from(args, Knobs) == Knobs(3, "flag", True)
    assert options_from(args, Knobs, name="override") == Knobs(3, "override", True)


def test_a_settings_object_is_a_source_too():
    assert options_from(Knobs(5, "other"), Knobs, verbose=True) == Knobs(5, "other", True)


def test_a_field_no_flag_gives_is_refused_by_name_even_with_a_default():
    with pytest.raises(OptionsMismatch, match="Knobs: no flag and no override gives name, verbose; add the flag"):
        options_from(argparse.Namespace(size=3), Knobs)
    assert options_from(argparse.Namespace(size=3), Knobs, name="plain", verbose=False) == Knobs(3)


def test_an_override_that_is_no_field_is_refused():
    with pytest.raises(OptionsMismatch, match="Knobs has no field colour; its fields are size, name, verbose"):
        options_from(argparse.Namespace(size=3, name="n", verbose=False), Knobs, colour="red")


def test_a_mismatch_is_a_programming_error_not_a_usage_error():
    from builder.core.errors import HsiError

    assert not issubclass(OptionsMismatch, HsiError)  # hsi.cli lets it through as a traceback (exit 1)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_hsi_train_flags_build_the_settings_method_options_and_run_control():
    pytest.importorskip("torch")
    from hsi.commands.train import settings_from
    from training.data import Augmentation
    from training.gradmix import GradMixOptions
    from training.loop import TrainSettings
    from training.run import MethodOptions, RunControl

    args = parse(
        "train", "data/cfg", "--out", "runs", "--lr", "0.05", "--no-amp", "--no-flip", "--train-groups", "CeO,CoO",
        "--method", "dfr", "--dfr-c", "1,0.1", "--erm-run", "erm-run", "--resume", "--workers", "2",
    )  # fmt: skip
    assert settings_from(args) == TrainSettings(
        source="data/cfg",
        out="runs",
        lr=0.05,
        amp=False,
        augmentation=Augmentation(flip=False),
        mixing=GradMixOptions(),
        train_groups=("CeO", "CoO"),
        workers=2,
    )
    assert options_from(args, MethodOptions) == MethodOptions("dfr", dfr_c=(1.0, 0.1), erm_run=Path("erm-run"))
    assert options_from(args, RunControl, announce=print) == RunControl(resume=True)


def test_hsi_eval_probe_and_scgs_flags_give_every_field_of_their_options():
    pytest.importorskip("torch")
    from builder.augment.stage import ScgsOptions
    from builder.backends.sd_inpaint import GenerationSettings
    from builder.core.stage import RunOptions
    from evaluation.analysis.bootstrap import BootstrapSettings
    from evaluation.orchestration.pipeline import RunSettings
    from evaluation.probes.pipeline import ProbeSettings

    evaluated = parse("eval", "data/cfg", "--model", "timm:resnet18", "--amp", "--clean-split", "train", "--limit", "9")
    bootstrap = BootstrapSettings()
    settings = options_from(
        evaluated,
        RunSettings,
        split="val",
        progress=False,
        bootstrap=bootstrap,
        clean_root=None,
        parts_dir=None,
        part=None,
    )
    assert settings == RunSettings(split="val", amp=True, limit=9, progress=False, clean_split="train")

    probed = parse("probe", "--model", "timm:resnet18", "--criterion-level", "0.4", "--limit", "5")
    assert options_from(probed, ProbeSettings, probes=("spectral",), progress=not probed.no_progress) == ProbeSettings(
        probes=("spectral",), criterion_level=0.4, limit=5, progress=True
    )

    scgs = parse("scgs", "src", "--out", "o", "--mask", "random", "--steps", "4", "--sd-batch-size", "2")
    assert options_from(scgs, ScgsOptions) == ScgsOptions(mask="random")
    generation = options_from(scgs, GenerationSettings, paste_back=True, batch_size=scgs.sd_batch_size)
    assert generation == GenerationSettings(steps=4, batch_size=2)
    assert run_options(scgs, gpus=(1,)) == RunOptions(gpus=(1,))


class _Reached(Exception):
    """Stops `hsi eval` once the settings it built reached the evaluation."""


def test_hsi_eval_flags_reach_the_settings_the_evaluation_gets(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import evaluation.orchestration.runs
    from hsi.cli import main

    seen = {}

    def evaluate(specs, source, owned, settings, announce, on_result, entries, **running):
        seen.update(specs=specs, settings=settings, running=running)
        raise _Reached

    monkeypatch.setattr(evaluation.orchestration.runs, "evaluate_all", evaluate)  # where `hsi eval`'s run looks it up
    source = tmp_path / "cfg"
    source.mkdir()
    argv = ["eval", str(source), "--model", "timm:resnet18", "--split", "val", "--out", str(tmp_path / "o")]
    with pytest.raises(_Reached):
        main([*argv, "--batch-size", "3", "--workers", "0", "--label-space", "subset", "--overwrite"])
    settings = seen["settings"]
    assert (settings.batch_size, settings.workers, settings.label_space, settings.overwrite) == (3, 0, "subset", True)
    assert (settings.split, settings.progress, settings.config) == ("val", True, None)
    assert [spec for spec, _ in seen["specs"]] == ["timm:resnet18"]
    assert seen["running"] == {"runner": "local", "workers": None, "ray_address": None, "slurm": None}
    with pytest.raises(_Reached):
        main([*argv, "--model-workers", "2"])
    assert seen["running"] == {"runner": "local", "workers": 2, "ray_address": None, "slurm": None}
