"""Cohen's kappa, written once for the human studies' agreement (`annotation.agreement`) and Table 3's
metric-human kappa and its bootstrap (`blindspot.bootstrap`), which may not import each other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# Disagreement weights between categories i and j (in their order), all integers so kappa stays exact.
WEIGHTS = {None: lambda d: (d > 0).astype(np.int64), "linear": lambda d: d, "quadratic": lambda d: d**2}


def kappa_from_confusion(confusion: Any, weights: str | None = None) -> np.ndarray:
    """Cohen's kappa of (..., k, k) confusion matrices of counts (one rater's categories down, the other's
    across, in one order), unweighted or with `linear` or `quadratic` disagreement weights; NaN where it is
    undefined (no items, or no disagreement expected by chance: both raters constant and equal). Integer
    counts and weights keep it exact up to one division, so the undefined case is found exactly, and the
    bootstrap can hand many matrices at once."""
    counts = np.asarray(confusion, dtype=np.int64)
    k = counts.shape[-1]
    penalty = WEIGHTS[weights](np.abs(np.subtract.outer(np.arange(k), np.arange(k))))
    n = counts.sum(axis=(-2, -1))
    # Both n^2 times the weighted disagreement: expected from the two marginals, and observed.
    chance = np.einsum("...i,ij,...j->...", counts.sum(axis=-1), penalty, counts.sum(axis=-2))
    observed = n * (penalty * counts).sum(axis=(-2, -1))
    numerator, denominator = (chance - observed).astype(float), chance.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1), np.nan)


def confusion_matrix(a: Sequence[Any], b: Sequence[Any], categories: Sequence[Any]) -> np.ndarray:
    """The k x k counts of (a's category, b's category) over paired ratings, in the order of `categories`."""
    index = {category: i for i, category in enumerate(categories)}
    unknown = (set(a) | set(b)) - set(index)
    if unknown:
        raise ValueError(f"ratings {sorted(map(str, unknown))} are not among the categories {list(categories)}")
    if len(a) != len(b):
        raise ValueError(f"{len(a)} ratings against {len(b)}")
    counts = np.zeros((len(index), len(index)), dtype=np.int64)
    for x, y in zip(a, b, strict=True):
        counts[index[x], index[y]] += 1
    return counts


def weighted_kappa(a: Sequence[Any], b: Sequence[Any], categories: Sequence[Any], weights: str | None = None) -> float:
    """Cohen's kappa between two raters over `categories` (in order), unweighted or with `linear` or
    `quadratic` disagreement weights; NaN when there is nothing to compare or no variation at all."""
    return float(kappa_from_confusion(confusion_matrix(a, b, categories), weights))
