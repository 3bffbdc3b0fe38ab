"""A model's forward pass that fails, or outputs NaN, as one line: the model, the input shape and
the first line that says what went wrong (an `HsiError`, so the run is refused before any file of it
is written, never left half done).

A TorchScript interpreter error starts with "The following operation failed in the TorchScript
interpreter." and ends with the model's own error; onnxruntime's start with "[ONNXRuntimeError] : 6 :
RUNTIME_EXCEPTION : ..."; torch.export's are torch's own. The line kept is the last one of such a
traceback that names an error, else the first line of the message.
"""

from __future__ import annotations

import re

from builder.core.errors import UsageError, printable

MAX_CAUSE = 300  # characters of the cause kept: a shape error's line is about 100
_ERROR_LINE = re.compile(r"^(builtins\.)?[\w.]*(Error|Exception): .+")


class ForwardFailed(UsageError, ValueError):
    """A model that raised, or returned NaN, on a batch: nothing of the run is written. `cause_type`
    is the type of what the model raised, as a sweep's failed.json records it."""

    def __init__(self, message: str, cause_type: str | None = None) -> None:
        super().__init__(message)
        self.cause_type = cause_type


def error_type(exc: BaseException) -> str:
    """The exception's type as Python names it: `RuntimeError`, `torch.jit.Error`."""
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def cause_line(exc: BaseException) -> str:
    """The one line of `exc` that says what went wrong, with its type."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if len(lines) > 1 and _ERROR_LINE.match(lines[-1]):
        return lines[-1].removeprefix("builtins.")[:MAX_CAUSE]
    return f"{type(exc).__name__}: {lines[0][:MAX_CAUSE]}" if lines else type(exc).__name__


def shape_text(shape) -> str:
    return " x ".join(str(int(side)) for side in shape)


def forward_failed(spec: str, shape, exc: BaseException) -> ForwardFailed:
    return ForwardFailed(
        printable(
            f"{spec}: its forward pass failed on a {shape_text(shape)} input: {cause_line(exc)} (check that it is "
            "the model you meant and the input size it takes, --input-size)"
        ),
        error_type(exc),
    )


def check_finite(probs, spec: str, shape) -> None:
    """Refuse scores that hold NaN (NaN or infinite logits): they would be no prediction at all."""
    import torch

    broken = int((~torch.isfinite(probs)).any(dim=1).sum()) if probs.numel() else 0
    if broken:
        raise ForwardFailed(
            printable(
                f"{spec}: it returned NaN (NaN or infinite outputs) for {broken} of {len(probs)} images of a "
                f"{shape_text(shape)} input: no prediction can be made of them (check its weights and --mean/--std)"
            )
        )
