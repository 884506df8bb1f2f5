"""Score T2I metrics on ProtoBias (paper, sections 5 and 6, Table 3).

A metric is right on a pair only when M(T, I_corr) > M(T, I_adv) on its raw scores; a tie, a NaN
score or a test pair the metric has no row for counts as a failure. Pairwise accuracy is the
fraction of right pairs. Cohen's kappa is the chance-corrected agreement between that binary choice
and the human majority's, read as binary too: the majority prefers I_corr, or it does not (it prefers
I_adv, or no image: `neither` or a tie). The paper computes "all reported values in Table 3 ... on the
same annotated human-reference subset", so kappa covers every annotated pair, and a pair without a
clear majority counts as the humans not preferring I_corr, as in the Human row's accuracy. Both come
with 95% percentile-bootstrap intervals over pairs (`blindspot.protobias.bootstrap`), which the paper
does not report (docs/fidelity.md P25). Pairs from one prompt triplet (several T2I models and seeds)
are resampled independently; the intervals ignore that clustering.

Table 3 is computed on the human-annotated test pairs when there are human choices, as in the paper;
the whole test split then gets a second table of accuracy. Without human choices the one table is
the whole test split's, and its title says so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from blindspot import tables
from blindspot.io import atomic_path, read_csv, read_table, stable_id, write_text
from blindspot.protobias.bootstrap import NAN_ESTIMATE, bootstrap_accuracy, bootstrap_kappa
from blindspot.reporting import to_latex, to_markdown

log = logging.getLogger(__name__)

CHOICES = ("corr", "adv", "neither")  # a human majority choice per pair
HUMAN = "human"  # the pseudo-metric of the human majority in the breakdown (accuracy only)
HUMAN_FAMILY = "Human semantic-correctness preferences"
HUMAN_LABEL = "Human"
OVERALL = "overall"
ANNOTATED, TEST_SPLIT = "annotated", "test split"  # the populations a breakdown is computed on
BREAKDOWNS = (OVERALL, "domain", "knob", "t2i", "subcategory")  # the paper reports overall and domain only
BREAKDOWN_COLUMNS = [
    "population", "metric", "breakdown", "group", "n", "accuracy", "ci_low", "ci_high", "kappa", "kappa_low",
    "kappa_high", "n_kappa", "n_unscored",
]  # fmt: skip

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
    frames = [read_table(path, tables.METRIC_SCORES) for path in paths]
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
    absent = [m for m in metrics if m not in set(scores["metric"])]
    if absent:
        log.warning("no scores for metric(s) %s: left out of the evaluation", absent)
        metrics = [m for m in metrics if m not in absent]
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


def _cell_seed(seed: int, *key: str) -> np.random.Generator:
    """One generator per (metric, breakdown, group): its interval does not move when other metrics come or go."""
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
    if humans is not None:
        humans = _check_choices(humans, "human choices")
        unknown = pd.Index(humans["pair_id"]).difference(test["pair_id"])
        if len(unknown):
            raise ValueError(f"{len(unknown)} human-annotated pairs are not test pairs, e.g. {list(unknown[:3])}")
        choice = humans.set_index("pair_id")["choice"].reindex(test["pair_id"]).to_numpy()
    elif annotated_only:
        raise ValueError("annotated_only needs human choices")
    else:
        choice = np.full(len(test), None, dtype=object)
    keep = np.isin(choice, CHOICES) if annotated_only else np.ones(len(test), dtype=bool)
    test, correct, unscored, choice = test[keep], correct[keep], unscored[keep], choice[keep]
    annotated = np.isin(choice, CHOICES)
    human_corr = choice == "corr"
    population = ANNOTATED if annotated_only else TEST_SPLIT

    rows = []
    for breakdown in breakdowns:
        if breakdown != OVERALL and breakdown not in test.columns:
            raise ValueError(f"unknown breakdown {breakdown!r}: not a column of the benchmark pairs")
        keys = np.full(len(test), "all", dtype=object) if breakdown == OVERALL else test[breakdown].fillna("(none)")
        groups = pd.Series(np.arange(len(test))).groupby(np.asarray(keys, dtype=str), sort=True)
        for group, positions in groups:
            idx = positions.to_numpy()
            on = annotated[idx]
            for metric in correct.columns:
                right = correct[metric].to_numpy()[idx]
                rng = _cell_seed(seed, metric, breakdown, group)
                acc = bootstrap_accuracy(right, n_boot, rng, level)
                kappa = (
                    bootstrap_kappa(right[on], human_corr[idx][on], n_boot, rng, level) if on.any() else NAN_ESTIMATE
                )
                rows.append([population, metric, breakdown, group, len(idx), *acc, *kappa, int(on.sum()),
                             int(unscored[metric].to_numpy()[idx].sum())])  # fmt: skip
            if humans is not None:
                acc = bootstrap_accuracy(human_corr[idx][on], n_boot, _cell_seed(seed, HUMAN, breakdown, group), level)
                rows.append([population, HUMAN, breakdown, group, int(on.sum()), *acc, *NAN_ESTIMATE, 0, 0])
    frame = pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS)
    metric_rank = {m: i for i, m in enumerate([HUMAN, *correct.columns])}
    breakdown_rank = {b: i for i, b in enumerate(breakdowns)}
    order = np.lexsort(
        (np.arange(len(frame)), frame["breakdown"].map(breakdown_rank), frame["metric"].map(metric_rank))
    )  # metric, then breakdown, then group as built (sorted)
    return frame.iloc[order].reset_index(drop=True)


def write_breakdown(breakdown: pd.DataFrame, path: str | Path) -> None:
    """The long table at full precision, as CSV."""
    write_text(path, breakdown.to_csv(index=False))


# --- Table 3 ----------------------------------------------------------------------------------------------------


def _families(breakdown: pd.DataFrame, metrics: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """(family, metric names) in config order, metrics without rows left out; the human row first when present."""
    present = list(dict.fromkeys(breakdown["metric"]))
    unknown = [m for m in present if m != HUMAN and m not in metrics]
    if unknown:
        raise ValueError(f"metric(s) {unknown} have no family and label in the config")
    families: dict[str, list[str]] = {HUMAN_FAMILY: [HUMAN]} if HUMAN in present else {}
    for name, entry in metrics.items():
        if name in present:
            if "family" not in entry:
                raise ValueError(f"metric {name!r} has no family in the config")
            families.setdefault(entry["family"], []).append(name)
    return list(families.items())


def _label(name: str, metrics: Mapping[str, Mapping[str, Any]]) -> str:
    return HUMAN_LABEL if name == HUMAN else str(metrics[name].get("label", name))


def _domain_label(domain: str) -> str:
    return domain if domain == "Overall" else domain.replace("_", " ").title()


def table3(
    breakdown: pd.DataFrame,
    metrics: Mapping[str, Mapping[str, Any]],
    domains: Sequence[str] | None = None,
    *,
    kappa: bool = True,
) -> pd.DataFrame:
    """The paper's Table 3: a header row per family, then its metrics in config order; per domain `κ` and `Acc.`,
    then `Overall`. `metrics` is the config's {name: {family, label}}; `domains` orders the domain columns
    (default: sorted); `kappa=False` leaves the κ columns out (a table without human choices). Header rows
    hold empty strings; values are full precision."""
    by_domain = breakdown[breakdown["breakdown"] == "domain"]
    overall = breakdown[breakdown["breakdown"] == OVERALL]
    domains = sorted(by_domain["group"].unique()) if domains is None else list(domains)
    kinds = ["κ", "Acc."] if kappa else ["Acc."]
    columns = ["Method", *(f"{_domain_label(d)} {kind}" for d in [*domains, "Overall"] for kind in kinds)]
    cells = {(r.metric, r.group): r for r in by_domain.itertuples(index=False)}
    cells |= {(r.metric, "Overall"): r for r in overall.itertuples(index=False)}
    rows: list[list[Any]] = []
    for family, names in _families(breakdown, metrics):
        rows.append([family] + [""] * (len(columns) - 1))
        for name in names:
            row: list[Any] = [_label(name, metrics)]
            for domain in [*domains, "Overall"]:
                cell = cells.get((name, domain))
                values = {"κ": float("nan"), "Acc.": float("nan")} if cell is None else {
                    "κ": cell.kappa, "Acc.": cell.accuracy}  # fmt: skip
                row += [values[kind] for kind in kinds]
            rows.append(row)
    return pd.DataFrame(rows, columns=columns, dtype=object)


def population_size(breakdown: pd.DataFrame) -> int:
    """How many test pairs a breakdown covers: its largest overall count (0 for none)."""
    counts = breakdown.loc[breakdown["breakdown"] == OVERALL, "n"]
    return int(counts.max()) if len(counts) else 0


def table3_caption(n_pairs: int, human_kappa: bool) -> str:
    """Table 3's title and definitions, on the annotated pairs as in the paper."""
    human = (
        "the mean pairwise quadratic weighted Cohen's κ among annotators"
        if human_kappa
        else "n/a: the mean pairwise κ among annotators needs each annotator's labels (annotation.pairwise_labels)"
    )
    return (
        f"Table 3: main results on the {n_pairs} human-annotated test pairs (the paper computes every value on its "
        "900-pair annotated subset). κ: Cohen's agreement between the metric's pairwise choice (I_corr scored above "
        "I_adv or not) and the human majority's (prefers I_corr or not: a tie or `neither` is not), on every "
        f"annotated pair; for the Human row, {human}. Acc.: pairwise accuracy, a metric is right when it scores "
        "I_corr strictly above I_adv; for the Human row, the fraction of annotated pairs whose majority prefers I_corr."
    )


def whole_split_caption(n_pairs: int, n_annotated: int) -> str:
    """The title of the accuracy table on the whole test split: beside Table 3 (`n_annotated` pairs), or
    instead of it when there are no human choices (`n_annotated` 0)."""
    where = (
        f"Table 3's population is the {n_annotated} human-annotated pairs (its own table)"
        if n_annotated
        else "not Table 3's population, the paper's 900 human-annotated test pairs. κ needs human pairwise labels "
        "(annotation.pairwise_labels, or a majority per pair in evaluation.human_choices)"
    )
    return (
        f"Pairwise accuracy on the whole test split ({n_pairs} pairs); {where}. Acc.: a metric is right when it "
        "scores I_corr strictly above I_adv under the neutral prompt T."
    )


def with_human_kappa(
    table: pd.DataFrame, human: Mapping[str, Mapping[str, float]], domains: Sequence[str]
) -> pd.DataFrame:
    """Table 3 with the paper's agreement among annotators in the Human row's κ cells: per domain and
    overall, the mean pairwise quadratic weighted kappa (`human`, from `agreement.human_row`). The row's
    accuracy, the share of pairs the majority prefers I_corr, comes from the breakdown as for a metric."""
    found = table.index[table["Method"] == HUMAN_LABEL]
    if len(found) != 1:
        raise ValueError(f"Table 3 has {len(found)} '{HUMAN_LABEL}' rows; people's choices give it one")
    table = table.copy()
    for domain in [*domains, "overall"]:
        column = f"{_domain_label('Overall' if domain == 'overall' else domain)} κ"
        table.loc[found[0], column] = human.get(domain, {}).get("kappa", float("nan"))
    return table


def write_table3(
    table: pd.DataFrame,
    csv: str | Path,
    markdown: str | Path,
    latex: str | Path,
    caption: str,
    decimals: int = 3,
) -> None:
    """Table 3 as CSV (full precision), Markdown and LaTeX under `caption` (`decimals` places; κ becomes
    $\\kappa$ in LaTeX)."""
    write_text(csv, table.to_csv(index=False))
    shown = table.map(lambda v: ("n/a" if np.isnan(v) else f"{v:.{decimals}f}") if isinstance(v, float) else v)
    write_text(markdown, f"{caption}\n\n{to_markdown(shown)}")
    write_text(latex, to_latex(shown, caption).replace("κ", r"$\kappa$"))


# --- figure -----------------------------------------------------------------------------------------------------


def plot_accuracy(
    breakdown: pd.DataFrame,
    metrics: Mapping[str, Mapping[str, Any]],
    path: str | Path,
    domains: Sequence[str] | None = None,
    title: str = "Pairwise accuracy on ProtoBias (95% bootstrap CI)",
) -> None:
    """Bar chart PNG: pairwise accuracy per metric (x, families in config order) and domain (bars), with interval
    error bars and a dashed line at chance (0.5). Written atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    by_domain = breakdown[breakdown["breakdown"] == "domain"]
    domains = sorted(by_domain["group"].unique()) if domains is None else list(domains)
    names = [name for _, family in _families(breakdown, metrics) for name in family]
    cells = by_domain.set_index(["metric", "group"])
    width = 0.8 / max(len(domains), 1)
    figure = Figure(figsize=(max(6.0, 0.9 * len(names) + 2), 4.0), dpi=150, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    x = np.arange(len(names))
    for j, domain in enumerate(domains):
        part = cells.reindex([(name, domain) for name in names])
        accuracy = part["accuracy"].to_numpy(dtype=float)
        errors = np.clip(
            np.nan_to_num(
                np.vstack(
                    [accuracy - part["ci_low"].to_numpy(dtype=float), part["ci_high"].to_numpy(dtype=float) - accuracy]
                )
            ),
            0,
            None,
        )
        axes.bar(
            x + (j - (len(domains) - 1) / 2) * width, np.nan_to_num(accuracy), width, yerr=errors, capsize=2,
            error_kw={"elinewidth": 0.8, "ecolor": "0.25"}, label=_domain_label(domain),
        )  # fmt: skip
    axes.axhline(0.5, color="black", linestyle="--", linewidth=1, label="chance")
    axes.set_xticks(x, [_label(name, metrics) for name in names], rotation=30, ha="right")
    axes.set_ylim(0, 1)
    axes.set_ylabel("Pairwise accuracy")
    axes.set_title(title)
    figure.legend(loc="outside right upper", fontsize="small")
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
