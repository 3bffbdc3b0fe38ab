"""Every named variant is a folder with its spec and README, shipped as package data; the -10
subset's split and pairing rules live in its own folder and the compose planner reaches them."""

from __future__ import annotations

from collections import Counter
from importlib import resources

import pytest

from builder.compose.spec import NAMED_VARIANTS, load_variant, variant_folder, variant_planning


@pytest.mark.parametrize("name", NAMED_VARIANTS)
def test_each_named_variant_folder_has_its_spec_and_readme(name):
    folder = resources.files("builder.variants").joinpath(variant_folder(name))
    assert folder.joinpath("spec.yaml").is_file()
    readme = folder.joinpath("README.md").read_text("utf-8")
    assert readme.startswith(f"# {name}\n")
    assert load_variant(name).name == name


def test_only_subset_variants_bring_their_own_planning():
    assert variant_planning(load_variant("hard-spurious-imagenet")) is None
    assert variant_planning(load_variant("hard-spurious-imagenet-ar")) is None
    planning = variant_planning(load_variant("hard-spurious-imagenet-10"))
    assert planning.__name__ == "builder.variants.hard_spurious_imagenet_10.planning"
    assert callable(planning.plan_jobs)


def test_majority_split_is_seeded_and_rounds_half_up():
    from builder.variants.hard_spurious_imagenet_10.planning import split_own_and_paired

    keys = [f"img{n:02d}" for n in range(10)]
    kinds = split_own_and_paired(keys, 0.9, seed=0)
    assert Counter(kinds.values()) == {"original": 9, "paired": 1}
    assert kinds == split_own_and_paired(list(reversed(keys)), 0.9, seed=0)  # listing order does not matter
    assert Counter(split_own_and_paired(keys[:5], 0.5, seed=0).values()) == {"original": 3, "paired": 2}
