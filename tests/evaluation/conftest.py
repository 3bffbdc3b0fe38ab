"""Shared fixtures of the evaluation tests: flat-colour parts, composed sets, planted predictors."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from parts_factory import FakeImage, compose_quietly, write_parts
from planted import flat_images, save_planted


@pytest.fixture(autouse=True)
def _quiet_tracer():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


@pytest.fixture(scope="session")
def flat_parts(tmp_path_factory) -> tuple[Path, list[FakeImage]]:
    images = flat_images()
    path = tmp_path_factory.mktemp("eval-parts") / "parts"
    write_parts(path, {"val": images}, shard_size=3)
    return path, images


@pytest.fixture(scope="session")
def paper_set(flat_parts, tmp_path_factory) -> Path:
    """The paper's config on 6 images: 72 composites in shards of 2 images (24 composites)."""
    out = tmp_path_factory.mktemp("eval-composed")
    return compose_quietly(flat_parts[0], "hard-spurious-imagenet", out, overrides={"shard_size": 24}).dataset_dir


@pytest.fixture(scope="session")
def planted_corner(flat_parts, tmp_path_factory) -> Path:
    return save_planted(
        tmp_path_factory.mktemp("planted") / "planted_corner.pt", flat_parts[1], background_on_corner=True
    )


@pytest.fixture(scope="session")
def planted_finder(flat_parts, tmp_path_factory) -> Path:
    return save_planted(
        tmp_path_factory.mktemp("planted") / "planted_finder.pt", flat_parts[1], background_on_corner=False
    )
