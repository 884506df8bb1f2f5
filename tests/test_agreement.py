"""Agreement statistics of the human studies, against scikit-learn, scipy and hand-computed values."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import cohen_kappa_score

from blindspot.annotation.agreement import (
    annotator_kappas,
    filter_validation,
    human_row,
    majority_choices,
    mean_pairwise_kappa,
    weighted_kappa,
)


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_weighted_kappa_equals_scikit_learns(weights):
    rng = np.random.default_rng(0)
    a = rng.integers(1, 11, 300)
    b = np.clip(a + rng.integers(-2, 3, 300), 1, 10)
    ours = weighted_kappa(list(a), list(b), range(1, 11), weights)
    assert ours == pytest.approx(cohen_kappa_score(a, b, labels=list(range(1, 11)), weights=weights))


def test_weighted_kappa_edge_cases():
    assert math.isnan(weighted_kappa([], [], [0, 1]))
    assert math.isnan(weighted_kappa([1, 1], [1, 1], [0, 1]))  # no variation: chance agreement is total
    assert weighted_kappa([0, 1, 0, 1], [0, 1, 0, 1], [0, 1]) == 1.0
    with pytest.raises(ValueError, match="not among the categories"):
        weighted_kappa(["x"], ["corr"], ["adv", "neither", "corr"])


def test_filter_validation_by_hand():
    rows = []
    rng = np.random.default_rng(1)
    for domain in ("animals", "objects"):
        for _ in range(40):
            human = int(rng.integers(1, 11))
            vlm_a = float(np.clip(human + rng.integers(-2, 3), 1, 10))
            vlm_b = float(np.clip(human + rng.integers(-1, 2), 1, 10))
            mean = (vlm_a + vlm_b) / 2
            rows.append({"domain": domain, "human_score": human, "vlm_scores": json.dumps({"a": vlm_a, "b": vlm_b}),
                         "mean_vlm_score": mean, "accepted": min(vlm_a, vlm_b) >= 8})  # fmt: skip
    images = pd.DataFrame(rows)
    table = filter_validation(images, threshold=8).set_index("domain")
    assert list(table.index) == ["animals", "objects", "overall"]
    for domain in ("animals", "overall"):
        part = images if domain == "overall" else images[images["domain"] == domain]
        keeps = part["human_score"] >= 8
        assert table.loc[domain, "images"] == len(part)
        assert table.loc[domain, "disagreement"] == pytest.approx((keeps != part["accepted"]).mean())
        assert table.loc[domain, "decision_kappa"] == pytest.approx(cohen_kappa_score(keeps, part["accepted"]))
        assert table.loc[domain, "pearson_human_vlm"] == pytest.approx(
            pearsonr(part["human_score"], part["mean_vlm_score"])[0]
        )
        assert table.loc[domain, "spearman_human_vlm"] == pytest.approx(
            spearmanr(part["human_score"], part["mean_vlm_score"])[0]
        )
        scores = [json.loads(v) for v in part["vlm_scores"]]
        assert table.loc[domain, "pearson_a_vs_b"] == pytest.approx(
            pearsonr([s["a"] for s in scores], [s["b"] for s in scores])[0]
        )
        assert table.loc[domain, "human_mean_accepted"] == pytest.approx(part[part["accepted"]]["human_score"].mean())
        assert table.loc[domain, "vlm_mean_rejected"] == pytest.approx(part[~part["accepted"]]["mean_vlm_score"].mean())
        rounded = part["mean_vlm_score"].round().clip(1, 10).astype(int)
        assert table.loc[domain, "score_kappa_quadratic"] == pytest.approx(
            cohen_kappa_score(part["human_score"], rounded, labels=list(range(1, 11)), weights="quadratic")
        )  # fmt: skip


CHOICES = pd.DataFrame(
    [("ann1", "p1", "corr"), ("ann2", "p1", "corr"), ("ann3", "p1", "adv"),
     ("ann1", "p2", "adv"), ("ann2", "p2", "corr"), ("ann3", "p2", "neither"),
     ("ann1", "p3", "corr"), ("ann2", "p3", "neither"),
     ("ann1", "p4", "neither"), ("ann2", "p4", "neither"), ("ann3", "p4", "corr")],
    columns=["annotator", "pair_id", "choice"],
)  # fmt: skip


def test_a_mean_human_score_is_rounded_as_the_mean_vlm_score_is():
    images = pd.DataFrame({"domain": ["animals"] * 3, "human_score": [7.5, 2.0, 9.0],  # 7.5: two annotators, 7 and 8
                           "vlm_scores": [json.dumps({"a": s}) for s in (8.0, 2.0, 9.0)],
                           "mean_vlm_score": [8.0, 2.0, 9.0], "accepted": [True, False, True]})  # fmt: skip
    assert filter_validation(images, threshold=8).loc[0, "score_kappa_quadratic"] == 1.0


def test_the_majority_breaks_ties_to_neither():
    majority = majority_choices(CHOICES).set_index("pair_id")
    assert majority["choice"].to_dict() == {"p1": "corr", "p2": "neither", "p3": "neither", "p4": "neither"}
    assert majority["tied"].to_dict() == {"p1": False, "p2": True, "p3": True, "p4": False}
    assert majority.loc["p3", "votes"] == 2


def test_the_annotator_matrix_and_the_human_row():
    matrix = annotator_kappas(CHOICES)
    order = ["adv", "neither", "corr"]
    pairs = CHOICES.pivot(index="pair_id", columns="annotator", values="choice")
    both = pairs[["ann1", "ann2"]].dropna()
    expected = cohen_kappa_score(both["ann1"].map(order.index), both["ann2"].map(order.index), weights="quadratic",
                                 labels=[0, 1, 2])  # fmt: skip
    assert matrix.loc["ann1", "ann2"] == pytest.approx(expected)
    assert matrix.loc["ann2", "ann1"] == matrix.loc["ann1", "ann2"]
    assert np.diag(matrix).tolist() == [1.0, 1.0, 1.0]
    upper = [matrix.loc["ann1", "ann2"], matrix.loc["ann1", "ann3"], matrix.loc["ann2", "ann3"]]
    assert mean_pairwise_kappa(matrix) == pytest.approx(np.mean(upper))
    row = human_row(CHOICES, pd.Series({"p1": "animals", "p2": "animals", "p3": "objects", "p4": "objects"}))
    assert row["animals"]["accuracy"] == 0.5  # p1 corr, p2 tied -> neither
    assert row["objects"]["accuracy"] == 0.0
    assert row["overall"]["accuracy"] == 0.25
    assert row["overall"]["kappa"] == pytest.approx(mean_pairwise_kappa(matrix))
