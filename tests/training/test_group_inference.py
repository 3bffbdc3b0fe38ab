"""Training groups come from each sample's metadata: own/paired x class on -10, group x class else."""

from __future__ import annotations

import numpy as np
import pytest

from training.groups import GroupMetadataError, balanced_indices, check_groups_cover, selection_scores, training_group


def test_groups_from_metadata():
    assert (
        training_group({"wnid": "n01443537", "background": "paired", "paired_wnid": "n02437312", "group": "CeR"})
        == "paired|n01443537"
    )
    own = {"wnid": "n01443537", "background": "original", "paired_wnid": "n02437312"}
    assert training_group(own) == "own|n01443537"
    assert training_group({"wnid": "n01443537", "background": "random", "group": "CoR"}) == "CoR|n01443537"
    with pytest.raises(GroupMetadataError, match="no group metadata.*--method erm"):
        training_group({"source_id": "x", "wnid": "n01443537"})


def test_scores_and_cover():
    scores = selection_scores(["a", "a", "b", "b"], [True, True, True, False])
    assert scores["mean"] == 0.75 and scores["worst_group"] == 0.5 and scores["worst_group_name"] == "b"
    with pytest.raises(GroupMetadataError, match=r"no sample of the groups \['c'\].*--holdout"):
        check_groups_cover("val", ["a", "b"], ["a", "b", "c"])


def test_balanced_subsample_has_equal_group_sizes():
    groups = np.array(["a"] * 10 + ["b"] * 3 + ["c"] * 7)
    idx = balanced_indices(groups, np.random.default_rng(0))
    assert sorted(np.unique(groups[idx], return_counts=True)[1]) == [3, 3, 3] and len(set(idx)) == 9
    assert not np.array_equal(idx, balanced_indices(groups, np.random.default_rng(1)))
