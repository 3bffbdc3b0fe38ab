"""Who an in-memory model is, as far as it can be known: a model given to `hsi.evaluate` as an
object was not loaded from a spec, so no weights file names it. A `torch.nn.Module` is identified
by its class and a fingerprint of its weights; a numpy callable by its name and what its caller
declares of its weights (`weights_sha256=`, recorded as declared and not checked), else nothing.

The fingerprint (`state_dict_sha256`) is the sha256 of, for each entry of `module.state_dict()` in
its order: a header, the JSON text `[name, dtype, shape, byte count]` (dtype as torch names it,
e.g. "torch.float32") preceded by its length as 8 big-endian bytes, then the tensor's bytes
(detached, on the CPU, contiguous, in its own dtype's native byte order). The same weights give the
same fingerprint in any process; a renamed, reshaped, retyped or changed tensor gives another. A
state_dict holding something that is not a plain tensor (a quantized or sparse tensor, a tensor
without storage, a module's extra state) has no fingerprint: it is recorded as null.
"""

from __future__ import annotations

import hashlib
import json
import re

from builder.core.errors import printable
from builder.core.untrusted import Fields

KINDS = ("module", "callable")
SHA256 = re.compile(r"[0-9a-f]{64}")
IDENTITY_FIELDS = ("kind", "class", "module", "state_dict_sha256", "weights_sha256")
MAX_NAME = 300  # a class or module name: one line, as every label of an entry


def state_dict_sha256(module) -> str | None:
    """The fingerprint of `module`'s weights (see the module's docstring), or None when its
    state_dict holds something other than dense tensors with storage."""
    import torch

    digest = hashlib.sha256()
    for name, value in module.state_dict().items():
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.is_quantized:
            return None
        if value.is_meta:
            return None
        tensor = value.detach().to("cpu").contiguous()
        data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        header = json.dumps([name, str(tensor.dtype), list(tensor.shape), len(data)]).encode("utf-8")
        digest.update(len(header).to_bytes(8, "big") + header + data)
    return digest.hexdigest()


def _names(thing) -> tuple[str, str]:
    """(qualified name, module path) of a class or function, each one printable line (as read back)."""
    qualname = getattr(thing, "__qualname__", None) or type(thing).__qualname__
    module = getattr(thing, "__module__", None) or type(thing).__module__
    return printable(str(qualname))[:MAX_NAME], printable(str(module))[:MAX_NAME]


def module_identity(module) -> dict:
    """A `torch.nn.Module`'s identity: its class (qualified name, module path) and the fingerprint of
    its weights."""
    qualname, path = _names(type(module))
    return {
        "kind": "module",
        "class": qualname,
        "module": path,
        "state_dict_sha256": state_dict_sha256(module),
        "weights_sha256": None,
    }


def callable_identity(fn, weights_sha256: str | None = None) -> dict:
    """A numpy callable's identity: its name and module, and the sha256 of its weights as its caller
    declares it (None: not declared, so not known)."""
    qualname, path = _names(fn)
    return {
        "kind": "callable",
        "class": qualname,
        "module": path,
        "state_dict_sha256": None,
        "weights_sha256": weights_sha256,
    }


def identity_words(identity: dict) -> str:
    """The identity in words, saying what is computed, what is only declared and what is not known."""
    name = f"{identity['module']}.{identity['class']}"
    if identity["kind"] == "module":
        fingerprint = identity["state_dict_sha256"]
        weights = f"state_dict sha256 {fingerprint}" if fingerprint else "its state_dict cannot be fingerprinted"
        return f"an in-memory module {name}, not loaded from a spec; {weights}"
    declared = identity["weights_sha256"]
    weights = f"weights sha256 {declared} as its caller declares (not checked)" if declared else "weights not known"
    return f"a numpy callable {name}, not loaded from a spec; {weights}"


def checked_identity(fields: Fields, key: str = "identity") -> dict | None:
    """An identity object read from someone else's file (null allowed), every field checked."""
    if not fields.has(key):
        return None
    identity = fields.object(key).only(IDENTITY_FIELDS)
    kind = identity.string("kind", choices=KINDS)
    checked = {
        "kind": kind,
        "class": identity.string("class"),
        "module": identity.string("module"),
        "state_dict_sha256": identity.string("state_dict_sha256", None, pattern=SHA256),
        "weights_sha256": identity.string("weights_sha256", None, pattern=SHA256),
    }
    for name in ("class", "module"):
        if len(checked[name]) > MAX_NAME or not checked[name].isprintable():
            raise identity.error(f"is one printable line of at most {MAX_NAME} characters", name)
    if kind == "module" and checked["weights_sha256"] is not None:
        raise identity.error(
            "a module's weights are fingerprinted (state_dict_sha256), never declared", "weights_sha256"
        )
    if kind == "callable" and checked["state_dict_sha256"] is not None:
        raise identity.error("a callable has no state_dict to fingerprint", "state_dict_sha256")
    return checked


__all__ = ["callable_identity", "checked_identity", "identity_words", "module_identity", "state_dict_sha256"]
