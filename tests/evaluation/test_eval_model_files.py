"""`ep:FILE` (torch.export.save) and `onnx:FILE` (onnxruntime): the planted predictor exported both
ways gives `hsi eval` the predictions and eval.json metrics of its TorchScript file, with a dynamic
batch or a fixed one (run in chunks, the last padded); what these files cannot carry (--checkpoint,
--arch, a program in training mode, a CUDA run without the CUDA provider) is refused in one line."""

from __future__ import annotations

import hashlib
import json
import warnings

import pytest
import torch
from eval_cli import eval_args
from planted import build_planted
from tiny_models import export_onnx, export_program

from builder.core.errors import HsiError
from evaluation.model_formats.model_files import InputShape, ModelFileError, run_in_batches
from evaluation.model_formats.models import ModelError, ModelOptions, load_model
from evaluation.predicting.predictions import read_predictions
from hsi.cli import main

pytest.importorskip("onnxruntime")
EXAMPLE = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def exported(flat_parts, tmp_path_factory) -> dict:
    """The corner-rule planted predictor as .pt2 and .onnx files, with a dynamic and a fixed batch of 4."""
    folder = tmp_path_factory.mktemp("exported")
    module = build_planted(flat_parts[1], background_on_corner=True)
    fixed = EXAMPLE.repeat(2, 1, 1, 1)
    return {
        "ep": export_program(module, folder / "planted_corner.pt2", EXAMPLE),
        "onnx": export_onnx(module, folder / "planted_corner.onnx", EXAMPLE),
        "ep-fixed": export_program(module, folder / "planted_fixed.pt2", fixed, dynamic_batch=False),
        "onnx-fixed": export_onnx(module, folder / "planted_fixed.onnx", fixed, dynamic_batch=False),
    }


def evaluated(out, folder: str) -> tuple[dict, dict]:
    report = json.loads((out / folder / "eval.json").read_text())
    frame, _ = read_predictions(out / folder / "predictions.parquet")
    ok = frame[frame["status"] == "ok"].sort_values("key")
    return report, {
        "key": ok["key"].tolist(),
        "pred_class": ok["pred_class"].tolist(),
        "top5_class": [list(map(int, top)) for top in ok["top5_class"]],
    }


def test_ep_and_onnx_give_the_predictions_and_metrics_of_ts(paper_set, planted_corner, exported, tmp_path):
    out = tmp_path / "eval"
    specs = f"ts:{planted_corner},ep:{exported['ep']},onnx:{exported['onnx']}"
    assert main(eval_args(paper_set, specs, out, "--batch-size", "16")) == 0
    ts_report, ts_rows = evaluated(out, "ts_planted_corner.pt")
    metrics = ts_report["metrics"]
    # the planted rule: CeO, CoO, CeR right, CoR wrong (72 composites, 18 per group)
    assert metrics["samples"] == 72 and metrics["overall"]["top1"]["value"] == 0.75
    for kind, name in (("ep", "planted_corner.pt2"), ("onnx", "planted_corner.onnx")):
        report, rows = evaluated(out, f"{kind}_{name}")
        assert rows == ts_rows and report["metrics"] == metrics, kind
        assert report["model"]["spec"] == f"{kind}:{name}" and report["model"]["checkpoint"] == name
        assert report["model"]["checkpoint_sha256"] == hashlib.sha256(exported[kind].read_bytes()).hexdigest()
        assert report["preprocessing"]["input_size"] == [224, 224]  # fixed by the file, as the planted rule needs
    board = (out / "leaderboard.csv").read_text()
    assert "ep:planted_corner.pt2" in board and "onnx:planted_corner.onnx" in board


def test_fixed_batch_files_run_in_chunks_with_the_same_numbers(paper_set, planted_corner, exported, tmp_path):
    out = tmp_path / "eval"
    # batches of 6 on files exported for 4: a chunk of 4, then 2 padded to 4
    specs = f"ts:{planted_corner},ep:{exported['ep-fixed']},onnx:{exported['onnx-fixed']}"
    assert main(eval_args(paper_set, specs, out, "--batch-size", "6")) == 0
    ts_report, ts_rows = evaluated(out, "ts_planted_corner.pt")
    for folder in ("ep_planted_fixed.pt2", "onnx_planted_fixed.onnx"):
        report, rows = evaluated(out, folder)
        assert rows == ts_rows and report["metrics"] == ts_report["metrics"], folder
        assert any("takes a fixed batch of 4: run in chunks" in note for note in report["notes"]), report["notes"]


@pytest.mark.parametrize("shape", [InputShape(4, 4), InputShape(3, None), InputShape(1, 5), InputShape(2, 3)])
def test_run_in_batches_calls_the_file_only_with_sizes_it_accepts(shape):
    x = torch.arange(11, dtype=torch.float32).view(11, 1, 1, 1).expand(11, 3, 2, 2)
    seen = []

    def run(chunk):
        seen.append(len(chunk))
        return (chunk.mean((1, 2, 3))[:, None] * torch.ones(1, 5), "second output ignored")

    out = run_in_batches(run, x, shape)
    assert torch.equal(out, torch.arange(11, dtype=torch.float32)[:, None].expand(11, 5))
    assert all(shape.min_batch <= n and (shape.max_batch is None or n <= shape.max_batch) for n in seen), seen
    assert sum(seen) - 11 < shape.min_batch  # padding only tops up the last chunk
    run_in_batches(run, x[:1], shape)  # count_outputs' batch of one
    assert seen[-1] == max(1, shape.min_batch)


def test_a_spec_string_and_a_loaded_program_give_hsi_evaluate_the_same_metrics(paper_set, exported):
    import hsi
    from evaluation.analysis.bootstrap import BootstrapSettings

    quick = {"mean": 0, "std": 1, "workers": 0, "progress": False, "bootstrap": BootstrapSettings(resamples=100)}
    by_spec = hsi.evaluate(f"ep:{exported['ep']}", paper_set, **quick)
    # the README's recipe: torch.export.load(...).module() is an nn.Module like any other
    by_module = hsi.evaluate(torch.export.load(str(exported["ep"])).module(), paper_set, **quick)
    assert by_spec.metrics == by_module.metrics and by_spec.metrics["overall"]["top1"]["value"] == 0.75


def test_checkpoint_and_arch_are_refused_for_files_that_carry_their_weights(exported):
    for kind in ("ep", "onnx"):
        for options in (ModelOptions(checkpoint=exported[kind]), ModelOptions(arch="resnet18")):
            with pytest.raises(ModelError, match="carries its own weights and architecture; drop --checkpoint/--arch"):
                load_model(f"{kind}:{exported[kind]}", options)


def test_a_program_exported_in_training_mode_is_refused(tmp_path, capsys):
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(), torch.nn.Linear(144, 10)
    )
    program = torch.export.export(module.train(), (torch.zeros(2, 3, 8, 8),))
    torch.export.save(program, str(tmp_path / "train.pt2"))
    with pytest.raises(ModelFileError) as caught:
        load_model(f"ep:{tmp_path / 'train.pt2'}")
    assert "exported in training mode (aten.batch_norm.default run with training=True)" in str(caught.value)
    assert "model.eval() before torch.export.export" in str(caught.value)
    import hsi

    with pytest.raises(HsiError, match="runs aten.batch_norm.default in training mode: call model.eval()"):
        hsi.evaluate(torch.export.load(str(tmp_path / "train.pt2")).module(), tmp_path, mean=0, std=1)


def test_an_input_size_other_than_the_file_fixes_is_refused_before_any_work(paper_set, exported, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(eval_args(paper_set, f"onnx:{exported['onnx']}", out, "--input-size", "112")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hsi eval: error: onnx:") and len(err.splitlines()) == 1
    assert "takes 224x224 images (fixed when it was exported), not 112x112: drop --input-size" in err
    assert not list(out.glob("*/predictions.parquet"))


def test_a_cuda_run_without_the_cuda_provider_is_refused_not_run_on_the_cpu(exported):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider")
    module = load_model(f"onnx:{exported['onnx']}").module
    with pytest.raises(ModelFileError) as caught:
        module.session_for(torch.device("cuda"))  # what moving it to a CUDA device asks for
    message = str(caught.value)
    assert "CUDAExecutionProvider, which this onnxruntime lacks" in message and "pip install onnxruntime-gpu" in message
    assert "\n" not in message


@pytest.mark.gpu
def test_ep_and_onnx_on_cuda_give_the_cpu_predictions(exported):
    import onnxruntime

    x = EXAMPLE.repeat(3, 1, 1, 1)
    kinds = ["ep", "ep-fixed"]
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():  # onnxruntime-gpu
        kinds += ["onnx", "onnx-fixed"]
    for kind in kinds:
        module = load_model(f"{kind.split('-')[0]}:{exported[kind]}").module
        with torch.no_grad():
            cpu = module(x).argmax(1)
            cuda = module.to("cuda")(x.cuda()).argmax(1).cpu()
        assert torch.equal(cpu, cuda), kind


def test_torch_onnx_exports_default_external_weights_file_is_refused_with_the_flag_that_avoids_it(tmp_path):
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=8), torch.nn.Flatten(), torch.nn.LazyLinear(1000))
    module(EXAMPLE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (EXAMPLE,), str(tmp_path / "model.onnx"), dynamo=True, verbose=False)
    assert (tmp_path / "model.onnx.data").is_file()  # torch.onnx.export's default: weights beside the model
    with pytest.raises(ModelFileError) as caught:
        load_model(f"onnx:{tmp_path / 'model.onnx'}")
    message = str(caught.value)
    assert "is kept in an external data file ('model.onnx.data'), which is never read" in message
    assert "torch.onnx.export(..., external_data=False)" in message and "\n" not in message
    export_onnx(module, tmp_path / "one_file.onnx", EXAMPLE)  # ONNXProgram.save: one file
    assert load_model(f"onnx:{tmp_path / 'one_file.onnx'}").module(EXAMPLE).shape == (2, 1000)
