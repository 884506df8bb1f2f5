"""Intervals that resample what was built together (`blindspot.bootstrap`): clusters drawn whole."""

import numpy as np
import pytest

from blindspot import bootstrap
from blindspot.bootstrap import bootstrap_accuracy, bootstrap_kappa, cluster_totals, resample


def _width(estimate) -> float:
    return estimate.high - estimate.low


def test_outcomes_equal_within_triplets_widen_the_interval_by_the_square_root_of_their_size():
    """600 triplets of 6 pairs each, a triplet right or wrong as a whole: resampling triplets gives an interval
    about sqrt(6) = 2.45 times as wide as resampling pairs as if independent."""
    rng = np.random.default_rng(0)
    per_triplet = rng.random(600) < 0.6
    correct = np.repeat(per_triplet, 6)
    triplets = np.repeat([f"t{i}" for i in range(600)], 6)
    by_pairs = bootstrap_accuracy(correct, n_boot=4000, seed=1)
    by_triplets = bootstrap_accuracy(correct, n_boot=4000, seed=1, clusters=triplets)
    assert by_pairs.value == by_triplets.value == correct.mean()
    assert 2.2 < _width(by_triplets) / _width(by_pairs) < 2.7
    # independent outcomes within triplets: the two agree
    independent = rng.random(3600) < 0.6
    ratio = _width(bootstrap_accuracy(independent, 4000, 1, clusters=triplets)) / _width(
        bootstrap_accuracy(independent, 4000, 1)
    )
    assert 0.85 < ratio < 1.15


def test_each_item_its_own_cluster_is_the_bootstrap_over_items():
    """With no clusters the resampled accuracy is Binomial(n, p) / n: its interval matches the binomial's."""
    correct = np.r_[np.ones(70, bool), np.zeros(30, bool)]
    estimate = bootstrap_accuracy(correct, n_boot=20000, seed=3)
    low, high = np.quantile(np.random.default_rng(4).binomial(100, 0.7, 200000) / 100, [0.025, 0.975])
    assert estimate.low == pytest.approx(low, abs=0.011)
    assert estimate.high == pytest.approx(high, abs=0.011)


def test_draws_made_a_block_at_a_time_are_the_same_draws(monkeypatch):
    correct = np.random.default_rng(5).random(500) < 0.5
    clusters = np.arange(500) // 5
    whole = bootstrap_accuracy(correct, 300, 7, clusters=clusters)
    monkeypatch.setattr(bootstrap, "BLOCK_CELLS", 250)  # 2 resamples at a time
    assert bootstrap_accuracy(correct, 300, 7, clusters=clusters) == whole


def test_cluster_totals_add_each_clusters_items_in_sorted_order():
    counts = np.array([[1, 1], [0, 1], [1, 1], [1, 1]])
    assert cluster_totals(counts, ["b", "a", "b", "c"]).tolist() == [[0, 1], [2, 2], [1, 1]]
    observed, resampled = resample(counts, ["b", "a", "b", "c"], n_boot=50, seed=0)
    assert observed.tolist() == [[3, 4]]
    assert resampled.shape == (50, 2)
    # each resample draws three clusters: its items number 3 to 6
    assert set(resampled[:, 1]) <= {3.0, 4.0, 5.0, 6.0}


def test_kappa_is_resampled_by_clusters_too():
    rng = np.random.default_rng(2)
    a = np.repeat(rng.random(300) < 0.5, 4)
    b = a ^ np.repeat(rng.random(300) < 0.2, 4)
    clusters = np.arange(1200) // 4
    by_items, by_clusters = bootstrap_kappa(a, b, 2000, 1), bootstrap_kappa(a, b, 2000, 1, clusters=clusters)
    assert by_items.value == by_clusters.value
    assert 1.6 < _width(by_clusters) / _width(by_items) < 2.4  # about sqrt(4)


def test_one_cluster_gives_no_interval():
    """Three pairs of one triplet: resampling it gives the same value every time, which is no interval."""
    one = bootstrap_accuracy([True, False, True], 200, 0, clusters=["t1"] * 3)
    assert one.value == pytest.approx(2 / 3)
    assert np.isnan(one.low)
    assert np.isnan(one.high)
