"""The text classifier cache: a hit never runs the text tower; other weights, names or templates
miss; a damaged entry is rebuilt; entries are safetensors files written whole."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tiny_clip import IMAGE_SIZE, TINY_ARCH, count_text_passes

from evaluation.zero_shot.classifier import zero_shot_classifier
from evaluation.zero_shot.clip_models import load_clip
from evaluation.zero_shot.text_cache import TENSOR, TextClassifierCache, weights_fingerprint

SPACE = [517, 134, 1]
PIXELS = torch.randn(2, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(3))


def build(loaded, cache_dir, templates="simple", **options):
    return zero_shot_classifier(
        loaded.model, loaded.tokenizer, templates, label_space=SPACE, cache_dir=cache_dir, **options
    )


def entries(folder):
    return sorted(path.name for path in folder.iterdir())


@pytest.mark.parametrize("kind", ["tiny_openclip", "tiny_hf"])
def test_a_hit_runs_no_text_pass_and_gives_the_same_classifier(kind, request, monkeypatch, tmp_path):
    first = request.getfixturevalue(kind)
    built = build(first, tmp_path)
    assert entries(tmp_path) == [f"{built.cache_key}.safetensors"]
    if kind == "tiny_openclip":  # the same weights loaded again, as a second run would
        again = load_clip(f"openclip:{TINY_ARCH}:{request.getfixturevalue('tiny_openclip_file')}")
    else:
        again = load_clip(f"hf-clip:{request.getfixturevalue('tiny_hf_folder')}")
    passes = count_text_passes(monkeypatch, again)
    cached = build(again, tmp_path)
    assert passes == [] and cached.cache_key == built.cache_key
    torch.testing.assert_close(cached.text_classifier, built.text_classifier, rtol=0, atol=0)
    with safe_open(str(tmp_path / f"{built.cache_key}.safetensors"), framework="pt") as handle:
        assert handle.metadata()["key"] == built.cache_key and handle.get_tensor(TENSOR).dtype == torch.float32


def test_other_weights_names_templates_or_label_space_miss(tiny_openclip, monkeypatch, tmp_path):
    model, tokenizer = tiny_openclip.model, tiny_openclip.tokenizer
    passes = count_text_passes(monkeypatch, tiny_openclip)
    keys = {build(tiny_openclip, tmp_path).cache_key}
    others = [
        dict(templates=["itap of a {}.", "a bad photo of the {}."], label_space=SPACE),
        dict(templates="simple", classnames={517: "tower crane"}, label_space=SPACE),
        dict(templates="simple", label_space=[517, 134]),
    ]
    for options in others:
        passes.clear()
        keys.add(zero_shot_classifier(model, tokenizer, cache_dir=tmp_path, **options).cache_key)
        assert passes, options  # a miss: the text tower ran
    with torch.no_grad():
        model.token_embedding.weight[320] += 0.5  # the token of "a"
    passes.clear()
    keys.add(build(tiny_openclip, tmp_path).cache_key)
    assert passes and len(keys) == 5 and len(entries(tmp_path)) == 5


def damage(path, how: str) -> None:
    key = path.name.removesuffix(".safetensors")
    good = TextClassifierCache(path.parent).read(key, len(SPACE))
    if how == "garbage":
        path.write_bytes(b"not a safetensors file")
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[:-7])
    elif how == "not finite":
        save_file({TENSOR: torch.full_like(good, float("nan"))}, str(path), metadata={"key": key})
    elif how == "not unit rows":
        save_file({TENSOR: good * 2}, str(path), metadata={"key": key})
    elif how == "other shape":
        save_file({TENSOR: good[:2]}, str(path), metadata={"key": key})
    elif how == "float64":
        save_file({TENSOR: good.double()}, str(path), metadata={"key": key})
    elif how == "another key":
        save_file({TENSOR: good}, str(path), metadata={"key": "0" * 64})
    elif how == "a link":
        real = path.parent / "elsewhere.bin"
        path.replace(real)
        os.symlink(real, path)


@pytest.mark.parametrize(
    "how", ["garbage", "truncated", "not finite", "not unit rows", "other shape", "float64", "another key", "a link"]
)
def test_a_damaged_entry_is_a_miss_that_is_rebuilt(tiny_openclip, monkeypatch, tmp_path, how):
    built = build(tiny_openclip, tmp_path)
    path = tmp_path / f"{built.cache_key}.safetensors"
    damage(path, how)
    assert TextClassifierCache(tmp_path).read(built.cache_key, len(SPACE)) is None
    passes = count_text_passes(monkeypatch, tiny_openclip)
    rebuilt = build(tiny_openclip, tmp_path)
    assert passes and not path.is_symlink()
    torch.testing.assert_close(rebuilt.text_classifier, built.text_classifier, rtol=0, atol=0)
    assert TextClassifierCache(tmp_path).read(built.cache_key, len(SPACE)) is not None
    assert not [name for name in entries(tmp_path) if name.endswith(".tmp")]


def test_the_folder_comes_from_the_variable_and_no_cache_writes_nothing(tiny_openclip, _cache_in_tmp, tmp_path):
    built = build(tiny_openclip, None)
    assert entries(_cache_in_tmp) == [f"{built.cache_key}.safetensors"]
    build(tiny_openclip, False, templates=["a {}."])
    assert len(entries(_cache_in_tmp)) == 1


def test_a_cache_that_cannot_be_written_is_a_line_on_stderr_and_the_run_goes_on(tiny_openclip, tmp_path, capsys):
    blocked = tmp_path / "a-file"
    blocked.write_text("in the way", "utf-8")
    classifier = build(tiny_openclip, blocked / "cache")
    with torch.no_grad():
        assert classifier(PIXELS).shape == (2, 3)
    assert "cannot be written" in capsys.readouterr().err


def test_the_weights_fingerprint_reads_every_tensor_with_its_name_and_dtype():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
    base = weights_fingerprint(model)
    assert weights_fingerprint(model) == base and len(base) == 64
    assert weights_fingerprint(model.to(torch.bfloat16)) != base  # dtypes numpy lacks hash too
    model = model.float()
    with torch.no_grad():
        model[1].bias[0] += 1e-3
    assert weights_fingerprint(model) != base
