"""Model files from a stranger, attacked: `.pt2` archives (torch.export.save) rewritten to carry
pickles (a weight or constant with use_pickle, a legacy weights file, custom and opaque objects,
example inputs only the full unpickler reads), code (a shape expression sympify would run, a graph
node calling torch.save, a parameter name or a stack trace that would break into the source FX
compiles, native AOTInductor code), zips that are not pt2 archives, truncated files and links; and
ONNX models with external data, two inputs, the wrong rank, or no ONNX at all.

Each is refused by `hsi eval --model ep:FILE / onnx:FILE` in one line naming the file and the reason,
with exit status 2, before anything is unpickled: the payloads create a marker file when unpickled
or evaluated, full unpickling is made to fail loudly, and the markers must not exist afterwards.
Where torch itself would run the payload, a test shows it does, so the refusal is not theoretical.
"""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from release_factory import make_composed_dataset

from hsi.cli import main

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


class CreatesFile:
    """Unpickling this creates `path`: proof that something unpickled it."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


class MeanColour(torch.nn.Module):
    """A 1000-way classifier of the image's mean colour with a batch norm: weights, buffers, one input."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = torch.nn.BatchNorm2d(3)
        self.linear = torch.nn.Linear(3, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(x).mean((2, 3)))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_composed_dataset(tmp_path_factory.mktemp("adv-model-files") / "data", splits={"test": 4})


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    """A genuine archive of MeanColour with a dynamic batch (the base every hostile archive edits)."""
    path = tmp_path_factory.mktemp("pt2") / "mean_colour.pt2"
    example = torch.rand(2, 3, 32, 32)
    exported = torch.export.export(MeanColour().eval(), (example,), dynamic_shapes={"x": {0: torch.export.Dim("b")}})
    torch.export.save(exported, str(path))
    return path


@pytest.fixture
def no_unpickling(monkeypatch):
    """Full unpickling fails the test loudly (torch.load without weights_only, pickle.loads, torch's
    object unpickler); the restricted unpickler (weights_only=True) stays allowed."""
    attempts: list[str] = []
    real_load = torch.load

    def guarded_load(*args, **kwargs):
        if kwargs.get("weights_only") is not True:
            attempts.append("torch.load")
            raise AssertionError("torch.load without weights_only=True")
        return real_load(*args, **kwargs)

    def refuse(name):
        def refused(*args, **kwargs):
            attempts.append(name)
            raise AssertionError(f"{name} called")

        return refused

    monkeypatch.setattr(torch, "load", guarded_load)
    monkeypatch.setattr(pickle, "loads", refuse("pickle.loads"))
    monkeypatch.setattr(torch._C, "_pickle_load_obj", refuse("torch._C._pickle_load_obj"))
    return attempts


def members(path: Path) -> tuple[str, dict[str, bytes]]:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        root = names[0].split("/", 1)[0]
        return root, {name[len(root) + 1 :]: archive.read(name) for name in names}


def rewritten(
    source: Path,
    target: Path,
    change: Callable[[dict[str, bytes]], None],
    compression: int = zipfile.ZIP_STORED,
    top_level: dict[str, bytes] | None = None,
) -> Path:
    """A copy of the archive at `source` whose members (names below the root folder) `change` edits,
    with `top_level` members added outside the root folder."""
    root, records = members(source)
    change(records)
    with zipfile.ZipFile(target, "w", compression) as archive:
        for name, data in records.items():
            archive.writestr(f"{root}/{name}", data)
        for name, data in (top_level or {}).items():
            archive.writestr(name, data)
    return target


def edit_json(records: dict[str, bytes], name: str, change: Callable[[dict], None]) -> None:
    value = json.loads(records[name])
    change(value)
    records[name] = json.dumps(value).encode()


def refused(capsys, dataset: Path, spec: str, out: Path, *needles: str) -> str:
    code = main(["eval", str(dataset), "--model", spec, "--out", str(out), "--workers", "0", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"hsi eval: error: {spec.split(':', 1)[0]}:"), err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not list(out.glob("*/predictions.parquet"))
    return err


WEIGHTS_CONFIG = "data/weights/model_weights_config.json"
CONSTANTS_CONFIG = "data/constants/model_constants_config.json"
MODEL_JSON = "models/model.json"


def pickled_weight(marker: Path):
    def change(records):
        edit_json(records, WEIGHTS_CONFIG, lambda c: c["config"]["linear.weight"].update(use_pickle=True))
        path_name = json.loads(records[WEIGHTS_CONFIG])["config"]["linear.weight"]["path_name"]
        records[f"data/weights/{path_name}"] = pickle.dumps(CreatesFile(marker))

    return change


def pickled_constant(marker: Path):
    def change(records):
        meta = {"path_name": "tensor_0", "is_param": False, "use_pickle": True, "tensor_meta": None}
        edit_json(records, CONSTANTS_CONFIG, lambda c: c["config"].update(c0=meta))
        records["data/constants/tensor_0"] = pickle.dumps(CreatesFile(marker))

    return change


def added(name: str):
    def make(marker: Path):
        return lambda records: records.update({name: pickle.dumps(CreatesFile(marker))})

    return make


def example_inputs(marker: Path):
    def change(records):
        buffer = io.BytesIO()
        torch.save(((CreatesFile(marker),), {}), buffer)  # a torch.save file only the full unpickler reads
        records["data/sample_inputs/model.pt"] = buffer.getvalue()

    return change


def program_edit(change_program: Callable[[dict, Path], None]):
    def make(marker: Path):
        return lambda records: edit_json(records, MODEL_JSON, lambda p: change_program(p, marker))

    return make


def nodes(program: dict) -> list[dict]:
    return program["graph_module"]["graph"]["nodes"]


def input_size_expression(program: dict) -> dict:
    """The symbolic batch size of the input x, as the program's JSON holds it."""
    return program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"]


def code_in_expression(program: dict, marker: Path) -> None:
    expr = input_size_expression(program)
    expr["expr_str"] = f"__import__('pathlib').Path({str(marker)!r}).touch() or {expr['expr_str']}"


def graph_calls_torch_save(program: dict, marker: Path) -> None:
    nodes(program)[0]["target"] = "torch.save"


def name_breaks_out(program: dict, marker: Path) -> None:
    spec = next(s for s in program["graph_module"]["signature"]["input_specs"] if "buffer" in s)
    spec["buffer"]["buffer_name"] = f'norm")+getattr(__import__("pathlib"),"Path")("{marker}")+("'


def carriage_return(program: dict, marker: Path) -> None:
    nodes(program)[0]["metadata"]["stack_trace"] = "File \"x.py\", line 1, in f\r__import__('os')\n  x"


def enum_in_tree_spec(program: dict, marker: Path) -> None:
    signature = program["graph_module"]["module_call_graph"][0]["signature"]
    context = json.dumps({"__enum__": True, "fqn": "pathlib:Path", "name": "x"})
    leaf = {"type": None, "context": None, "children_spec": []}
    spec = {"type": "builtins.dict", "context": context, "children_spec": [leaf]}
    signature["in_spec"] = json.dumps([1, spec])


HOSTILE_ARCHIVES = {
    "a weight stored as a pickle (use_pickle)": (pickled_weight, ["linear.weight is stored as a pickle (use_pickle"]),
    "a tensor constant stored as a pickle": (pickled_constant, ["constant c0 is stored as a pickle (use_pickle"]),
    "a legacy weights file": (added("data/weights/model.pt"), ["data/weights/model.pt is a legacy-format (pickled)"]),
    "a legacy constants file": (added("data/constants/model.pt"), ["legacy-format (pickled) weights or constants"]),
    "a custom-object constant": (added("data/constants/custom_obj_0"), ["pickled custom-object constant"]),
    "an opaque-object constant": (added("data/constants/opaque_obj_0"), ["pickled opaque-object constant"]),
    "AOTInductor code": (added("data/aotinductor/model/model.so"), ["AOTInductor-compiled code (native libraries)"]),
    "a second program": (added("models/other.json"), ["more than the one program 'model'"]),
    "example inputs that need the full unpickler": (example_inputs, ["data/sample_inputs/model.pt needs more than"]),
    "code in a shape expression": (program_edit(code_in_expression), ["symbolic-shape expression", "__import__"]),
    "a graph node calling torch.save": (program_edit(graph_calls_torch_save), ["graph function 'torch.save'"]),
    "a buffer name that breaks out of FX's source": (program_edit(name_breaks_out), ["not a dotted attribute path"]),
    "a carriage return in a stack trace": (program_edit(carriage_return), ["holds a control character"]),
    "an enum in a tree spec": (program_edit(enum_in_tree_spec), ["in_spec holds a context that is not plain JSON"]),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ARCHIVES))
def test_a_hostile_archive_is_refused_before_anything_is_unpickled_or_run(
    case, program, dataset, tmp_path, capsys, no_unpickling
):
    make, needles = HOSTILE_ARCHIVES[case]
    marker = tmp_path / "unpickled-or-ran"
    path = rewritten(program, tmp_path / "hostile.pt2", make(marker))
    refused(capsys, dataset, f"ep:{path}", tmp_path / "out", "ep:", "hostile.pt2: refused: ", *needles)
    assert not marker.exists() and no_unpickling == []


def test_the_genuine_archive_and_its_plain_rewrite_load(program, dataset, tmp_path, capsys, no_unpickling):
    copy = rewritten(program, tmp_path / "copy.pt2", lambda records: None)
    for path in (program, copy):
        assert (
            main(["eval", str(dataset), "--model", f"ep:{path}", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
        )
    assert no_unpickling == []


def test_torch_itself_would_run_these_payloads(program, tmp_path):
    """Why the archive is checked: torch.export.load unpickles a use_pickle weight and sympify
    evaluates a shape expression (each payload creates its marker)."""
    for make in (pickled_weight, program_edit(code_in_expression)):
        marker = tmp_path / f"{make.__name__}-marker"
        path = rewritten(program, tmp_path / f"{make.__name__}.pt2", make(marker))
        try:
            torch.export.load(str(path))
        except Exception:  # the payload ran first; what torch does with its result does not matter
            pass
        assert marker.exists(), make.__name__


def test_guard_code_in_a_program_is_never_run(program, dataset, tmp_path, capsys):
    """`.module()` exec's the program's guard strings; the loader never asks for them, so an archive
    carrying code there loads and evaluates, and the code does not run."""
    marker = tmp_path / "guard-ran"
    guard = f"__import__('pathlib').Path({str(marker)!r}).touch() is None"
    path = rewritten(
        program, tmp_path / "guarded.pt2", program_edit(lambda p, m: p.update(guards_code=[guard]))(marker)
    )
    assert main(["eval", str(dataset), "--model", f"ep:{path}", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    assert not marker.exists()
    torch.export.load(str(path)).module()(torch.zeros(1, 3, 32, 32))  # torch's default: the guard runs
    assert marker.exists()


def state_dict_zip(path: Path) -> Path:
    torch.save(MeanColour().state_dict(), path)
    return path


def text_zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes/readme.txt", "hello")
    return path


def truncated(program: Path, path: Path) -> Path:
    data = program.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def test_files_that_are_not_pt2_archives_are_refused(program, dataset, tmp_path, capsys, no_unpickling):
    cases = {
        "state_dict.pt2": (state_dict_zip, "a zip file but not a torch.export archive (no archive_format 'pt2')"),
        "notes.pt2": (text_zip, "a zip file but not a torch.export archive"),
        "truncated.pt2": (lambda p: truncated(program, p), "not a .pt2 archive (not a readable zip file"),
        "text.pt2": (lambda p: p.write_text("not a model") and p, "not a .pt2 archive (not a readable zip file"),
        "compressed.pt2": (
            lambda p: rewritten(program, p, lambda r: None, zipfile.ZIP_DEFLATED),
            "it holds compressed members, which torch.export.save never writes",
        ),
        # what torch.export.load's pre-2.7 fallback reader looks for (and unpickles) at the top level
        "outside.pt2": (
            lambda p: rewritten(
                program, p, lambda r: None, top_level={"version": b"8.0", "serialized_state_dict.pt": b""}
            ),
            "not all under one archive folder",
        ),
    }
    for name, (make, needle) in cases.items():
        path = make(tmp_path / name)
        refused(capsys, dataset, f"ep:{path}", tmp_path / "out", f"{name}: ", needle)
    assert no_unpickling == []


def test_links_and_missing_files_are_refused(program, dataset, tmp_path, capsys):
    link = tmp_path / "link.pt2"
    link.symlink_to(program)
    refused(capsys, dataset, f"ep:{link}", tmp_path / "out", "is a link; links are never followed")
    refused(capsys, dataset, f"ep:{tmp_path / 'missing.pt2'}", tmp_path / "out", "not found")
    onnx_link = tmp_path / "link.onnx"
    onnx_link.symlink_to(onnx_model(tmp_path / "real.onnx"))
    refused(capsys, dataset, f"onnx:{onnx_link}", tmp_path / "out", "is a link; links are never followed")


# --- ONNX --------------------------------------------------------------------------------------


def onnx_model(path: Path, *, inputs: int = 1, rank: int = 4, external: str | None = None, in_constant=False) -> Path:
    """A mean-colour classifier built with onnx.helper: x (N x 3 x 32 x 32) -> 1000 logits; options
    add a second input, change the input's rank, or move its weight into an external data file."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(torch.rand(3, 1000).numpy(), "weight")
    if external is not None:
        weight.ClearField("raw_data")
        weight.data_location = TensorProto.EXTERNAL
        for key, value in (("location", external), ("offset", "0"), ("length", str(3 * 1000 * 4))):
            weight.external_data.add(key=key, value=value)
    dims = ["N", 3, 32, 32][:rank] if rank <= 4 else ["N", 3, 32, 32, 1]
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
    if inputs == 2:
        graph_inputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 32, 32]))
    pool = helper.make_node("GlobalAveragePool", ["x"], ["pooled"])
    flat = helper.make_node("Flatten", ["pooled"], ["flat"])
    initializers = [weight]
    if in_constant:  # the weight as a Constant node's attribute instead of an initializer
        nodes_ = [pool, flat, helper.make_node("Constant", [], ["weight"], value=weight)]
        initializers = []
    else:
        nodes_ = [pool, flat]
    nodes_.append(helper.make_node("MatMul", ["flat", "weight"], ["logits"]))
    output = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])
    graph = helper.make_graph(nodes_, "mean_colour", graph_inputs, [output], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def test_a_plain_onnx_model_evaluates(dataset, tmp_path, capsys):
    path = onnx_model(tmp_path / "mean_colour.onnx")
    assert main(["eval", str(dataset), "--model", f"onnx:{path}", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    report = json.loads((tmp_path / "out" / "onnx_mean_colour.onnx" / "eval.json").read_text())
    assert report["metrics"]["samples"] == 4 and report["preprocessing"]["input_size"] == [32, 32]


def test_onnx_external_data_is_refused_wherever_it_points(dataset, tmp_path, capsys):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\0" * 12000)
    for n, (location, in_constant) in enumerate(
        (("secret.bin", False), ("../secret.bin", False), (str(secret), False), ("secret.bin", True))
    ):
        folder = tmp_path / f"model{n}"
        folder.mkdir()
        path = onnx_model(folder / "external.onnx", external=location, in_constant=in_constant)
        refused(capsys, dataset, f"onnx:{path}", tmp_path / "out", "is kept in an external data file", location[-20:])


def test_onnx_models_that_are_not_one_image_classifier_are_refused(dataset, tmp_path, capsys):
    (tmp_path / "text.onnx").write_text("hello, I am not a model")
    (tmp_path / "empty.onnx").write_bytes(b"")
    cases = {
        onnx_model(tmp_path / "two.onnx", inputs=2): "the model takes 2 inputs (x, y); a classifier takes one image",
        onnx_model(tmp_path / "flat.onnx", rank=2): "its input 'x' has rank 2, not 4",
        tmp_path / "text.onnx": "not an ONNX model",
        tmp_path / "empty.onnx": "not an ONNX model",
        state_dict_zip(tmp_path / "weights.onnx"): "not an ONNX model",
    }
    for path, needle in cases.items():
        refused(capsys, dataset, f"onnx:{path}", tmp_path / "out", f"{path.name}: ", needle)


# --- symbolic-shape expressions sympy would compute for ever -------------------------------------


def expression(text: str):
    def make(marker: Path):
        return lambda records: edit_json(records, MODEL_JSON, lambda p: input_size_expression(p).update(expr_str=text))

    return make


def huge_size(program: dict, marker: Path) -> None:
    input_size_expression(program)["hint"] = 10**400  # a JSON integer no tensor size can be


UNBOUNDED_ARCHIVES = {
    "a power tower": (expression("9**9**9**9"), "raises to a power that is not a whole number up to 64"),
    "a power tower in sympy's own form": (
        expression("Pow(Integer(9), Pow(Integer(9), Pow(Integer(9), Integer(9))))"),
        "raises to a power that is not a whole number up to 64",
    ),
    "a huge integer literal": (expression(f"Mul(Integer({'9' * 400}), Integer(2))"), "holds a number beyond 64 bits"),
    "small powers of powers": (
        expression("Pow(Pow(Pow(Integer(9), Integer(64)), Integer(64)), Integer(64))"),
        "could reach a 1310720-bit value (at most 4096): no shape is that large",
    ),
    "deep nesting": (expression("(" * 3000 + "s0" + ")" * 3000), "is not a plain expression (or nests too deeply)"),
    "a huge JSON integer": (program_edit(huge_size), "hint holds an integer of 401 digits, beyond 64 bits"),
    # sympify reads ^ as a power (convert_xor), and makes exact or arbitrary-precision numbers of text
    "a power tower written with carets": (expression("9^9^9^9"), "raises to a power that is not a whole number"),
    "a rational of a huge exponent": (expression("Rational('1e99999999')"), "holds the number '1e99999999'"),
    "a float of a huge exponent": (expression("Float('1e999999999')"), "holds the number '1e999999999'"),
    "a float of a tiny exponent": (expression("Float('1e-999999999')"), "holds the number '1e-999999999'"),
    "a tiny decimal literal": (expression("Mul(1e-99999999, s0)"), "holds the number '1e-99999999'"),
    "a huge precision": (expression("Float('1.5', precision=100000000)"), "precision beyond 1024 bits"),
}


@pytest.mark.parametrize("case", sorted(UNBOUNDED_ARCHIVES))
def test_an_expression_too_large_to_compute_is_refused_quickly(case, program, dataset, tmp_path, capsys):
    import time

    make, needle = UNBOUNDED_ARCHIVES[case]
    path = rewritten(program, tmp_path / "unbounded.pt2", make(tmp_path / "unused"))
    started = time.perf_counter()
    err = refused(capsys, dataset, f"ep:{path}", tmp_path / "out", "unbounded.pt2: refused: ", needle)
    assert time.perf_counter() - started < 10, err  # an eval run's own start-up; sympy would not return
    assert not (tmp_path / "out").exists()


def test_sympy_itself_would_not_return_on_the_power_tower():
    """Why the exponent is bounded: sympify computes 9**9**9**9 (its time limit here stands for for ever)."""
    import subprocess
    import sys

    code = "import sympy; sympy.sympify('9**9**9**9')"
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, "-c", code], timeout=3, capture_output=True)


def test_plain_dynamic_shape_expressions_still_load(dataset, tmp_path):
    """A program with a dynamic batch, height and width (Mul(Integer(3), s0, s53)...) passes the bounds."""
    path = tmp_path / "dynamic.pt2"
    dims = {"x": {0: torch.export.Dim("b"), 2: torch.export.Dim("h", min=8), 3: torch.export.Dim("w", min=8)}}
    exported = torch.export.export(MeanColour().eval(), (torch.rand(2, 3, 32, 32),), dynamic_shapes=dims)
    torch.export.save(exported, str(path))
    assert main(["eval", str(dataset), "--model", f"ep:{path}", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
