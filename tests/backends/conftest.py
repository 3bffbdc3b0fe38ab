"""Fixtures of the backend tests: the tiny Stable Diffusion inpainting pipeline, built once per
session (and xdist worker)."""

from __future__ import annotations

import pytest
from tiny_sd import cached_tiny_inpaint_pipeline


@pytest.fixture(scope="session")
def tiny_sd_folder(tmp_path_factory):
    """A saved tiny inpainting pipeline folder, shared by the session's tests: copy it before
    changing it."""
    pytest.importorskip("diffusers")
    return cached_tiny_inpaint_pipeline(tmp_path_factory)
