"""Paired comparisons (`blindspot.comparisons`): McNemar's exact test, Holm's correction, and the paired
bootstrap of a difference in accuracy that resamples clusters whole."""

import numpy as np
import pandas as pd
import pytest

from blindspot.comparisons import holm, mcnemar_exact, paired_comparisons


def test_mcnemar_exact_by_hand():
    # 8 discordant items A's, 2 B's: 2 * P(X <= 2), X ~ Binomial(10, 1/2) = 2 * (1 + 10 + 45) / 1024
    assert mcnemar_exact(8, 2) == pytest.approx(112 / 1024)
    assert mcnemar_exact(2, 8) == mcnemar_exact(8, 2)
    assert mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(0, 0) == 1.0


def test_holm_steps_down_and_keeps_the_order():
    # sorted: 0.01 x 3, 0.03 x 2, 0.04 x 1, each at least the one before
    assert holm([0.01, 0.04, 0.03]).tolist() == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]).tolist() == [1.0, 1.0]  # 0.5 x 2 caps at 1, and the next is at least that


def _two_metrics(seed: int = 0, triplets: int = 300, size: int = 4):
    """A and B right together on most triplets, A alone on some: correlated, as two metrics on one pair are."""
    rng = np.random.default_rng(seed)
    shared = np.repeat(rng.random(triplets) < 0.6, size)
    a_extra = np.repeat(rng.random(triplets) < 0.1, size)
    correct = pd.DataFrame({"a": shared | a_extra, "b": shared})
    return correct, np.repeat(np.arange(triplets), size)


def test_the_difference_is_resampled_on_the_same_triplets_for_both():
    """The function's interval is the percentile interval of sum(w (a - b)) / sum(w n) over the same
    Multinomial(K, 1/K) triplet weights, worked out here from the draws themselves."""
    correct, clusters = _two_metrics()
    compared = paired_comparisons(correct, clusters, n_boot=500, seed=3).iloc[0]
    weights = np.random.default_rng(3).multinomial(300, np.full(300, 1 / 300), size=500)
    a = np.bincount(clusters, correct["a"].to_numpy(float))
    b = np.bincount(clusters, correct["b"].to_numpy(float))
    n = np.bincount(clusters)
    differences = weights @ (a - b) / (weights @ n)
    assert (compared["difference_low"], compared["difference_high"]) == pytest.approx(
        tuple(np.quantile(differences, [0.025, 0.975]))
    )
    assert compared["difference"] == pytest.approx(correct["a"].mean() - correct["b"].mean())
    assert (compared["a_only"], compared["b_only"], compared["n"]) == (int((correct.a & ~correct.b).sum()), 0, 1200)
    assert compared["significant"]


def test_a_paired_interval_is_narrower_than_two_overlapping_ones():
    from blindspot.bootstrap import bootstrap_accuracy

    correct, clusters = _two_metrics(seed=1, triplets=200)
    compared = paired_comparisons(correct, clusters, 2000, 0).iloc[0]
    each = [bootstrap_accuracy(correct[m], 2000, 0, clusters=clusters) for m in "ab"]
    assert each[0].low < each[1].high  # the two intervals overlap
    assert compared["difference_low"] > 0  # the paired one says A is better
    assert compared["p_holm"] < 0.05


def test_items_one_system_did_not_score_are_left_out_of_that_pair_only():
    correct = pd.DataFrame({"a": [True, True, False, True], "b": [False, True, False, False], "c": [True] * 4})
    scored = pd.DataFrame({"a": [True] * 4, "b": [True, True, True, False], "c": [True] * 4})
    compared = paired_comparisons(correct, np.arange(4), 100, 0, scored).set_index(["a", "b"])
    assert compared.loc[("a", "b"), "n"] == 3
    assert compared.loc[("a", "c"), "n"] == 4
    assert (compared.loc[("a", "b"), "a_only"], compared.loc[("a", "b"), "b_only"]) == (1, 0)
    assert len(compared) == 3
    assert paired_comparisons(correct[["a"]], np.arange(4), 100, 0).empty
