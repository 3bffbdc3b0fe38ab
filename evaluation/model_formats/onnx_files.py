"""`onnx:FILE`: an ONNX classifier run by onnxruntime, wrapped in a `torch.nn.Module` so the one
prediction path runs it (a float32 NCHW tensor -> numpy -> `InferenceSession.run` -> a tensor).

The file is parsed and checked before onnxruntime sees it, and onnxruntime gets the very bytes
that were checked: a tensor kept in an external data file is refused (onnxruntime would read
whatever path the model names), as is a model with other than one image input. The session runs
on the CPU provider, or on CUDA when the module is moved to a CUDA device; a CUDA run without
onnxruntime's CUDAExecutionProvider is refused, never run on the CPU instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .model_files import InputShape, ModelFile, check_image_size, read_model_file, refusal, run_in_batches

EXPORT_HINT = (
    'export with torch.onnx.export(model.eval(), (x,), "model.onnx", dynamo=True, '
    'dynamic_shapes=({0: torch.export.Dim("batch")},), external_data=False)'
)
FLOAT = 1  # onnx.TensorProto.FLOAT


class OnnxClassifier(torch.nn.Module):
    """An onnxruntime session per device the module is moved to, behind `forward`."""

    def __init__(self, model_bytes: bytes, input_name: str, output_name: str, shape: InputShape, spec: str):
        super().__init__()
        self.model_bytes, self.input_name, self.output_name = model_bytes, input_name, output_name
        self.shape, self.spec = shape, spec
        self.sessions: dict[str, object] = {}
        self.register_buffer("where", torch.zeros(0), persistent=False)  # the device the module is on
        self.session_for(torch.device("cpu"))  # a model onnxruntime cannot run is refused at load

    def _apply(self, fn, recurse=True):
        self.session_for(fn(self.where).device)  # a CUDA run without the CUDA provider stops here
        return super()._apply(fn, recurse)

    def session_for(self, device: torch.device):
        key = str(device)
        if key not in self.sessions:
            self.sessions[key] = make_session(self.model_bytes, device, self.spec)
        return self.sessions[key]

    def forward(self, x):
        check_image_size(self.shape, x, self.spec)
        session = self.session_for(x.device)

        def run(chunk):
            array = np.ascontiguousarray(chunk.detach().to("cpu", torch.float32).numpy())
            out = session.run([self.output_name], {self.input_name: array})[0]
            return torch.from_numpy(np.asarray(out, dtype=np.float32)).to(x.device)

        return run_in_batches(run, x, self.shape)


def make_session(model_bytes: bytes, device: torch.device, spec: str):
    """An InferenceSession on `device`'s provider and nothing else (no silent CPU run of a CUDA request)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()  # the thread count torch runs with
    options.log_severity_level = 3  # errors only: node placement notes are not the user's concern
    if device.type == "cuda":
        available = onnxruntime.get_available_providers()
        if "CUDAExecutionProvider" not in available:
            raise refusal(
                spec,
                f"a CUDA run needs onnxruntime's CUDAExecutionProvider, which this onnxruntime lacks (it has "
                f"{', '.join(available)}): pip install onnxruntime-gpu in place of onnxruntime, or pass --device cpu",
            )
        providers: list = [("CUDAExecutionProvider", {"device_id": device.index or 0}), "CPUExecutionProvider"]
    else:
        providers = ["CPUExecutionProvider"]
    try:
        session = onnxruntime.InferenceSession(model_bytes, options, providers=providers)
    except Exception as exc:  # onnxruntime's Fail, InvalidGraph, NotImplemented... one line each
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise refusal(spec, f"onnxruntime cannot run it ({reason})") from None
    if device.type == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
        raise refusal(
            spec,
            "onnxruntime could not start its CUDAExecutionProvider (CUDA or cuDNN libraries missing?); "
            "refusing to run on the CPU instead: fix the CUDA install or pass --device cpu",
        )
    return session


def load_onnx_model(path: Path, spec: str) -> tuple[OnnxClassifier, ModelFile]:
    """The ONNX model in `path`, checked and wrapped; a ModelFileError otherwise."""
    file = read_model_file(path, spec, "ONNX model")
    model = parse_model(file)
    check_no_external_data(model, file)
    input_name, shape = image_input(model, file)
    if not model.graph.output:
        raise file.error("the model declares no output")
    return OnnxClassifier(file.data, input_name, model.graph.output[0].name, shape, spec), file


def parse_model(file: ModelFile):
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_model_from_string(file.data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise file.error(f"not an ONNX model ({type(exc).__name__}); {EXPORT_HINT}") from None
    # Protobuf parses many byte strings into an empty message: a model has an IR version and a graph.
    if model.ir_version <= 0 or not model.graph.node or not model.opset_import:
        raise file.error(f"not an ONNX model (no IR version, graph or opset); {EXPORT_HINT}")
    return model


def _tensors(graph):
    """Every TensorProto a graph holds: initializers, sparse ones, and attributes of its nodes, with
    the subgraphs of If, Loop and Scan."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _node_tensors(node)


def _node_tensors(node):
    for attribute in node.attribute:
        if attribute.HasField("t"):
            yield attribute.t
        yield from attribute.tensors
        if attribute.HasField("sparse_tensor"):
            yield attribute.sparse_tensor.values
            yield attribute.sparse_tensor.indices
        for sparse in attribute.sparse_tensors:
            yield sparse.values
            yield sparse.indices
        if attribute.HasField("g"):
            yield from _tensors(attribute.g)
        for graph in attribute.graphs:
            yield from _tensors(graph)


def check_no_external_data(model, file: ModelFile) -> None:
    """Refuse a tensor stored outside the file: onnxruntime would open the path it names."""
    import onnx

    tensors = list(_tensors(model.graph))
    for function in model.functions:
        for node in function.node:
            tensors.extend(_node_tensors(node))
    for tensor in tensors:
        if tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data):
            location = next((entry.value for entry in tensor.external_data if entry.key == "location"), "?")
            shown = location if len(location) <= 80 else "..." + location[-77:]
            raise file.error(
                f"refused: tensor {tensor.name[:60]!r} is kept in an external data file ({shown!r}), which is never "
                "read: export with torch.onnx.export(..., external_data=False), or save a model you trust as one "
                "file with onnx.save(onnx.load(path), path, save_as_external_data=False)"
            )


def image_input(model, file: ModelFile) -> tuple[str, InputShape]:
    """The one non-initializer input, a float N x 3 x H x W tensor, and the shape it fixes."""
    initializers = {tensor.name for tensor in model.graph.initializer}
    inputs = [value for value in model.graph.input if value.name not in initializers]
    if len(inputs) != 1:
        names = ", ".join(value.name[:40] for value in inputs) or "none"
        raise file.error(f"the model takes {len(inputs)} inputs ({names}); a classifier takes one image batch")
    value = inputs[0]
    tensor_type = value.type.tensor_type
    if not value.type.HasField("tensor_type") or tensor_type.elem_type != FLOAT:
        raise file.error(f"its input {value.name[:40]!r} is not a float32 tensor; export the model in float32")
    if not tensor_type.HasField("shape"):
        raise file.error(f"its input {value.name[:40]!r} declares no shape; {EXPORT_HINT}")
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor_type.shape.dim]
    if len(dims) != 4:
        raise file.error(f"its input {value.name[:40]!r} has rank {len(dims)}, not 4 (N x 3 x H x W)")
    batch, channels, height, width = dims
    if channels is not None and channels != 3:
        raise file.error(f"its input {value.name[:40]!r} has {channels} channels, not 3 (RGB)")
    size = (height, width) if height is not None and width is not None else None
    return value.name, InputShape(batch or 1, batch, size)
