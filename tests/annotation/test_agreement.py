"""Agreement statistics of the human studies, against scikit-learn, scipy and hand-computed values."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import cohen_kappa_score

from blindspot.annotation.agreement import (
    CHOICE_ORDER,
    annotator_kappas,
    evaluator_scores,
    filter_validation,
    human_row,
    majority_choices,
    mean_pairwise_kappa,
    score_kappa,
    weighted_kappa,
)
from blindspot.bootstrap import bootstrap_kappa, cohen_kappa
from blindspot.kappa import kappa_from_confusion


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


def test_the_human_studies_and_table_3_compute_one_kappa_equal_to_hand_computed_values():
    """`kappa.kappa_from_confusion` is the one formula: the annotators' weighted kappa and Table 3's binary
    kappa (`blindspot.bootstrap`) are it, worked out by hand here (n^2 times the weighted disagreement,
    expected from the marginals and observed, in whole numbers)."""
    # 3 categories, confusion [[2, 1, 0], [0, 1, 1], [1, 0, 2]]: n = 8, marginals 3, 2, 3 both ways.
    cells = [("adv", "adv")] * 2 + [("adv", "neither"), ("neither", "neither"), ("neither", "corr")]
    cells += [("corr", "adv")] + [("corr", "corr")] * 2
    a, b = [x for x, _ in cells], [y for _, y in cells]
    confusion = [[2, 1, 0], [0, 1, 1], [1, 0, 2]]
    # unweighted: (64 - 22 - 8 x 3) / 42; linear: (60 - 8 x 4) / 60; quadratic: (96 - 8 x 6) / 96
    for weights, hand in ((None, 3 / 7), ("linear", 7 / 15), ("quadratic", 0.5)):
        assert weighted_kappa(a, b, list(CHOICE_ORDER), weights) == pytest.approx(hand, abs=1e-15)
        assert kappa_from_confusion(confusion, weights) == pytest.approx(hand, abs=1e-15)
    # 2x2 [[20, 5], [10, 15]]: p_o 0.7, p_e (25 x 30 + 25 x 20) / 2500 = 0.5, kappa 0.4, exactly
    first = [True] * 25 + [False] * 25
    second = [True] * 20 + [False] * 5 + [True] * 10 + [False] * 15
    assert cohen_kappa(first, second) == weighted_kappa(first, second, [False, True]) == 0.4
    assert bootstrap_kappa(first, second).value == 0.4
    assert math.isnan(cohen_kappa([True] * 3, [True] * 3))
    assert math.isnan(weighted_kappa([True] * 3, [True] * 3, [False, True]))


def validation_images(rows) -> pd.DataFrame:
    """Filter validation images from (domain, human score, VLM a's score, VLM b's score); the filter keeps an
    image both VLMs score 8 or more."""
    return pd.DataFrame(
        [
            {
                "domain": domain,
                "human_score": human,
                "vlm_scores": json.dumps({"a": a, "b": b}),
                "mean_vlm_score": (a + b) / 2,
                "accepted": min(a, b) >= 8,
            }
            for domain, human, a, b in rows
        ]
    )


def test_filter_validation_by_hand():
    """Every number of the paper's filter validation (4.2), on four images worked out by hand."""
    images = validation_images(
        [
            ("animals", 9, 9, 8),
            ("animals", 7, 8, 9),
            ("animals", 3, 2, 4),
            ("animals", 2, 3, 2),
            ("objects", 9, 9, 9),
            ("objects", 1, 1, 2),
        ]
    )
    table = filter_validation(images, threshold=8).set_index("domain")
    assert list(table.index) == ["animals", "objects", "overall"]
    animals = table.loc["animals"]
    assert animals["images"] == 4
    # person keeps [9] only, the filter keeps the first two: p_o = 3/4, p_e = 1/4 * 1/2 + 3/4 * 1/2 = 1/2
    assert animals["binary_disagreement"] == 0.25
    assert animals["decision_kappa"] == pytest.approx((3 / 4 - 1 / 2) / (1 - 1 / 2))
    # person [9, 7, 3, 2] against the mean VLM score [8.5, 8.5, 3, 2.5]
    paired_squares = (0.25 + 2.25 + 0 + 0.25) / 4
    every_pairing_squares = 8.1875 + 8.296875 + (5.25 - 5.625) ** 2  # var(human) + var(vlm) + gap of the means
    assert animals["score_kappa_quadratic"] == pytest.approx(1 - paired_squares / every_pairing_squares)
    every_pairing_distance = (13.5 + 11.5 + 11.5 + 14.5) / 16  # |9 - [8.5, 8.5, 3, 2.5]| = 13.5 in all, ...
    assert animals["score_kappa_linear"] == pytest.approx(1 - (0.5 + 1.5 + 0 + 0.5) / 4 / every_pairing_distance)
    assert animals["pearson_human_vs_mean_vlm"] == pytest.approx(7.96875 / math.sqrt(8.1875 * 8.296875))
    # ranks [4, 3, 2, 1] and [3.5, 3.5, 2, 1]
    assert animals["spearman_human_vs_mean_vlm"] == pytest.approx(math.sqrt(0.9))
    assert animals["pearson_a_vs_b"] == pytest.approx(31.5 / math.sqrt(37 * 32.75))  # [9, 8, 2, 3] and [8, 9, 4, 2]
    means = animals[["human_mean_kept", "human_mean_rejected", "vlm_mean_kept", "vlm_mean_rejected"]].tolist()
    assert means == [8.0, 2.5, 8.5, 2.75]
    assert table.loc["objects", "binary_disagreement"] == 0.0
    assert table.loc["objects", "decision_kappa"] == 1.0
    assert math.isnan(table.loc["objects", "pearson_a_vs_b"])  # two images are too few for a correlation
    assert table.loc["overall", "images"] == 6
    assert table.loc["overall", "binary_disagreement"] == pytest.approx(1 / 6)


def test_filter_validation_against_scikit_learn_and_scipy():
    rng = np.random.default_rng(1)
    rows = []
    for domain in ("animals", "objects"):
        for _ in range(40):
            human = int(rng.integers(1, 11))
            rows.append(
                (
                    domain,
                    human,
                    float(np.clip(human + rng.integers(-2, 3), 1, 10)),
                    float(np.clip(human + rng.integers(-1, 2), 1, 10)),
                )
            )
    images = validation_images(rows)
    table = filter_validation(images, threshold=8).set_index("domain")
    for domain in ("animals", "overall"):
        part = images if domain == "overall" else images[images["domain"] == domain]
        keeps = part["human_score"] >= 8
        assert table.loc[domain, "decision_kappa"] == pytest.approx(cohen_kappa_score(keeps, part["accepted"]))
        assert table.loc[domain, "pearson_human_vs_mean_vlm"] == pytest.approx(
            pearsonr(part["human_score"], part["mean_vlm_score"])[0]
        )
        assert table.loc[domain, "spearman_human_vs_mean_vlm"] == pytest.approx(
            spearmanr(part["human_score"], part["mean_vlm_score"])[0]
        )
        # The mean of two VLMs lies on a half-point scale: weighted kappa there, on doubled scores, no rounding.
        doubled = [(2 * part[column]).astype(int) for column in ("human_score", "mean_vlm_score")]
        for weights in ("linear", "quadratic"):
            assert table.loc[domain, f"score_kappa_{weights}"] == pytest.approx(
                cohen_kappa_score(*doubled, labels=list(range(2, 21)), weights=weights)
            )


def test_the_paper_s_disagreement_gives_a_decision_kappa_of_0_718_not_0_778():
    """With the filter's decisions balanced, p_e = 1/2 whatever the person keeps, so the decision kappa is
    1 - 2 x disagreement: 0.718 at the paper's 14.11%, not its 0.778 (FILTER_VALIDATION_CAPTION)."""
    rows = (
        [("animals", 9, 9, 9)] * 429
        + [("animals", 2, 2, 2)] * 430
        + [("animals", 2, 9, 9)] * 71
        + [("animals", 9, 2, 2)] * 70
    )
    table = filter_validation(validation_images(rows), threshold=8).set_index("domain")
    assert table.loc["overall", "binary_disagreement"] == pytest.approx(0.141)  # the paper: 14.11%
    assert table.loc["overall", "decision_kappa"] == pytest.approx(1 - 2 * 0.141)  # 0.718


@pytest.mark.parametrize("weights", ["linear", "quadratic"])
def test_score_kappa_is_weighted_kappa_on_integer_scores(weights):
    rng = np.random.default_rng(2)
    a = rng.integers(1, 11, 200)
    b = np.clip(a + rng.integers(-3, 4, 200), 1, 10)
    assert score_kappa(a, b, weights) == pytest.approx(weighted_kappa(list(a), list(b), range(1, 11), weights))
    assert math.isnan(score_kappa([5, 5], [5, 5], weights))
    assert math.isnan(score_kappa([], [], weights))
    x, y = rng.normal(5, 2, 300), rng.normal(6, 1, 300)  # continuous (expected) scores: against every pairing
    pairings = np.abs(np.subtract.outer(x, y)) ** {"linear": 1, "quadratic": 2}[weights]
    assert score_kappa(x, y, weights) == pytest.approx(1 - np.mean(np.diag(pairings)) / np.mean(pairings))


def test_only_the_designated_evaluators_score_the_filter_validation():
    labels = pd.DataFrame([("ann1", "i1", 9), ("ann2", "i1", 3)], columns=["annotator", "item_id", "score"])
    assert evaluator_scores(labels, ["ann1", "ann2"], "scores.json").equals(labels)
    with pytest.raises(
        ValueError,
        match=r"scores\.json: image scores by \['ann2'\], who are not in "
        r"annotation\.filter_evaluators \['ann1'\]",
    ):
        evaluator_scores(labels, ["ann1"], "scores.json")


CHOICES = pd.DataFrame(
    [
        ("ann1", "p1", "corr"),
        ("ann2", "p1", "corr"),
        ("ann3", "p1", "adv"),
        ("ann1", "p2", "adv"),
        ("ann2", "p2", "corr"),
        ("ann3", "p2", "neither"),
        ("ann1", "p3", "corr"),
        ("ann2", "p3", "neither"),
        ("ann1", "p4", "neither"),
        ("ann2", "p4", "neither"),
        ("ann3", "p4", "corr"),
    ],
    columns=["annotator", "pair_id", "choice"],
)


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
    expected = cohen_kappa_score(
        both["ann1"].map(order.index), both["ann2"].map(order.index), weights="quadratic", labels=[0, 1, 2]
    )
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
