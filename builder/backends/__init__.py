"""Every model the toolkit runs, behind one registry (`builder.backends.registry`): a kind
(masker, inpainter, detector, ...), a name, and a small frozen config per entry.

    config = backend_config("masker", "sam", extract_config)   # from flat settings
    masker = make_backend("masker", "sam", config)

A backend that cannot be used (unknown name, missing extra, missing or unusable checkpoint) raises
`BackendUnavailable` before any work. The core install has no torch; the model backends import it
only when they are built.
"""

from __future__ import annotations

from builder.backends.base import BackendInfo, Detector, Inpainter, Masker
from builder.backends.registry import (
    BackendUnavailable,
    available,
    backend_config,
    from_setting,
    make_backend,
    register_backend,
)

__all__ = [
    "BackendInfo",
    "BackendUnavailable",
    "Detector",
    "Inpainter",
    "Masker",
    "available",
    "backend_config",
    "from_setting",
    "make_backend",
    "register_backend",
]
