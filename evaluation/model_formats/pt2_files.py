"""`ep:FILE`: a `torch.export` program saved with `torch.export.save` (a `.pt2` archive), run through
its `.module()`. The archive is proved free of pickles and code first (`evaluation.model_formats.pt2_checks`),
then loaded from the very bytes that were checked.

A program keeps the batch sizes it was exported for: exported with `dynamic_shapes=({0:
Dim("batch")},)` it takes any batch; exported with a fixed (or bounded) batch it is run in chunks
of that size, the last one padded. It also keeps its train/eval behaviour, so a program whose
batch norm or dropout runs in training mode is refused (export `model.eval()`).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import torch

from .model_files import InputShape, ModelFile, check_image_size, read_model_file, run_in_batches
from .pt2_checks import SAVE_HINT, check_archive

DYNAMIC_HINT = 'export with dynamic_shapes=({0: torch.export.Dim("batch")},)'
TRAINING_FLAGS = ("training", "train")  # the bool arguments batch norm and dropout operators run by


class ExportedClassifier(torch.nn.Module):
    """A loaded program as the module the prediction path runs: chunked to the batch sizes the
    program accepts, rebuilt for the device it is moved to (torch.export's move_to_device_pass also
    moves the devices written into the graph, which `.to()` alone would not)."""

    def __init__(self, program, shape: InputShape, spec: str):
        super().__init__()
        self.program, self.shape, self.spec = program, shape, spec
        self.graph = program.module(check_guards=False)  # guard code would be exec'd: never generated
        self.register_buffer("where", torch.zeros(0), persistent=False)  # the device the module is on

    def _apply(self, fn, recurse=True):
        device = fn(self.where).device
        if device != self.where.device:
            from torch.export.passes import move_to_device_pass

            self.graph = move_to_device_pass(self.program, device).module(check_guards=False)
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True):
        # the program's train/eval behaviour was fixed when it was exported (checked at load)
        self.training = mode
        return self

    def forward(self, x):
        check_image_size(self.shape, x, self.spec)
        return run_in_batches(self.graph, x, self.shape)


def load_exported_program(path: Path, spec: str) -> tuple[ExportedClassifier, ModelFile]:
    """The program in `path`, checked, loaded and wrapped; a ModelFileError otherwise."""
    file = read_model_file(path, spec, "torch.export program")
    check_archive(file)
    try:
        program = torch.export.load(io.BytesIO(file.data))
    except Exception as exc:  # torch raises many kinds for archives of other versions or broken graphs
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise file.error(f"torch.export.load cannot read it ({reason}); {SAVE_HINT}") from None
    shape = program_input_shape(program, file)
    training = training_operators(program.graph)
    if training:
        raise file.error(
            f"the program was exported in training mode ({', '.join(training)} run with training=True): "
            "call model.eval() before torch.export.export"
        )
    return ExportedClassifier(program, shape, spec), file


def program_input_shape(program, file: ModelFile) -> InputShape:
    """The image input of a program with one float32 N x 3 x H x W input, else refused."""
    user_inputs = list(program.graph_signature.user_inputs)
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    if len(user_inputs) != 1:
        raise file.error(
            f"the program takes {len(user_inputs)} inputs ({', '.join(map(str, user_inputs)) or 'none'}); "
            "a classifier takes one image batch"
        )
    value = placeholders[user_inputs[0]].meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dim() != 4:
        raise file.error(f"its input {user_inputs[0]} is not a batch of images (N x 3 x H x W)")
    if value.dtype != torch.float32:
        raise file.error(f"its input takes {value.dtype}, not float32: export the model in float32")
    batch, channels, height, width = value.shape
    if isinstance(channels, int) and channels != 3:
        raise file.error(f"its input has {channels} channels, not 3 (RGB)")
    if isinstance(batch, int):
        low = high = batch
    else:
        low, high = _symbol_range(program, batch, file)
    size = (height, width) if isinstance(height, int) and isinstance(width, int) else None
    return InputShape(max(low, 1), high, size)


def _symbol_range(program, dim, file: ModelFile) -> tuple[int, int | None]:
    expr = dim.node.expr
    if expr not in program.range_constraints:
        raise file.error(f"its batch dimension is the expression {expr}, not a free size; {DYNAMIC_HINT}")
    bounds = program.range_constraints[expr]
    upper = None if math.isinf(float(bounds.upper)) else int(bounds.upper)
    return int(bounds.lower), upper


def training_operators(graph) -> list[str]:
    """Operators of an exported graph that take a training flag and were exported with it set."""
    found = []
    for node in graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None:
            continue
        for position, argument in enumerate(schema.arguments):
            if argument.name in TRAINING_FLAGS:
                value = node.args[position] if position < len(node.args) else node.kwargs.get(argument.name)
                if value is True and str(node.target) not in found:
                    found.append(str(node.target))
    return found
