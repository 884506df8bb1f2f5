"""ProtoBias's per-item records (`schemas.PROTOBIAS_RECORDS`): each test pair a metric scored, with its
prompt, both images, both scores and Table 3's decision on it, taken from Table 3's own rule
(`accuracy.pairwise_correct`) so that a record and the table never disagree."""

from __future__ import annotations

import pandas as pd

from blindspot import schemas
from blindspot.protobias.accuracy import pairwise_correct, select_test_pairs

RIGHT, WRONG, UNSCORED = "right", "wrong", "unscored"


def pair_records(scores: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """One record per score row (`schemas.METRIC_SCORES`) of a test pair of `pairs` (`schemas.BENCHMARK_PAIRS`),
    in the scores' order. A score of a pair the benchmark does not know is a ValueError, as in Table 3."""
    unknown = scores.loc[~scores["pair_id"].isin(pairs["pair_id"]), "pair_id"]
    if len(unknown):
        raise ValueError(f"metric scores: pair {unknown.iloc[0]} is not a benchmark pair")
    test = select_test_pairs(pairs).set_index("pair_id")
    scores = scores[scores["pair_id"].isin(test.index)]
    correct = pairwise_correct(scores)
    scored = scores["corr_raw"].notna() & scores["adv_raw"].notna()
    pair = test.reindex(scores["pair_id"])
    records = pd.DataFrame(
        {
            "metric": scores["metric"],
            "pair_id": scores["pair_id"],
            "domain": pair["domain"].to_numpy(),
            "knob": pair["knob"].to_numpy(),
            **{field: pair[field].to_numpy() for field in ("correct_value", "adversarial_value", "triplet_id", "t2i")},
            "prompt": scores["prompt"],
            "correct_description": pair["correct_description"].to_numpy(),
            "adversarial_description": pair["adversarial_description"].to_numpy(),
            "corr_image": pair["corr_path"].to_numpy(),
            "adv_image": pair["adv_path"].to_numpy(),
            "corr_raw": scores["corr_raw"],
            "adv_raw": scores["adv_raw"],
            "corr_score": scores["corr_score"],
            "adv_score": scores["adv_score"],
            "margin": scores["corr_score"] - scores["adv_score"],
            "correct": correct,
            "outcome": correct.map({True: RIGHT, False: WRONG}).where(scored, UNSCORED),
            "corr_detail": scores["corr_detail"].fillna(""),
            "adv_detail": scores["adv_detail"].fillna(""),
        }
    )
    return records[schemas.PROTOBIAS_RECORDS.names].reset_index(drop=True)


def failed(records: pd.DataFrame) -> pd.Series:
    return ~records["correct"].astype(bool)


def failures_first(records: pd.DataFrame) -> pd.DataFrame:
    """The records with the failures first, the worst (the lowest margin) first and the unscored after them,
    then the right ones from the narrowest margin up."""
    order = records.assign(_right=~failed(records)).sort_values(["_right", "margin"], kind="stable", na_position="last")
    return order.drop(columns="_right").reset_index(drop=True)


def counts(records: pd.DataFrame) -> list[str]:
    """A line per metric: how many of its pairs failed, and how, and its accuracy with a 95% interval that resamples
    neutral prompts (each a triplet's) with all of their pairs."""
    from blindspot.bootstrap import accuracy_summary

    lines = []
    for metric, group in records.groupby("metric", sort=False):
        unscored = int((group["outcome"] == UNSCORED).sum())
        lines.append(
            f"{metric}: {int(failed(group).sum())} of {len(group)} pairs failed"
            + (f" ({unscored} unscored)" if unscored else "")
            + f"; {accuracy_summary(group['outcome'] == RIGHT, group['prompt'], 'prompts')}"
        )
    return lines
