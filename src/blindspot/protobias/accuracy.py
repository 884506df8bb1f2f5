"""Score T2I metrics on ProtoBias (paper, sections 5 and 6, Table 3).

A metric is right on a pair only when M(T, I_corr) > M(T, I_adv) on its raw scores; a tie, a NaN
score or a test pair the metric has no row for counts as a failure. Pairwise accuracy is the
fraction of right pairs. Cohen's kappa is the chance-corrected agreement between that binary choice
and the human majority's, read as binary too: the majority prefers I_corr, or it does not (it prefers
I_adv, or no image: `neither` or a tie). The paper computes "all reported values in Table 3 ... on the
same annotated human-reference subset", so kappa covers every annotated pair, and a pair without a
clear majority counts as the humans not preferring I_corr, as in the Human row's accuracy. Both come
with 95% percentile-bootstrap intervals (`blindspot.bootstrap`), which the paper does not report
(docs/fidelity.md P25). They resample triplets, each with all of its pairs (its T2I models and seeds),
which tend to be right or wrong together; a dataset without triplet ids, pairs.

Table 3 is computed on the human-annotated test pairs when there are human choices, as in the paper;
the whole test split then gets a second table of accuracy. Without human choices the one table is
the whole test split's, and its title says so (`protobias.table3` writes the tables and the figure).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from blindspot import schemas
from blindspot.bootstrap import NAN_ESTIMATE, confusion_columns, estimate, kappa_of_totals, resample, share
from blindspot.io import read_csv, read_table, stable_id, write_text

log = logging.getLogger(__name__)

CHOICES = ("corr", "adv", "neither")  # a human majority choice per pair
HUMAN = "human"  # the pseudo-metric of the human majority in the breakdown (accuracy only)
OVERALL = "overall"
# The populations a breakdown is computed on; a metric scored on the annotated pairs only (an API metric,
# `evaluation.api_metrics_score: annotated`) has, beside the whole split, its own: the test pairs it scored.
ANNOTATED, TEST_SPLIT, SCORED_ONLY = "annotated", "test split", "scored pairs only"
BREAKDOWNS = (OVERALL, "domain", "knob", "t2i", "subcategory")  # the paper reports overall and domain only
BREAKDOWN_COLUMNS = [
    "population",
    "metric",
    "breakdown",
    "group",
    "n",
    "accuracy",
    "accuracy_low",
    "accuracy_high",
    "kappa",
    "kappa_low",
    "kappa_high",
    "n_kappa",
    "n_unscored",
]

# --- pairwise correctness ---------------------------------------------------------------------------------------


def pairwise_correct(scores: pd.DataFrame) -> pd.Series:
    """Per score row: True when corr_raw > adv_raw; ties and NaN (either side) are failures."""
    corr = scores["corr_raw"].to_numpy(dtype=float)
    adv = scores["adv_raw"].to_numpy(dtype=float)
    return pd.Series(corr > adv, index=scores.index, name="correct")  # any comparison with NaN is False


# --- inputs -----------------------------------------------------------------------------------------------------


def read_scores(paths: Sequence[str | Path]) -> pd.DataFrame:
    """Every metric's score shards in one table, in the order given. A skipped metric's shards (an API
    judge without its key) are empty and add nothing."""
    frames = [read_table(path, schemas.METRIC_SCORES) for path in paths]
    return pd.concat([frame for frame in frames if len(frame)] or frames[:1], ignore_index=True)


def _check_choices(frame: pd.DataFrame, source: str, unit: str = "row", first: int = 0) -> pd.DataFrame:
    """The (pair_id, choice) columns, or ValueError naming the first bad row as `{source}, {unit} {i + first}`."""
    missing = [c for c in ("pair_id", "choice") if c not in frame.columns]
    if missing:
        raise ValueError(f"{source}: missing column(s) {missing}; expected pair_id,choice")

    def where(i: int) -> str:
        return f"{source}, {unit} {i + first}"

    seen: dict[str, int] = {}
    for i, (pair_id, choice) in enumerate(zip(frame["pair_id"], frame["choice"], strict=True)):
        if not isinstance(pair_id, str) or not pair_id:
            raise ValueError(f"{where(i)}: empty pair_id")
        if choice not in CHOICES:
            raise ValueError(f"{where(i)} (pair_id {pair_id!r}): choice {choice!r} is not one of {', '.join(CHOICES)}")
        if pair_id in seen:
            raise ValueError(f"{where(i)}: pair_id {pair_id!r} repeats {where(seen[pair_id])}")
        seen[pair_id] = i
    return frame[["pair_id", "choice"]].reset_index(drop=True)


def read_human_choices(path: str | Path) -> pd.DataFrame:
    """The human majority choice per pair from a CSV `pair_id,choice` (choice: corr, adv or neither).

    Raises ValueError naming the file: an empty or unparseable file (`read_csv`), a missing column, or
    the line of the first bad row (line 1 is the header).
    """
    frame = read_csv(path, "human choices", dtype=str, keep_default_na=False, encoding="utf-8-sig")
    return _check_choices(frame, str(path), unit="line", first=2)


def select_test_pairs(pairs: pd.DataFrame) -> pd.DataFrame:
    """The benchmark pairs of the test split, the only ones evaluated."""
    test = pairs[pairs["split"] == "test"].reset_index(drop=True)
    if not test["pair_id"].is_unique:
        raise ValueError("benchmark pairs repeat a pair_id")
    return test


def pairwise_outcomes(
    scores: pd.DataFrame, pairs: pd.DataFrame, metrics: Iterable[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(correct, unscored): pairs x metrics booleans over the test pairs, in `pairs` order.

    A test pair a metric has no row for, or a NaN score, is unscored and counts as a failure. Scores of
    train pairs are dropped; scores of pairs the benchmark does not know raise. `metrics` orders the columns
    (default: every metric scored, sorted); a metric without a single score (skipped, e.g. an API judge without
    its key) is left out with a warning in the log.
    """
    test_ids = pd.Index(select_test_pairs(pairs)["pair_id"])
    if test_ids.empty:  # a small run whose kept seeds all drew train (or test_fraction 0)
        raise ValueError(
            f"the benchmark has no test pair (of {len(pairs)} kept pairs) for the metrics to be compared on: "
            "raise benchmark.test_fraction, or the domains' n_seeds"
        )
    unknown = pd.Index(scores["pair_id"]).difference(pd.Index(pairs["pair_id"]))
    if len(unknown):
        raise ValueError(f"{len(unknown)} scored pairs are not benchmark pairs, e.g. {list(unknown[:3])}")
    if scores.duplicated(["pair_id", "metric"]).any():
        dup = scores.loc[scores.duplicated(["pair_id", "metric"]), ["metric", "pair_id"]].iloc[0].tolist()
        raise ValueError(f"metric {dup[0]!r} has several scores for pair {dup[1]!r}")
    metrics = sorted(scores["metric"].unique()) if metrics is None else list(metrics)
    scored = set(scores["metric"].unique())
    absent = [m for m in metrics if m not in scored]
    if absent:
        log.warning("no scores for metric(s) %s: left out of the evaluation", absent)
        metrics = [m for m in metrics if m not in absent]
    if not metrics:  # none scored (every metric skipped, or all scored apart: `scored_pairs_breakdown`)
        none = pd.DataFrame(index=test_ids, columns=pd.Index([], dtype=object), dtype=bool)
        return none, none.copy()
    scores = scores[scores["pair_id"].isin(test_ids) & scores["metric"].isin(metrics)]
    table = scores.assign(
        correct=pairwise_correct(scores), scored=scores["corr_raw"].notna() & scores["adv_raw"].notna()
    ).pivot(index="pair_id", columns="metric")
    correct = table["correct"].reindex(index=test_ids, columns=metrics).fillna(False).astype(bool)
    unscored = ~table["scored"].reindex(index=test_ids, columns=metrics).fillna(False).astype(bool)
    for metric in metrics:
        if unscored[metric].any():
            log.info(
                "%s: %d of %d test pairs unscored, counted as failures", metric, unscored[metric].sum(), len(test_ids)
            )
    return correct, unscored


# --- breakdowns -------------------------------------------------------------------------------------------------


def majority_choices(humans: pd.DataFrame | None, test: pd.DataFrame, annotated_only: bool = False) -> np.ndarray:
    """The human majority's choice per test pair, in `test`'s order (None where not annotated, all None without
    `humans`); human choices of pairs that are not test pairs, or `annotated_only` without them, are a ValueError."""
    if humans is None:
        if annotated_only:
            raise ValueError("annotated_only needs human choices")
        return np.full(len(test), None, dtype=object)
    humans = _check_choices(humans, "human choices")
    unknown = pd.Index(humans["pair_id"]).difference(test["pair_id"])
    if len(unknown):
        raise ValueError(f"{len(unknown)} human-annotated pairs are not test pairs, e.g. {list(unknown[:3])}")
    return humans.set_index("pair_id")["choice"].reindex(test["pair_id"]).to_numpy()


def _cell_seed(seed: int, *key: str) -> np.random.Generator:
    """One generator per (breakdown, group), whose resamples every metric of the cell shares: an interval does not
    move when other metrics come or go, and two metrics' are paired."""
    return np.random.default_rng([seed, int(stable_id(*key), 16)])


def accuracy_breakdown(
    scores: pd.DataFrame,
    pairs: pd.DataFrame,
    metrics: Iterable[str] | None = None,
    humans: pd.DataFrame | None = None,
    *,
    annotated_only: bool = False,
    breakdowns: Sequence[str] = BREAKDOWNS,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Long table of pairwise accuracy and kappa with bootstrap intervals, per metric, breakdown and group.

    `breakdowns` names columns of the benchmark pairs (domain, knob, t2i, subcategory) and `overall` (one group,
    `all`). `metrics`: which to evaluate and in what order (default: every metric scored, sorted); the config's
    mapping of metric entries works (its keys are used), and metrics without scores are left out (logged).
    `humans` (pair_id, choice) adds kappa on the annotated pairs (the metric's choice against whether the
    majority prefers I_corr; `neither` is not preferring it) and a `human` row whose accuracy is the fraction of
    annotated pairs the majority judged corr (its kappa, inter-annotator agreement, needs the individual
    annotations: `with_human_kappa`). Without humans kappa is NaN. `annotated_only` restricts everything to the
    human-annotated pairs, as the paper's Table 3 does; the `population` column says which it is. Columns:
    BREAKDOWN_COLUMNS; n_kappa counts the pairs kappa uses, n_unscored the pairs the metric has no score for
    (already counted as failures).
    """
    test = select_test_pairs(pairs)
    correct, unscored = pairwise_outcomes(scores, pairs, metrics)
    choice = majority_choices(humans, test, annotated_only)
    keep = np.isin(choice, CHOICES) if annotated_only else np.ones(len(test), dtype=bool)
    test, correct, unscored, choice = test[keep], correct[keep], unscored[keep], choice[keep]
    annotated = np.isin(choice, CHOICES)
    human_corr = choice == "corr"
    population = ANNOTATED if annotated_only else TEST_SPLIT

    clusters = test["triplet_id" if "triplet_id" in test else "pair_id"].to_numpy()  # resampled whole
    rows = []
    for breakdown in breakdowns:
        if breakdown != OVERALL and breakdown not in test.columns:
            raise ValueError(f"unknown breakdown {breakdown!r}: not a column of the benchmark pairs")
        keys = np.full(len(test), "all", dtype=object) if breakdown == OVERALL else test[breakdown].fillna("(none)")
        groups = pd.Series(np.arange(len(test))).groupby(np.asarray(keys, dtype=str), sort=True)
        for group, positions in groups:
            idx = positions.to_numpy()
            on, corr = annotated[idx], human_corr[idx]
            # per pair: asked, annotated, the humans' preferring I_corr; then per metric: right, its kappa cells
            counts = [np.ones(len(idx)), on, corr & on]
            for metric in correct.columns:
                right = correct[metric].to_numpy()[idx]
                counts += [right, *(confusion_columns(right, corr) * on[:, None]).T]
            # one resample of the group's triplets for every metric: their intervals are paired
            observed, resampled = resample(
                np.column_stack(counts), clusters[idx], n_boot, _cell_seed(seed, breakdown, group)
            )
            for j, metric in enumerate(correct.columns):
                right, cells = 3 + 5 * j, slice(4 + 5 * j, 8 + 5 * j)
                acc = estimate(share, observed[:, [right, 0]], resampled[:, [right, 0]], level)
                kappa = estimate(kappa_of_totals, observed[:, cells], resampled[:, cells], level)
                unscored_here = int(unscored[metric].to_numpy()[idx].sum())
                rows.append(
                    [population, metric, breakdown, group, len(idx), *acc, *kappa, int(on.sum()), unscored_here]
                )
            if humans is not None:
                acc = estimate(share, observed[:, [2, 1]], resampled[:, [2, 1]], level)
                rows.append([population, HUMAN, breakdown, group, int(on.sum()), *acc, *NAN_ESTIMATE, 0, 0])
    frame = pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS)
    metric_rank = {m: i for i, m in enumerate([HUMAN, *correct.columns])}
    breakdown_rank = {b: i for i, b in enumerate(breakdowns)}
    order = np.lexsort(
        (np.arange(len(frame)), frame["breakdown"].map(breakdown_rank), frame["metric"].map(metric_rank))
    )  # metric, then breakdown, then group as built (sorted)
    return frame.iloc[order].reset_index(drop=True)


def scored_pairs_breakdown(
    scores: pd.DataFrame, pairs: pd.DataFrame, metrics: Iterable[str], **options: Any
) -> pd.DataFrame:
    """`accuracy_breakdown` of each of `metrics` on the test pairs it has scores for, not the whole split (its
    population `SCORED_ONLY`, its `n` those pairs): for the whole-split table, a metric scored on the annotated
    pairs only, whose other pairs are not failures but were never asked. Without κ (no human choices); a
    metric without a score is left out (logged). `options`: `accuracy_breakdown`'s keywords."""
    frames = []
    for metric in metrics:
        mine = scores[scores["metric"] == metric]
        if mine.empty:
            log.warning("no scores for metric %s: left out of the evaluation", metric)
            continue
        on = pairs[pairs["pair_id"].isin(mine["pair_id"])]
        frames.append(accuracy_breakdown(mine, on, [metric], **options).assign(population=SCORED_ONLY))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=BREAKDOWN_COLUMNS)


def write_breakdown(breakdown: pd.DataFrame, path: str | Path) -> None:
    """The long table at full precision, as CSV."""
    write_text(path, breakdown.to_csv(index=False))


def population_size(breakdown: pd.DataFrame) -> int:
    """How many test pairs a breakdown covers: its largest overall count (0 for none)."""
    counts = breakdown.loc[breakdown["breakdown"] == OVERALL, "n"]
    return int(counts.max()) if len(counts) else 0


def metric_comparisons(
    scores: pd.DataFrame,
    pairs: pd.DataFrame,
    metrics: Iterable[str] | None = None,
    humans: pd.DataFrame | None = None,
    *,
    annotated_only: bool = False,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Every two metrics compared on the test pairs both scored (`comparisons.paired_comparisons`: the difference
    in accuracy with a paired interval resampling triplets, McNemar's exact test, Holm's correction), on Table
    3's population (`annotated_only`: the human-annotated pairs); with `humans`, the human majority too (`HUMAN`,
    right where it prefers I_corr), on the annotated pairs."""
    from blindspot.comparisons import paired_comparisons

    test = select_test_pairs(pairs)
    correct, unscored = pairwise_outcomes(scores, pairs, metrics)
    scored = ~unscored
    choice = majority_choices(humans, test, annotated_only)
    annotated = np.isin(choice, CHOICES)
    if humans is not None:
        correct.insert(0, HUMAN, choice == "corr")
        scored.insert(0, HUMAN, annotated)
    keep = annotated if annotated_only else np.ones(len(test), dtype=bool)
    clusters = test["triplet_id" if "triplet_id" in test else "pair_id"].to_numpy()[keep]
    compared = paired_comparisons(correct[keep], clusters, n_boot, _cell_seed(seed, "comparisons"), scored[keep])
    return compared.assign(population=ANNOTATED if annotated_only else TEST_SPLIT)


def leader_tests(
    scores: pd.DataFrame, pairs: pd.DataFrame, metrics: Iterable[str], humans: pd.DataFrame | None = None
) -> dict[str, tuple[str, float]]:
    """Per domain and `overall`: the metric of the highest accuracy and McNemar's exact p-value against the
    next (`comparisons.mcnemar_exact`), on the pairs both scored of Table 3's population (the annotated pairs
    given `humans`, else the test split); a group with fewer than two metrics has none."""
    from blindspot.comparisons import mcnemar_exact

    test = select_test_pairs(pairs)
    correct, unscored = pairwise_outcomes(scores, pairs, metrics)
    keep = np.isin(majority_choices(humans, test), CHOICES) if humans is not None else np.ones(len(test), dtype=bool)
    groups = {
        OVERALL: keep,
        **{domain: keep & (test["domain"] == domain).to_numpy() for domain in test["domain"].unique()},
    }
    found = {}
    for group, on in groups.items():
        ranked = correct[on].mean().sort_values(ascending=False, kind="stable")
        if len(ranked) < 2:
            continue
        best, runner_up = ranked.index[:2]
        both = on & ~unscored[best].to_numpy() & ~unscored[runner_up].to_numpy()
        a, b = correct[best].to_numpy()[both], correct[runner_up].to_numpy()[both]
        found[group] = (best, mcnemar_exact(int((a & ~b).sum()), int((~a & b).sum())))
    return found
