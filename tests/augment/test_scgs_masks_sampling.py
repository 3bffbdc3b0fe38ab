"""Pure parts of SCGS: the control masks, the sampling rule, the label-check rule, the augment schema."""

from __future__ import annotations

import numpy as np
import pytest

from builder.augment.label_check import kept_shares, label_check, tally
from builder.augment.masks import control_rng, random_blob_mask, sample_keep_mask, shift_offset
from builder.augment.sampling import Misclassified, class_quota, largest_remainder, sample_misclassified
from builder.core.errors import UsageError
from builder.formats.augmented import check_augment_json, generated_key, source_of_key


def cam_like_mask(size: int = 64) -> np.ndarray:
    keep = np.zeros((size, size), bool)
    keep[5:20, 30:52] = True  # 15 x 22 = 330 pixels
    return keep


def test_random_mask_has_exactly_the_cam_area_and_depends_on_the_seed():
    keep = cam_like_mask()
    for seed in range(5):
        random = sample_keep_mask("random", keep, seed, "img_a", 0)
        assert random.sum() == keep.sum() == 330
    a, b = (sample_keep_mask("random", keep, s, "img_a", 0) for s in (0, 1))
    assert (a != b).any()
    assert np.array_equal(a, sample_keep_mask("random", keep, 0, "img_a", 0))
    # exact counts even where low-passed noise is flat (ties broken by raster order)
    assert random_blob_mask((8, 8), 13, np.random.default_rng(0)).sum() == 13
    assert random_blob_mask((8, 8), 0, np.random.default_rng(0)).sum() == 0


def test_random_mask_is_blobs_not_salt_and_pepper():
    random = sample_keep_mask("random", cam_like_mask(), 3, "img_a", 0)
    # most kept pixels have a kept right neighbour: a low-passed field, not independent pixels
    neighbours = (random[:, :-1] & random[:, 1:]).sum() / random[:, :-1].sum()
    assert neighbours > 0.8


def test_shifted_mask_is_the_cam_mask_rolled_by_the_seeded_offset():
    keep = cam_like_mask()
    shifted = sample_keep_mask("shifted", keep, 7, "img_b", 1)
    dy, dx = shift_offset(keep.shape, control_rng(7, "shifted", "img_b", 1))
    assert 16 <= dy <= 48 and 16 <= dx <= 48
    assert np.array_equal(shifted, np.roll(keep, (dy, dx), axis=(0, 1)))
    assert shifted.sum() == keep.sum() and not np.array_equal(shifted, keep)


def test_cam_and_none_masks():
    keep = cam_like_mask()
    assert np.array_equal(sample_keep_mask("cam", keep, 0, "k", 0), keep)
    assert sample_keep_mask("none", keep, 0, "k", 0) is None


def test_largest_remainder_and_quota():
    assert largest_remainder(10, [10, 6, 4]) == [5, 3, 2]
    assert largest_remainder(2, [3, 3, 3]) == [1, 1, 0]  # ties go to the lower cluster id
    assert largest_remainder(3, [7, 2, 1]) == [2, 1, 0]  # 2.1, 0.6, 0.3: floors 2, 0, 0, then the largest remainder
    assert sum(largest_remainder(7, [5, 5, 3, 1])) == 7
    assert class_quota(30, 0.2) == 6 and class_quota(2, 0.2) == 1 and class_quota(0, 0.2) == 0
    assert class_quota(5, 0.1) == 1 and class_quota(25, 0.1) == 3  # 2.5 rounds half up


def blobs(sizes, label, rng, offset=0):
    """Misclassified items of one class whose features lie in well-separated blobs of `sizes`."""
    items, feats = [], []
    for b, size in enumerate(sizes):
        centre = np.zeros(4)
        centre[b] = 50.0
        for i in range(size):
            items.append(Misclassified(f"k{label}_{b}_{i:02d}", "train-00000.tar", label, (label + 1) % 3))
            feats.append(centre + rng.normal(size=4))
    return items, feats


def test_sampling_counts_per_class_and_cluster():
    rng = np.random.default_rng(0)
    a_items, a_feats = blobs([10, 6, 4], 0, rng)
    b_items, b_feats = blobs([3], 1, rng)
    c_items, c_feats = blobs([1], 2, rng)
    items, features = a_items + b_items + c_items, np.array(a_feats + b_feats + c_feats)
    sampled, plans = sample_misclassified(items, features, clusters=3, fraction=0.5, seed=0)
    per_cluster = {(p.label, p.cluster): (p.size, p.quota) for p in plans}
    assert [per_cluster[(0, c)] for c in range(3)] == [(10, 5), (6, 3), (4, 2)]
    assert [per_cluster[(1, c)] for c in range(3)] == [(1, 1), (1, 1), (1, 0)]  # 3 errors, 3 clusters, quota 2
    assert per_cluster[(2, 0)] == (1, 1)
    counts = {label: sum(1 for s in sampled if s.source.label == label) for label in (0, 1, 2)}
    assert counts == {0: 10, 1: 2, 2: 1}  # 0.5 of 20, round-half-up of 1.5, at least one of a single error
    # the clusters found are the blobs: every sampled item of cluster c comes from one blob
    for cluster in range(3):
        assert len({s.source.key.split("_")[1] for s in sampled if s.source.label == 0 and s.cluster == cluster}) == 1
    assert len({s.source.key for s in sampled}) == len(sampled)  # without replacement
    again, _ = sample_misclassified(items, features, clusters=3, fraction=0.5, seed=0)
    assert again == sampled
    other, _ = sample_misclassified(items, features, clusters=3, fraction=0.5, seed=1)
    assert other != sampled


def test_sampling_favours_the_cluster_centre():
    rng = np.random.default_rng(1)
    items = [Misclassified(f"k{i:03d}", "s", 0, 1) for i in range(200)]
    features = rng.normal(size=(200, 2)) * np.linspace(0.2, 3, 200)[:, None]  # spread grows with the index
    picks = [
        int(s.source.key[1:])
        for seed in range(20)
        for s in sample_misclassified(items, features, clusters=1, fraction=0.1, seed=seed)[0]
    ]
    assert np.mean(picks) < 90  # measured 85.4; uniform draws would average 99.5


def test_label_check_rules():
    assert label_check(2, 2, None, "agree").kept
    assert not label_check(2, 1, None, "agree").kept
    assert not label_check(2, 2, 0, "agree").kept  # every checking model must agree
    flagged = label_check(2, 1, None, "flag")
    assert flagged.kept and flagged.flagged
    assert label_check(2, 1, None, "all").kept and not label_check(2, 1, None, "all").flagged
    shares = kept_shares(tally([(0, label_check(0, 0, None, "agree")), (0, label_check(0, 1, None, "agree"))]), ["a"])
    assert shares["per_class"]["a"]["kept_share"] == 0.5 and shares["overall"]["generated"] == 2


def test_augment_schema_and_keys():
    assert source_of_key(generated_key("ILSVRC2012_val_1_center_24_original", 3)) == (
        "ILSVRC2012_val_1_center_24_original",
        3,
    )
    assert source_of_key("ILSVRC2012_val_1_center_24_original") is None
    problems = check_augment_json({"source_key": 1})
    assert any("augment.json missing keys" in p for p in problems)
    assert any("source_key must be str" in p for p in problems)


def test_bad_options_are_refused():
    from builder.augment.stage import ScgsOptions

    with pytest.raises(UsageError, match="--mask"):
        ScgsOptions(mask="blur").check()
    with pytest.raises(UsageError, match="--fraction"):
        ScgsOptions(fraction=0).check()
    with pytest.raises(UsageError, match="--threshold"):
        ScgsOptions(threshold=1.5).check()
