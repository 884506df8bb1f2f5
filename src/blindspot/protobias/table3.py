"""The paper's Table 3 and its figure, from the long table of pairwise accuracy and kappa that
`accuracy.accuracy_breakdown` computes: a header row per metric family, then its metrics in config
order, κ and accuracy per domain and overall; the titles that say which pairs they cover; and a bar
chart of accuracy per metric and domain with its intervals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from blindspot.comparisons import ALPHA, write_comparisons
from blindspot.io import atomic_path, write_text
from blindspot.protobias import accuracy
from blindspot.protobias.accuracy import HUMAN, OVERALL
from blindspot.reporting import to_latex, to_markdown
from blindspot.sampling import marked_caption, marked_table

HUMAN_FAMILY = "Human semantic-correctness preferences"
HUMAN_LABEL = "Human"


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


# The bounds of a cell's 95 % interval, in the CSV beside its value: "Overall Acc._low", "Overall Acc._high".
BOUNDS = ("_low", "_high")


def table3(
    breakdown: pd.DataFrame,
    metrics: Mapping[str, Mapping[str, Any]],
    domains: Sequence[str] | None = None,
    *,
    kappa: bool = True,
) -> pd.DataFrame:
    """The paper's Table 3: a header row per family, then its metrics in config order; per domain `κ` and `Acc.`,
    then `Overall`, each followed by its interval's bounds (`BOUNDS`). `metrics` is the config's {name: {family,
    label}}; `domains` orders the domain columns (default: sorted); `kappa=False` leaves the κ columns out (a table
    without human choices). Header rows hold empty strings; values are full precision."""
    by_domain = breakdown[breakdown["breakdown"] == "domain"]
    overall = breakdown[breakdown["breakdown"] == OVERALL]
    domains = sorted(by_domain["group"].unique()) if domains is None else list(domains)
    kinds = {"κ": "kappa", "Acc.": "accuracy"} if kappa else {"Acc.": "accuracy"}
    values = [f"{_domain_label(d)} {kind}" for d in [*domains, "Overall"] for kind in kinds]
    columns = ["Method", *(f"{value}{bound}" for value in values for bound in ("", *BOUNDS))]
    cells = {(r.metric, r.group): r._asdict() for r in by_domain.itertuples(index=False)}
    cells |= {(r.metric, "Overall"): r._asdict() for r in overall.itertuples(index=False)}
    rows: list[list[Any]] = []
    for family, names in _families(breakdown, metrics):
        rows.append([family] + [""] * (len(columns) - 1))
        for name in names:
            row: list[Any] = [_label(name, metrics)]
            for domain in [*domains, "Overall"]:
                cell = cells.get((name, domain), {})
                row += [
                    float(cell.get(f"{field}{bound}", np.nan)) for field in kinds.values() for bound in ("", *BOUNDS)
                ]
            rows.append(row)
    return pd.DataFrame(rows, columns=columns, dtype=object)


# The mark of a best value that is not significantly above the next (`leader_tests`).
UNSETTLED = "†"


def with_intervals_shown(
    table: pd.DataFrame, decimals: int, unsettled: frozenset[tuple[str, str]] = frozenset()
) -> pd.DataFrame:
    """Table 3 as Markdown and LaTeX print it: each value with ± half its interval's width, the bounds' columns
    gone ("n/a" for an undefined value; a value alone where its interval is undefined), and UNSETTLED after the
    cells of `unsettled` (Method, column)."""
    values = [column for column in table.columns if not column.endswith(BOUNDS)]
    shown = table[values].astype(object)
    for column in values[1:]:
        for i, value in table[column].items():
            if not isinstance(value, float):
                continue
            bounds = [table.at[i, f"{column}{bound}"] if f"{column}{bound}" in table else np.nan for bound in BOUNDS]
            half = (bounds[1] - bounds[0]) / 2
            text = "n/a" if np.isnan(value) else f"{value:.{decimals}f}"
            text += "" if np.isnan(value) or np.isnan(half) else f" ± {half:.{decimals}f}"
            shown.at[i, column] = text + (f" {UNSETTLED}" if (table.at[i, "Method"], column) in unsettled else "")
    return shown


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


def unsettled_cells(
    leaders: Mapping[str, tuple[str, float]], metrics: Mapping[str, Mapping[str, Any]]
) -> frozenset[tuple[str, str]]:
    """Table 3's (Method, column) cells of a best accuracy not significantly above the next (`leader_tests`)."""
    return frozenset(
        (_label(best, metrics), f"{_domain_label('Overall' if group == OVERALL else group)} Acc.")
        for group, (best, p) in leaders.items()
        if p >= ALPHA
    )


UNSETTLED_NOTE = (
    f" {UNSETTLED}: the column's best accuracy is not significantly above the next (McNemar's exact test on the "
    f"pairs both scored, p >= {ALPHA}; every pair of metrics: metric_comparisons)."
)


def write_metric_comparisons(
    compared: pd.DataFrame, metrics: Mapping[str, Mapping[str, Any]], files: Sequence[str | Path], sample: str | None
) -> None:
    """Every two metrics' comparison as CSV and Markdown (`comparisons.write_comparisons`), the metrics by label."""
    population = compared["population"].iloc[0] if len(compared) else ""
    caption = (
        f"Every two metrics on the {population} pairs both scored: accuracy (%), the difference with its 95% paired "
        "bootstrap interval (the same triplets resampled for both), the pairs only A or only B gets right, and "
        f"McNemar's exact test on those, with Holm's correction over the {len(compared)} comparisons."
    )
    write_comparisons(compared, files, caption, sample, lambda name: _label(name, metrics), "Pairs")


def interval_note(pairs: pd.DataFrame) -> str:
    """What the tables' ± resample: triplets, each with all of its pairs, or pairs where the dataset names
    no triplet (a released table without triplet ids: each pair its own)."""
    test = accuracy.select_test_pairs(pairs)
    unit = (
        "pairs: the dataset names no triplet of each pair"
        if "triplet_id" not in test or test["triplet_id"].nunique() == len(test)
        else "triplets, each with all of its pairs (its T2I models and seeds)"
    )
    return f" ±: half the 95% percentile-bootstrap interval, resampling {unit} (CSV: each value's _low and _high)."


def marked_scored_only(
    metrics: Mapping[str, Mapping[str, Any]], scored: Mapping[str, int]
) -> dict[str, Mapping[str, Any]]:
    """The config's metrics with the label of each of `scored` (metric -> the pairs it was scored on, fewer
    than the table's) saying so: "GPT-5 (900 annotated pairs)"."""
    return {
        name: {**entry, "label": f"{entry.get('label', name)} ({scored[name]} annotated pairs)"}
        if name in scored
        else entry
        for name, entry in metrics.items()
    }


def scored_only_note(scored: Mapping[str, int]) -> str:
    """The whole-split table's note on the metrics scored on the annotated pairs only (empty without any)."""
    if not scored:
        return ""
    return (
        " A row marked '(n annotated pairs)' is an API metric scored on the annotated test pairs only (the "
        "preference pairs drawn for people to judge; evaluation.api_metrics_score: annotated): its accuracy is over "
        "those n pairs, not the whole split, which evaluation.api_metrics_score: test_split scores."
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
    sample: str | None = None,
    unsettled: frozenset[tuple[str, str]] = frozenset(),
) -> None:
    """Table 3 as CSV (full precision, each value's interval bounds beside it), Markdown and LaTeX under `caption`
    (`decimals` places, each value ± half its interval, UNSETTLED after the `unsettled` cells; κ becomes $\\kappa$
    in LaTeX); on a `sample` (its label, `sampling.sample_label`) the CSV's rows and the caption say so."""
    write_text(csv, marked_table(table, sample).to_csv(index=False))
    caption = marked_caption(caption, sample)
    shown = with_intervals_shown(table, decimals, unsettled)
    write_text(markdown, f"{caption}\n\n{to_markdown(shown)}")
    write_text(latex, to_latex(shown, caption).replace("κ", r"$\kappa$"))


def write_report(
    scores: pd.DataFrame,
    pairs: pd.DataFrame,
    humans: pd.DataFrame | None,
    human_row: Mapping[str, Any] | None,
    metrics: Mapping[str, Mapping[str, Any]],
    domains: Sequence[str],
    annotated_only: Sequence[str],
    files: Sequence[str | Path],
    test_split: Sequence[str | Path],
    breakdown: str | Path,
    plot: str | Path,
    options: Mapping[str, Any],
    sample: str | None = None,
    comparisons: Sequence[str | Path] = (),
) -> str:
    """Table 3 (`files`: CSV, Markdown, LaTeX), its plot and the long `breakdown`, and which pairs each
    covers; returns the plot's title. With `humans` (the majority choices), Table 3 is on the annotated pairs,
    as in the paper, with the `human_row`'s κ when given, and `test_split` gets the whole split's accuracy;
    without, Table 3's files hold the whole split's. A metric of `annotated_only` (scored on the annotated
    pairs only) is in the whole-split table on the pairs it was scored on, its label and the caption saying
    so; people judged only the annotated pairs, so the whole-split table has no Human row. `options` are the
    bootstrap's (n_boot, seed); on a `sample` (its label) every caption and the title say so. `comparisons` (CSV,
    Markdown): every two metrics of Table 3's compared on its pairs (`accuracy.metric_comparisons`); Table 3 marks
    a column's best accuracy that is not significantly above the next."""
    whole_split = {name: entry for name, entry in metrics.items() if name not in annotated_only}
    whole = accuracy.accuracy_breakdown(
        scores[scores["metric"].isin(list(whole_split))], pairs, whole_split, humans, **options
    )
    scored_only = accuracy.scored_pairs_breakdown(
        scores, pairs, [name for name in metrics if name in annotated_only], **options
    )
    scored_n = {
        name: int(part["n"].max())
        for name, part in scored_only[scored_only["breakdown"] == OVERALL].groupby("metric", sort=False)
    }
    marked = marked_scored_only(metrics, scored_n)
    whole_metrics = pd.concat([whole[whole["metric"] != HUMAN], scored_only], ignore_index=True)
    whole_table = table3(whole_metrics, marked, domains, kappa=False)
    n_test = len(accuracy.select_test_pairs(pairs))
    note, intervals = scored_only_note(scored_n), interval_note(pairs)
    compared_metrics = list(whole_split) if humans is None else list(metrics)
    leaders = accuracy.leader_tests(scores[scores["metric"].isin(compared_metrics)], pairs, compared_metrics, humans)
    unsettled = unsettled_cells(leaders, marked if humans is None else metrics)
    if comparisons:
        compared = accuracy.metric_comparisons(
            scores[scores["metric"].isin(compared_metrics)],
            pairs,
            compared_metrics,
            humans,
            annotated_only=humans is not None,
            **options,
        )
        write_metric_comparisons(compared, metrics, comparisons, sample)
    if humans is None:
        shown, long, labels = whole_metrics, whole_metrics, marked
        title = f"Pairwise accuracy on the whole test split ({n_test} pairs, 95% CI)"
        caption = whole_split_caption(n_test, 0) + note + intervals + UNSETTLED_NOTE
        write_table3(whole_table, *files, caption, sample=sample, unsettled=unsettled)
    else:
        shown = accuracy.accuracy_breakdown(scores, pairs, metrics, humans, annotated_only=True, **options)
        long, labels = pd.concat([shown, whole, scored_only], ignore_index=True), metrics
        annotated = accuracy.population_size(shown)
        title = f"Pairwise accuracy on the {annotated} human-annotated test pairs (95% CI)"
        table = table3(shown, metrics, domains)
        if human_row is not None:
            table = with_human_kappa(table, human_row, domains)
        caption = table3_caption(annotated, human_row is not None) + intervals + UNSETTLED_NOTE
        write_table3(table, *files, caption, sample=sample, unsettled=unsettled)
        write_table3(whole_table, *test_split, whole_split_caption(n_test, annotated) + note + intervals, sample=sample)
    accuracy.write_breakdown(long, breakdown)
    plot_accuracy(shown, labels, plot, domains, title=marked_caption(title, sample))
    return title


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
                    [
                        accuracy - part["accuracy_low"].to_numpy(dtype=float),
                        part["accuracy_high"].to_numpy(dtype=float) - accuracy,
                    ]
                )
            ),
            0,
            None,
        )
        axes.bar(
            x + (j - (len(domains) - 1) / 2) * width,
            np.nan_to_num(accuracy),
            width,
            yerr=errors,
            capsize=2,
            error_kw={"elinewidth": 0.8, "ecolor": "0.25"},
            label=_domain_label(domain),
        )
    axes.axhline(0.5, color="black", linestyle="--", linewidth=1, label="chance")
    axes.set_xticks(x, [_label(name, metrics) for name in names], rotation=30, ha="right")
    axes.set_ylim(0, 1)
    axes.set_ylabel("Pairwise accuracy")
    axes.set_title(title)
    figure.legend(loc="outside right upper", fontsize="small")
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
