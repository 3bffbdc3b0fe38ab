"""Shared fixtures of the zero-shot tests: the tiny CLIP models of `tiny_clip`, saved once per
session and loaded through the production loader, and the -10 subset composed from flat-colour
parts (ten classes: a zero-shot model's text classifier over them is built in about a second)."""

from __future__ import annotations

from pathlib import Path

import pytest
from parts_factory import compose_quietly, fake_images, write_parts
from tiny_clip import TINY_ARCH, register_tiny_openclip, save_tiny_hf_clip, save_tiny_openclip, tiny_openclip_spec


@pytest.fixture(scope="session")
def tiny_openclip_file(tmp_path_factory) -> Path:
    return save_tiny_openclip(tmp_path_factory.mktemp("tiny-openclip") / "tiny-clip.safetensors")


@pytest.fixture(scope="session")
def tiny_spec(tiny_openclip_file) -> str:
    """`openclip:CONFIG.json:FILE` of the tiny open_clip model, as a command line names it."""
    return tiny_openclip_spec(tiny_openclip_file)


@pytest.fixture(scope="session")
def ten_wnids() -> list[str]:
    from builder.compose.spec import load_variant

    return sorted(dict(load_variant("hard-spurious-imagenet-10").subset.pairs))


@pytest.fixture(scope="session")
def ten_set(ten_wnids, tmp_path_factory) -> Path:
    """The -10 subset on two flat-colour images a class: 120 test composites, 60 train."""
    root = tmp_path_factory.mktemp("zero-shot-ten")
    write_parts(root / "parts", {"val": fake_images(ten_wnids, per_class=2)}, shard_size=10)
    return compose_quietly(root / "parts", "hard-spurious-imagenet-10", root / "composed").dataset_dir


@pytest.fixture(scope="session")
def tiny_hf_folder(tmp_path_factory) -> Path:
    return save_tiny_hf_clip(tmp_path_factory.mktemp("tiny-hf-clip") / "tiny-hf-clip")


@pytest.fixture()
def tiny_openclip(tiny_openclip_file):
    """A fresh load of the tiny open_clip model (a test may change its weights)."""
    from evaluation.zero_shot.clip_models import load_clip

    register_tiny_openclip(tiny_openclip_file.parent / "open_clip_configs")
    return load_clip(f"openclip:{TINY_ARCH}:{tiny_openclip_file}")


@pytest.fixture()
def tiny_hf(tiny_hf_folder):
    from evaluation.zero_shot.clip_models import load_clip

    return load_clip(f"hf-clip:{tiny_hf_folder}")


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch) -> Path:
    """Text classifiers built by a test go to its own folder, never to the user's cache."""
    from evaluation.zero_shot.text_cache import CACHE_VARIABLE

    folder = tmp_path / "zero-shot-cache"
    monkeypatch.setenv(CACHE_VARIABLE, str(folder))
    return folder
