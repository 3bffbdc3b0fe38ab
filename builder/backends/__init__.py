"""Backend registry. Names map to factories given as "module:callable" so that the model backends
(torch, segment-anything) are imported only when asked for; the core install has no torch.

A factory takes the extract options (`builder.extract.ExtractConfig`) and returns a Masker or an
Inpainter. A backend that cannot load its checkpoint raises `BackendUnavailable` before any work.
"""

from __future__ import annotations

from builder.core.errors import HsiError

import importlib
from typing import Any

from builder.backends.base import BackendInfo, Inpainter, Masker

MASKERS: dict[str, str] = {
    "box": "builder.backends.classical:make_box_masker",
    "sam": "builder.backends.sam:make_sam_masker",
}
INPAINTERS: dict[str, str] = {
    "telea": "builder.backends.classical:make_telea_inpainter",
    "lama": "builder.backends.lama:make_lama_inpainter",
}


class BackendUnavailable(HsiError):
    """A requested backend cannot be used (missing checkpoint, missing extra); never a fallback."""


def _resolve(registry: dict[str, str], kind: str, name: str):
    if name not in registry:
        raise BackendUnavailable(f"unknown {kind} {name!r}; choose one of: {', '.join(sorted(registry))}")
    module_name, _, attr = registry[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendUnavailable(
            f"the {kind} {name!r} needs optional packages that are not installed ({exc.name}); "
            "install them with: pip install 'hard-spurious-imagenet[models]'"
        ) from exc
    return getattr(module, attr)


def make_masker(name: str, options: Any) -> Masker:
    return _resolve(MASKERS, "masker", name)(options)


def make_inpainter(name: str, options: Any) -> Inpainter:
    return _resolve(INPAINTERS, "inpainter", name)(options)


__all__ = ["BackendInfo", "BackendUnavailable", "INPAINTERS", "Inpainter", "MASKERS", "Masker", "make_inpainter", "make_masker"]
