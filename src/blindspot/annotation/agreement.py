"""Agreement statistics behind the papers' human studies.

Filter validation (ProtoBias 4.2, Appendix D): "a trained human evaluator" (the designated evaluators,
one by default) scores images 1-10 against their own description, as the VLM filter did; human and VLM
keep/reject decisions and scores are compared.
Pairwise preferences (Appendix E): annotators choose I_corr, I_adv or neither for a test pair; their
agreement, the majority per pair (the human reference of Table 3) and the human row of Table 3.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from blindspot.kappa import weighted_kappa

# Pairwise choices on an ordinal scale for `kappa.weighted_kappa`: "neither" lies between the two images.
CHOICE_ORDER = {"adv": 0, "neither": 1, "corr": 2}


def score_kappa(a: Sequence[float], b: Sequence[float], weights: str) -> float:
    """Weighted Cohen's kappa between two raters' numeric scores on one equally spaced scale, with `linear` or
    `quadratic` disagreement weights: 1 - (mean weighted disagreement of the paired scores) / (its mean over every
    pairing of an `a` score with a `b` score, the chance expectation from the two marginals). On integer scores
    this is exactly `weighted_kappa` over the scale's categories; means (of several evaluators, of the VLMs, or
    expected scores) need no rounding. NaN when there is nothing to compare or no variation at all."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) != len(y):
        raise ValueError(f"{len(x)} scores against {len(y)}")
    if not len(x):
        return math.nan
    if weights == "quadratic":
        observed = float(np.mean((x - y) ** 2))
        chance = float(np.mean(x**2) + np.mean(y**2) - 2 * np.mean(x) * np.mean(y))
    elif weights == "linear":
        observed = float(np.mean(np.abs(x - y)))
        # the mean |x_i - y_j| over every pairing, through sorted y and its prefix sums (no n x n matrix)
        ys = np.sort(y)
        below = np.concatenate([[0.0], np.cumsum(ys)])
        k = np.searchsorted(ys, x)
        chance = float(np.sum(x * k - below[k] + (below[-1] - below[k]) - x * (len(ys) - k)) / (len(x) * len(ys)))
    else:
        raise ValueError(f"weights {weights!r} is not linear or quadratic")
    return 1.0 - observed / chance if chance > 1e-12 else math.nan


ANNOTATOR_KAPPA_CAPTION = "Pairwise quadratic weighted kappa between annotators"
FILTER_VALIDATION_CAPTION = (
    "Filter validation (paper, 4.2 and Appendix D): the designated evaluator's 1-10 scores ({evaluators}) against "
    "the VLM filter on {images} images. decision_kappa: Cohen's kappa between the person's keep/reject (score >= "
    "{threshold}) and the filter's (every VLM >= its threshold); for two categories every weighting gives this "
    "value. binary_disagreement: the share of images where the two decisions differ. score_kappa_linear, "
    "score_kappa_quadratic: weighted Cohen's kappa between the person's score and the mean VLM score. The paper's "
    "'weighted kappa 0.778' with 14.11% binary disagreement is not a decision kappa (at that disagreement on a "
    "subset balanced over accept/reject, a decision kappa is 0.718): compare it with the score kappas. pearson_ and "
    "spearman_human_vs_mean_vlm: the person's score against the mean VLM score; pearson_<a>_vs_<b>: between two "
    "VLMs. *_mean_kept, *_mean_rejected: the mean score of the images the filter kept and rejected."
)


def _correlation(test: Any, x: Any, y: Any) -> float:
    """scipy's `pearsonr` or `spearmanr` coefficient; NaN for fewer than three points or a constant side."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return float(test(x, y)[0]) if len(x) > 2 and np.ptp(x) > 0 and np.ptp(y) > 0 else math.nan


def filter_validation(images: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Per domain and overall, every number of the paper's filter validation (4.2, Appendix D): the decision
    kappa and binary disagreement between the person and the VLM filter, the score-level linear and quadratic
    weighted kappa between the person's score and the mean VLM score, Pearson and Spearman between them,
    Pearson between each two VLMs, and the mean human and VLM scores of the images the filter kept and
    rejected (FILTER_VALIDATION_CAPTION names each column).

    `images` has `domain`, `human_score`, `vlm_scores` (a dict or JSON {vlm: score}), `mean_vlm_score`
    and `accepted` (the filter's decision); the person keeps an image whose score is >= `threshold`."""
    import json

    from scipy.stats import pearsonr, spearmanr

    frame = images.copy()
    frame["vlm_scores"] = [json.loads(v) if isinstance(v, str) else v for v in frame["vlm_scores"]]
    frame["human_keeps"] = frame["human_score"] >= threshold
    vlms = sorted({name for scores in frame["vlm_scores"] for name in scores})
    rows = []
    for domain, part in [*frame.groupby("domain", sort=True), ("overall", frame)]:
        human, vlm = part["human_score"], part["mean_vlm_score"]
        row = {"domain": domain, "images": len(part)}
        row["decision_kappa"] = weighted_kappa(list(part["human_keeps"]), list(part["accepted"]), [False, True])
        row["binary_disagreement"] = float((part["human_keeps"] != part["accepted"]).mean())
        for weights in ("linear", "quadratic"):
            row[f"score_kappa_{weights}"] = score_kappa(human, vlm, weights)
        row["pearson_human_vs_mean_vlm"] = _correlation(pearsonr, human, vlm)
        row["spearman_human_vs_mean_vlm"] = _correlation(spearmanr, human, vlm)
        for first, second in itertools.combinations(vlms, 2):
            x = np.array([scores.get(first, math.nan) for scores in part["vlm_scores"]], dtype=float)
            y = np.array([scores.get(second, math.nan) for scores in part["vlm_scores"]], dtype=float)
            both = ~(np.isnan(x) | np.isnan(y))
            row[f"pearson_{first}_vs_{second}"] = _correlation(pearsonr, x[both], y[both])
        for decision, name in ((True, "kept"), (False, "rejected")):
            chosen = part[part["accepted"] == decision]
            row[f"human_mean_{name}"] = float(chosen["human_score"].mean()) if len(chosen) else math.nan
            row[f"vlm_mean_{name}"] = float(chosen["mean_vlm_score"].mean()) if len(chosen) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def evaluator_scores(labels: pd.DataFrame, evaluators: Sequence[str], source: str) -> pd.DataFrame:
    """The image scores of the designated filter evaluators (`annotation.filter_evaluators`); a score by
    anyone else in `source` is an error, since the paper's validation is one trained evaluator's."""
    others = sorted(set(labels["annotator"]) - set(evaluators))
    if others:
        raise ValueError(
            f"{source}: image scores by {others}, who are not in annotation.filter_evaluators {list(evaluators)}; "
            "name the evaluators as the labels do"
        )
    return labels


def annotator_kappas(choices: pd.DataFrame) -> pd.DataFrame:
    """The matrix of quadratic weighted kappa between each two annotators on the pairs both judged
    (`annotator`, `pair_id`, `choice` in corr/adv/neither), ordered adv < neither < corr; 1 on the diagonal."""
    annotators = sorted(choices["annotator"].unique())
    table = choices.pivot_table(index="pair_id", columns="annotator", values="choice", aggfunc="first")
    matrix = pd.DataFrame(np.eye(len(annotators)), index=annotators, columns=annotators)
    for first, second in itertools.combinations(annotators, 2):
        both = table[[first, second]].dropna()
        value = weighted_kappa(list(both[first]), list(both[second]), list(CHOICE_ORDER), "quadratic")
        matrix.loc[first, second] = matrix.loc[second, first] = value
    return matrix


def mean_pairwise_kappa(matrix: pd.DataFrame) -> float:
    """The mean over annotator pairs (the off-diagonal cells), NaN cells left out."""
    values = matrix.to_numpy()[np.triu_indices(len(matrix), k=1)]
    return float(np.nanmean(values)) if np.isfinite(values).any() else math.nan


def annotator_table(choices: pd.DataFrame) -> pd.DataFrame:
    """The annotators' kappa matrix (`annotator_kappas`) as a report table: a row per annotator, and a
    last row with the mean over annotator pairs (`mean_pairwise_kappa`)."""
    matrix = annotator_kappas(choices)
    mean = pd.DataFrame(
        [["mean (pairs)", mean_pairwise_kappa(matrix)] + [""] * (len(matrix) - 1)],
        columns=["Annotator", *matrix.columns],
    )
    return pd.concat([matrix.reset_index(names="Annotator").astype(object), mean], ignore_index=True)


def majority_choices(choices: pd.DataFrame) -> pd.DataFrame:
    """The human majority per pair: the most frequent choice. A tie between the most frequent choices
    (3 corr against 3 adv, or corr against neither) is "neither": no clear majority preference, which
    Table 3's kappa and the Human row's accuracy count as not preferring I_corr (docs/fidelity.md P27)."""
    rows = []
    for pair_id, part in choices.groupby("pair_id", sort=True):
        counts = part["choice"].value_counts()
        top = counts[counts == counts.max()].index.tolist()
        rows.append(
            {
                "pair_id": pair_id,
                "choice": top[0] if len(top) == 1 else "neither",
                "votes": len(part),
                "tied": len(top) > 1,
            }
        )
    return pd.DataFrame(rows, columns=["pair_id", "choice", "votes", "tied"])


def human_row(choices: pd.DataFrame, domains: pd.Series) -> dict[str, dict[str, float]]:
    """Table 3's Human row per domain and overall: accuracy is the share of pairs whose majority prefers
    I_corr; kappa is the mean pairwise quadratic weighted kappa among annotators. `domains` maps
    pair_id to its domain."""
    choices = choices.assign(domain=choices["pair_id"].map(domains))
    row = {}
    for domain, part in [*choices.groupby("domain", sort=True), ("overall", choices)]:
        majority = majority_choices(part)
        row[domain] = {
            "accuracy": float((majority["choice"] == "corr").mean()),
            "kappa": mean_pairwise_kappa(annotator_kappas(part)),
        }
    return row
