"""Models that load but cannot classify the images: a TorchScript classifier built for 32 px fed
224, one that fails on the first real batch, an ONNX model onnxruntime cannot run on the input, a
torch.export program whose weight does not fit its graph, and a model that outputs NaN.

Each is one line naming the model, the input shape and the first line of the cause (exit status
2, no traceback), and the output folder is left as a refused run leaves it: a new one not created,
an existing one exactly as it was (no predictions.parquet, nothing `hsi release --results` would
publish).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch
from release_factory import make_composed_dataset
from tiny_models import MeanColour
from trusted_code import trust_flags

from hsi.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")

HINT = "(check that it is the model you meant and the input size it takes, --input-size)"


class Built32(torch.nn.Module):
    """A classifier whose linear layer takes 3 x 32 x 32 pixels, flattened."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3 * 32 * 32, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flatten(1))


class OneImageOnly(torch.nn.Module):
    """Classifies one image a call (the load-time check passes), fails on a real batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] != 1:
            raise RuntimeError("this model takes one image at a time")
        return torch.cat([x.mean((2, 3))] * 334, 1)[:, :1000]


class NotANumber(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x.mean((2, 3))] * 334, 1)[:, :1000] * float("nan")


def scripted(module: torch.nn.Module, path: Path) -> Path:
    torch.jit.save(torch.jit.script(module), str(path))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("adv-failing")
    dataset = make_composed_dataset(root / "data", splits={"test": 6}, shard_size=3)
    good = scripted(MeanColour(), root / "colour.pt")
    return dataset, good


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(capsys, setup, spec: str, out: Path, *flags: str) -> str:
    dataset, _ = setup
    argv = ["eval", str(dataset), "--model", spec, *trust_flags(spec), "--out", str(out), "--workers", "0"]
    code = main([*argv, "--no-progress", "--bootstrap", "20", "--batch-size", "4", *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def check_left_as_refused(capsys, setup, spec: str, tmp_path: Path, expected: str, *flags: str) -> None:
    """The exact line, for a new output folder (not created) and for one holding an earlier model's
    evaluation (left byte for byte as it was)."""
    assert refused(capsys, setup, spec, tmp_path / "new", *flags) == expected
    assert not (tmp_path / "new").exists()
    dataset, good = setup
    earlier = tmp_path / "earlier"
    argv = ["eval", str(dataset), "--model", f"ts:{good}", *trust_flags(f"ts:{good}"), "--out", str(earlier)]
    assert main([*argv, "--workers", "0", "--no-progress", "--bootstrap", "20"]) == 0
    capsys.readouterr()
    before = listing(earlier)
    assert refused(capsys, setup, spec, earlier, *flags) == expected
    assert listing(earlier) == before


def test_a_torchscript_classifier_built_for_32_px_fed_224(setup, tmp_path, capsys):
    path = scripted(Built32(), tmp_path / "built32.pt")
    expected = (
        "hsi eval: error: ts:built32.pt: its forward pass failed on a 1 x 3 x 224 x 224 input: RuntimeError: mat1 "
        f"and mat2 shapes cannot be multiplied (1x150528 and 3072x1000) {HINT}"
    )
    check_left_as_refused(capsys, setup, f"ts:{path}", tmp_path, expected)


def test_a_model_failing_on_the_first_real_batch(setup, tmp_path, capsys):
    path = scripted(OneImageOnly(), tmp_path / "one_image.pt")
    expected = (
        "hsi eval: error: ts:one_image.pt: its forward pass failed on a 4 x 3 x 224 x 224 input: RuntimeError: this "
        f"model takes one image at a time {HINT}"
    )
    check_left_as_refused(capsys, setup, f"ts:{path}", tmp_path, expected)


def test_a_model_that_outputs_nan(setup, tmp_path, capsys):
    path = scripted(NotANumber(), tmp_path / "nan.pt")
    expected = (
        "hsi eval: error: ts:nan.pt: it returned NaN (NaN or infinite outputs) for 4 of 4 images of a 4 x 3 x 224 x "
        "224 input: no prediction can be made of them (check its weights and --mean/--std)"
    )
    check_left_as_refused(capsys, setup, f"ts:{path}", tmp_path, expected)


def test_an_exported_program_whose_weight_does_not_fit_its_graph(setup, tmp_path, capsys):
    program = tmp_path / "colour.pt2"
    dims = {"x": {0: torch.export.Dim("b")}}
    torch.export.save(
        torch.export.export(MeanColour().eval(), (torch.rand(2, 3, 32, 32),), dynamic_shapes=dims), program
    )
    # its weight as 2 x 1000 where the graph multiplies 3 channels: a plain archive, every check passes
    with zipfile.ZipFile(program) as archive:
        records = {name: archive.read(name) for name in archive.namelist()}
    config_name = next(name for name in records if name.endswith("data/weights/model_weights_config.json"))
    config = json.loads(records[config_name])
    meta = config["config"]["weight"]
    meta["tensor_meta"]["sizes"] = [{"as_int": 2}, {"as_int": 1000}]
    meta["tensor_meta"]["strides"] = [{"as_int": 1000}, {"as_int": 1}]
    records[config_name] = json.dumps(config).encode()
    weight = config_name.replace("model_weights_config.json", meta["path_name"])
    records[weight] = records[weight][: 2 * 1000 * 4]
    path = tmp_path / "misfit.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in records.items():
            archive.writestr(name, data)
    expected = (
        "hsi eval: error: ep:misfit.pt2: its forward pass failed on a 1 x 3 x 32 x 32 input: RuntimeError: mat1 and "
        f"mat2 shapes cannot be multiplied (1x3 and 2x1000) {HINT}"
    )
    check_left_as_refused(capsys, setup, f"ep:{path}", tmp_path, expected)


def test_an_onnx_model_onnxruntime_cannot_run_on_the_input(setup, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    # any height and width declared, but a weight for 3 x 32 x 32 flattened pixels
    weight = numpy_helper.from_array(torch.rand(3 * 32 * 32, 1000).numpy(), "weight")
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["flat"]), helper.make_node("MatMul", ["flat", "weight"], ["logits"])],
        "built_for_32",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "built32.onnx"
    onnx.save(model, str(path))
    err = refused(capsys, setup, f"onnx:{path}", tmp_path / "new")
    # onnxruntime's own words after its status code; the shapes it names are the input's
    assert err.startswith(
        "hsi eval: error: onnx:built32.onnx: its forward pass failed on a 1 x 3 x 224 x 224 input: Fail: "
        "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running MatMul node."
    ), err
    assert err.endswith(HINT) and not (tmp_path / "new").exists()


def test_predictions_a_report_would_refuse_are_never_written(setup, tmp_path, capsys, monkeypatch):
    """Were NaN to pass the forward check, the predictions are read as the report reads them before
    any is written: one line naming the table, and no model folder holding only predictions.parquet."""
    import evaluation.predicting.predict as predict

    monkeypatch.setattr(predict, "check_finite", lambda probs, spec, shape: None)
    path = scripted(NotANumber(), tmp_path / "nan.pt")
    err = refused(capsys, setup, f"ts:{path}", tmp_path / "new")
    assert err == (
        "hsi eval: error: ts:nan.pt: its predictions cannot be reported, so nothing was written: predictions.parquet: "
        "column top5_prob: row 1 (test_000000) holds nan, which is not a probability in [0, 1]"
    )
    assert not (tmp_path / "new").exists()
