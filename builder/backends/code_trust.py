"""TorchScript files are code, and are loaded only when the user said to trust them.

A TorchScript file is a zip of Python-like source that `torch.jit.load` compiles and runs: a module
whose `__setstate__` is exported runs it inside `torch.jit.load`, before any image is read, and its
`forward` runs on every batch, with every operator torch has (`torch.save`, `torch.from_file(...,
shared=True)` and `copy_` write any file the user may write). No list of operator names makes such a
file safe, so none is kept: the file is trusted whole or not loaded.

A file is trusted when its sha256 is one the user declared (`--trust-file SHA256`, repeatable, or a
trusted list in the run's config or models.yaml), or when the user passed `--trust-code` (every
TorchScript file of the run is trusted). Otherwise it is refused in one line before `torch.jit.load`
sees it. The file is read once: the bytes hashed are the bytes loaded, so it cannot be swapped in
between. Formats that are checked to hold no code (`ep:` torch.export programs, `onnx:` models) need
no trust.

No sha256 of the published big-lama TorchScript file is trusted by default: neither LaMa's authors
(github.com/advimman/lama publish a PyTorch Lightning checkpoint, not TorchScript) nor
simple-lama-inpainting, whose release hosts the file, state one (its download passes no hash
prefix to torch.hub's download_url_to_file).
"""

from __future__ import annotations

import hashlib
import io
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import UsageError, printable
from builder.core.untrusted import UntrustedInput, regular_file

SHA256 = re.compile(r"[0-9a-f]{64}\Z")
TRUST_FILE_FLAG = "--trust-file"
TRUST_CODE_FLAG = "--trust-code"
TRUST_CODE_HELP = (
    "trust every TorchScript file of this run: a TorchScript file is code, and its code runs with your "
    "permissions (it can read, write and delete your files) as it loads and on every batch. Prefer "
    f"{TRUST_FILE_FLAG} SHA256 for a file you checked, or an ep:/onnx: file, which holds no code"
)
TRUST_FILE_HELP = (
    "the sha256 of a TorchScript file you trust to run its code with your permissions (repeatable); any "
    "other TorchScript file is refused before it is loaded"
)


class UntrustedCode(UsageError, ValueError):
    """A file that would run code, refused because the user did not say to trust it."""


@dataclass(frozen=True)
class CodeTrust:
    """Which code files a run may load: those whose sha256 is in `sha256s`, or any with `any_file`."""

    sha256s: frozenset[str] = frozenset()
    any_file: bool = False

    @classmethod
    def of(cls, sha256s: Iterable[str] = (), any_file: bool = False, where: str = TRUST_FILE_FLAG) -> CodeTrust:
        """The trust the user declared, each sha256 checked (`where` names the flag or file it came from)."""
        return cls(frozenset(checked_sha256(value, where) for value in sha256s), bool(any_file))

    def with_files(self, sha256s: Iterable[str], where: str) -> CodeTrust:
        return CodeTrust(self.sha256s | CodeTrust.of(sha256s, where=where).sha256s, self.any_file)

    def allows(self, sha256: str) -> bool:
        return self.any_file or sha256 in self.sha256s


def checked_sha256(value: object, where: str = TRUST_FILE_FLAG) -> str:
    """A sha256 as 64 lowercase hex digits, or a one-line refusal naming where it was given."""
    text = value.strip().lower() if isinstance(value, str) else ""
    if not SHA256.match(text):
        shown = printable(str(value))[:80]
        raise UsageError(f"{where} takes the sha256 of a file (64 hex digits, as sha256sum prints it), got {shown!r}")
    return text


def refusal_reason(sha256: str, hint: str) -> str:
    """Why an untrusted code file is refused, and the flags that would load it."""
    return (
        f"refused: a TorchScript file is code that runs with your permissions as it loads, and its sha256 {sha256} "
        f"is not one you trust; if you trust whoever made this very file, pass {TRUST_FILE_FLAG} {sha256} "
        f"(or {TRUST_CODE_FLAG} to trust every TorchScript file of the run); {hint}"
    )


def read_code_file(path: Path, what: str, fail: Callable[[str], Exception]) -> tuple[bytes, str]:
    """The bytes of the plain file at `path` (a link, a folder or a missing file is refused with
    `fail(reason)`) and their sha256."""
    try:
        data = regular_file(Path(path), what).read_bytes()
    except (UntrustedInput, OSError) as exc:
        raise fail(str(exc)) from None
    return data, hashlib.sha256(data).hexdigest()


def check_trusted(path: Path, trust: CodeTrust, hint: str, fail: Callable[[str], Exception], what: str) -> str:
    """The sha256 of the code file at `path` when `trust` allows it, else `fail(reason)` (loads nothing)."""
    _, sha256 = read_code_file(path, what, fail)
    if not trust.allows(sha256):
        raise fail(refusal_reason(sha256, hint))
    return sha256


def load_torchscript(
    path: Path, trust: CodeTrust, hint: str, fail: Callable[[str], Exception], what: str = "TorchScript file"
):
    """(module, sha256) of the TorchScript file at `path`, loaded on the CPU from the very bytes hashed,
    when `trust` allows its sha256; else `fail(reason)` is raised before torch sees the file. `hint`
    says what to use instead; a file torch cannot read is `fail("not a TorchScript file: ...")`."""
    import torch

    data, sha256 = read_code_file(path, what, fail)
    if not trust.allows(sha256):
        raise fail(refusal_reason(sha256, hint))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch marks TorchScript as deprecated
            module = torch.jit.load(io.BytesIO(data), map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError/ValueError variants for other files
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise fail(f"not a TorchScript file: {type(exc).__name__}: {first}") from None
    return module, sha256


NO_TRUST = CodeTrust()  # no code file is trusted: the default of every loader
