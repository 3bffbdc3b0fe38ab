"""`hsi eval --amp [fp16|bf16]`: a bare --amp is fp16 as before (recorded as true, so older runs
compare), bf16 is recorded by name, anything else is refused by the parser; off CUDA no autocast."""

from __future__ import annotations

import pytest

from hsi.cli import build_parser


def amp_of(*flags: str):
    return build_parser().parse_args(["eval", "data/cfg", "--model", "timm:resnet18", *flags]).amp


def test_amp_flag_values():
    assert amp_of() is False
    assert amp_of("--amp") is True and amp_of("--amp", "fp16") is True
    assert amp_of("--amp", "bf16") == "bf16"
    assert amp_of("--amp", "--channels-last") is True


def test_amp_refuses_other_dtypes(capsys):
    with pytest.raises(SystemExit) as stopped:
        amp_of("--amp", "fp32")
    assert stopped.value.code == 2 and "takes fp16 or bf16, got 'fp32'" in capsys.readouterr().err


def test_the_classifier_autocasts_in_the_asked_dtype_on_cuda_only():
    torch = pytest.importorskip("torch")
    from evaluation.model_formats.models import LoadedModel
    from evaluation.predicting.predict import Classifier

    class Space:
        outputs = list(range(1000))
        class_index = list(range(1000))

    loaded = LoadedModel("test", torch.nn.Linear(3, 1000), type("Pre", (), {"mean": (0, 0, 0), "std": (1, 1, 1)})())
    on_cpu = Classifier(loaded, Space(), torch.device("cpu"), amp="bf16")
    assert on_cpu.amp is False  # the CPU runs float32 whatever --amp says
    assert on_cpu.amp_dtype == torch.bfloat16
    assert Classifier(loaded, Space(), torch.device("cpu"), amp=True).amp_dtype == torch.float16
