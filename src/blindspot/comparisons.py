"""Paired comparisons of systems right or wrong on the same items (metrics on ProtoBias pairs, VLMs on
HumbleBench questions): a claim that A beats B is a paired test, not two intervals that do not overlap.

For every two systems, on the items both were scored on: the difference in accuracy with a paired
percentile-bootstrap interval (both resampled on the same clusters, `blindspot.bootstrap`), and McNemar's
exact test on the discordant items (A right and B wrong against the reverse: a two-sided binomial test at
one half), its p-values corrected for the number of comparisons by Holm's step-down method.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from blindspot.bootstrap import cluster_totals, percentiles, resampled_totals
from blindspot.io import write_text
from blindspot.reporting import to_markdown
from blindspot.sampling import marked_caption, marked_table

COMPARISON_COLUMNS = [
    "a",
    "b",
    "n",
    "accuracy_a",
    "accuracy_b",
    "difference",
    "difference_low",
    "difference_high",
    "a_only",
    "b_only",
    "p_mcnemar",
    "p_holm",
    "significant",
]
ALPHA = 0.05


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """McNemar's exact two-sided p-value: of the discordant items, how unlikely a split at least this uneven is
    when each is A's or B's with probability one half (1 without discordant items)."""
    from scipy.stats import binomtest

    discordant = a_only + b_only
    return 1.0 if not discordant else float(binomtest(a_only, discordant, 0.5).pvalue)


def holm(p_values: Any) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (each compared with ALPHA as it is)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    scaled = (len(p) - np.arange(len(p))) * p[order]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return adjusted


def paired_comparisons(
    correct: pd.DataFrame,
    clusters: Any,
    n_boot: int,
    seed: int | np.random.Generator,
    scored: pd.DataFrame | None = None,
    level: float = 0.95,
) -> pd.DataFrame:
    """Every two systems of `correct` (items x systems, booleans; in column order, a before b) compared on the
    items both have scores for (`scored`, the same shape; default all), resampling `clusters` (per item) whole
    with one set of draws for every comparison. Columns: COMPARISON_COLUMNS; `significant`: Holm's p below ALPHA."""
    systems = list(correct.columns)
    pairs = list(itertools.combinations(systems, 2))
    if not pairs:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    right = correct.to_numpy(dtype=bool)
    known = np.ones_like(right) if scored is None else scored[systems].to_numpy(dtype=bool)
    at = {system: i for i, system in enumerate(systems)}
    columns = []
    for a, b in pairs:
        both = known[:, at[a]] & known[:, at[b]]
        columns += [right[:, at[a]] & both, right[:, at[b]] & both, both]
    counts = np.column_stack(columns).astype(float)
    drawn = resampled_totals(cluster_totals(counts, clusters), n_boot, seed)
    rows = []
    for k, (a, b) in enumerate(pairs):
        both = counts[:, 3 * k + 2].astype(bool)
        ra, rb = right[both, at[a]], right[both, at[b]]
        n = int(both.sum())
        a_only, b_only = int((ra & ~rb).sum()), int((~ra & rb).sum())
        with np.errstate(invalid="ignore", divide="ignore"):
            differences = (drawn[:, 3 * k] - drawn[:, 3 * k + 1]) / drawn[:, 3 * k + 2]
        accuracy_a, accuracy_b = (float(ra.mean()), float(rb.mean())) if n else (np.nan, np.nan)
        low, high = percentiles(differences, level) if n else (np.nan, np.nan)
        p = mcnemar_exact(a_only, b_only)
        rows.append([a, b, n, accuracy_a, accuracy_b, accuracy_a - accuracy_b, low, high, a_only, b_only, p])
    frame = pd.DataFrame(rows, columns=COMPARISON_COLUMNS[:-2])
    frame["p_holm"] = holm(frame["p_mcnemar"])
    frame["significant"] = frame["p_holm"] < ALPHA
    return frame


def shown_comparisons(compared: pd.DataFrame, label: Callable[[str], str] = str, items: str = "Items") -> pd.DataFrame:
    """The comparisons as their Markdown shows them: each system by its `label`, accuracy in %, the difference with
    its interval, the discordant `items`, both p-values (a `setting` column first where there is one)."""

    def percent(value: float) -> str:
        return "n/a" if np.isnan(value) else f"{100 * value:.1f}"

    shown = {"Setting": compared["setting"]} if "setting" in compared else {}
    shown |= {
        "A": compared["a"].map(label),
        "B": compared["b"].map(label),
        items: compared["n"],
        "Acc. A": compared["accuracy_a"].map(percent),
        "Acc. B": compared["accuracy_b"].map(percent),
        "A - B [95% CI]": [
            f"{percent(row.difference)} [{percent(row.difference_low)}, {percent(row.difference_high)}]"
            for row in compared.itertuples()
        ],
        "A only": compared["a_only"],
        "B only": compared["b_only"],
        "p (McNemar)": compared["p_mcnemar"].map(lambda p: f"{p:.3g}"),
        "p (Holm)": compared["p_holm"].map(lambda p: f"{p:.3g}"),
    }
    return pd.DataFrame(shown)


def write_comparisons(
    compared: pd.DataFrame,
    files: Sequence[str | Path],
    caption: str,
    sample: str | None = None,
    label: Callable[[str], str] = str,
    items: str = "Items",
) -> None:
    """The comparisons as CSV (fractions, full precision) and Markdown (`shown_comparisons`) under `caption`; on a
    `sample` (its label) the CSV's rows and the caption say so."""
    csv, markdown = files
    write_text(csv, marked_table(compared, sample).to_csv(index=False))
    shown = to_markdown(shown_comparisons(compared, label, items))
    write_text(markdown, f"{marked_caption(caption, sample)}\n\n{shown}")
