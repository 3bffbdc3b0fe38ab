"""What the model files of `ep:FILE` (a torch.export program) and `onnx:FILE` (an ONNX model) share:
reading a stranger's file once (never through a link), the input shape the file fixes, and running
a batch in the chunks a file exported with a fixed or bounded batch size accepts.

The format checks and loaders live in `evaluation.model_formats.pt2_files` and `evaluation.model_formats.onnx_files`;
`evaluation.model_formats.models` registers both as classifier kinds of the one backend registry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import UsageError, printable
from builder.core.untrusted import UntrustedInput, regular_file


class ModelFileError(UsageError, ValueError):
    """A model file that is refused or cannot be run: one line naming the file and the reason."""


@dataclass(frozen=True)
class ModelFile:
    """A model file's bytes, read once: every check and the loader see the same bytes."""

    spec: str  # as given after the prefix, for messages
    name: str  # the file's name (what reports record, never the machine's path)
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def error(self, reason: str) -> ModelFileError:
        return refusal(self.spec, reason)


def refusal(spec: str, reason: str) -> ModelFileError:
    """The one-line error of the model file `spec` (what follows the prefix, as given)."""
    return ModelFileError(printable(f"{spec}: {reason}"))


def read_model_file(path: Path, spec: str, what: str) -> ModelFile:
    """The bytes of the plain file at `path` (a link, a folder or a missing file is refused)."""
    try:
        path = regular_file(Path(path), what)
        return ModelFile(spec, path.name, path.read_bytes())
    except (UntrustedInput, OSError) as exc:
        raise ModelFileError(printable(f"{spec}: {exc}")) from None


@dataclass(frozen=True)
class InputShape:
    """The image input a file declares: the batch sizes it accepts and the (height, width) it fixes
    (None where the file leaves a side free)."""

    min_batch: int = 1
    max_batch: int | None = None  # None: no upper bound
    size: tuple[int, int] | None = None

    def describe_batch(self) -> str:
        if self.max_batch == self.min_batch:
            return f"a fixed batch of {self.min_batch}"
        return f"batches of {self.min_batch} to {self.max_batch if self.max_batch is not None else 'any size'}"


def check_image_size(shape: InputShape, x, spec: str) -> None:
    """Refuse inputs of another size than the file fixes (the preprocessing's input size decides it)."""
    if shape.size is not None and tuple(x.shape[2:]) != shape.size:
        h, w = shape.size
        raise refusal(
            spec,
            f"the file takes {h}x{w} images (fixed when it was exported), not {x.shape[2]}x{x.shape[3]}: "
            "drop --input-size, or export with dynamic height and width",
        )


def run_in_batches(run: Callable, x, shape: InputShape):
    """`run` over `x` in chunks the file accepts: at most `max_batch` images a call, and a short
    chunk padded with blank images up to `min_batch` (their outputs are dropped). A model in eval
    mode classifies each image on its own, so padding changes no prediction."""
    import torch

    if shape.min_batch <= len(x) and (shape.max_batch is None or len(x) <= shape.max_batch):
        return first_output(run(x))
    step = shape.max_batch or len(x)
    outputs = []
    for start in range(0, len(x), step):
        chunk = x[start : start + step]
        count = len(chunk)
        if count < shape.min_batch:
            chunk = torch.cat([chunk, chunk.new_zeros((shape.min_batch - count, *chunk.shape[1:]))])
        outputs.append(first_output(run(chunk))[:count])
    return torch.cat(outputs)


def first_output(out):
    """The logits of a model that returns several outputs: the first, as for every other kind."""
    return out[0] if isinstance(out, (tuple, list)) else out
