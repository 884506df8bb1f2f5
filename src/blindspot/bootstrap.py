"""Percentile-bootstrap intervals that resample what was built together: clusters (a ProtoBias triplet with
all of its pairs, a HumbleBench image with all of its questions), each drawn whole, with replacement.

Items of one cluster share their prompt or image and tend to be right or wrong together; resampling them
as if independent gives intervals too narrow by up to the square root of the cluster size. Where every
item is its own cluster this is the ordinary bootstrap over items.

Vectorised: every statistic here is a function of counts that add up over clusters (right answers, a 2x2
table, per-letter hits), so a resample is a vector of how often each cluster was drawn (Multinomial(K, 1/K)
over K clusters) times the clusters' count table. One set of draws serves every statistic of a cell, so
two metrics or models on the same items are resampled alike (a paired interval). The draws are made a
block at a time, so memory stays flat at any size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from blindspot.kappa import kappa_from_confusion

# The most cluster weights held at once (a block of resamples times the clusters).
BLOCK_CELLS = 2**21


class Estimate(NamedTuple):
    value: float
    low: float
    high: float


NAN_ESTIMATE = Estimate(float("nan"), float("nan"), float("nan"))


def _rng(seed: int | np.random.Generator) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def percentiles(samples: np.ndarray, level: float) -> tuple[float, float]:
    """The percentile interval of `samples` at `level`, NaN resamples left out (all NaN: NaN)."""
    samples = samples[~np.isnan(samples)]
    if not len(samples):
        return float("nan"), float("nan")
    low, high = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def cluster_totals(counts: np.ndarray, clusters: Any) -> np.ndarray:
    """Per cluster (in sorted order, so the same clusters in any row order are drawn alike), the column sums of
    `counts` (items x columns)."""
    counts = np.asarray(counts, dtype=float)
    codes, _ = pd.factorize(np.asarray(clusters), sort=True)
    totals = np.zeros((codes.max() + 1 if len(codes) else 0, counts.shape[1]))
    np.add.at(totals, codes, counts)
    return totals


def resampled_totals(per_cluster: np.ndarray, n_boot: int, seed: int | np.random.Generator) -> np.ndarray:
    """(n_boot x columns): the column totals of `per_cluster` (clusters x columns) in each of `n_boot` resamples
    of its clusters with replacement; NaN with fewer than two clusters, whose spread one cannot show (one
    triplet's pairs give no interval, not a zero-width one)."""
    rng, clusters = _rng(seed), len(per_cluster)
    if clusters < 2:
        return np.full((n_boot, per_cluster.shape[1]), np.nan)
    out = np.zeros((n_boot, per_cluster.shape[1]))
    block = max(1, BLOCK_CELLS // clusters)
    shares = np.full(clusters, 1.0 / clusters)
    for start in range(0, n_boot, block):
        drawn = rng.multinomial(clusters, shares, size=min(block, n_boot - start))
        out[start : start + len(drawn)] = drawn @ per_cluster
    return out


def resample(
    counts: np.ndarray, clusters: Any = None, n_boot: int = 2000, seed: int | np.random.Generator = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(observed, resampled): the column totals of `counts` (items x columns) as one row, and in each of `n_boot`
    resamples of `clusters` (default: each item its own), for the statistics of one cell to share."""
    counts = np.asarray(counts, dtype=float)
    clusters = np.arange(len(counts)) if clusters is None else clusters
    return counts.sum(axis=0)[None, :], resampled_totals(cluster_totals(counts, clusters), n_boot, seed)


def estimate(
    statistic: Callable[[np.ndarray], np.ndarray], observed: np.ndarray, resampled: np.ndarray, level: float = 0.95
) -> Estimate:
    """`statistic` (of rows of totals, a value per row) of the observed totals, with its percentile interval over
    the resampled ones; all NaN where the observed value is undefined."""
    value = float(statistic(observed)[0])
    if np.isnan(value):
        return NAN_ESTIMATE
    return Estimate(value, *percentiles(np.asarray(statistic(resampled), dtype=float), level))


def interval(
    counts: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray],
    clusters: Any = None,
    n_boot: int = 2000,
    seed: int | np.random.Generator = 0,
    level: float = 0.95,
) -> Estimate:
    """`estimate` of one statistic over `resample`d clusters."""
    return estimate(statistic, *resample(counts, clusters, n_boot, seed), level)


def _binary(values: Any, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype != bool:
        if not np.isin(array, (0, 1)).all():
            raise ValueError(f"{name} must be binary (bool or 0/1), got values {sorted(set(array.tolist()))[:5]}")
        array = array.astype(bool)
    return array


def share(totals: np.ndarray) -> np.ndarray:
    """Column 0's total over column 1's (right over asked), NaN where nothing was asked."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals[:, 1] > 0, totals[:, 0] / totals[:, 1], np.nan)


def bootstrap_accuracy(
    correct: Any,
    n_boot: int = 2000,
    seed: int | np.random.Generator = 0,
    level: float = 0.95,
    clusters: Any = None,
) -> Estimate:
    """Accuracy with a percentile-bootstrap interval over `clusters` of items (default: each item its own);
    NaN for no items."""
    correct = _binary(correct, "correct")
    if not len(correct):
        return NAN_ESTIMATE
    return interval(np.column_stack([correct, np.ones(len(correct))]), share, clusters, n_boot, seed, level)


def confusion_columns(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per item, its cell of the 2x2 table of two binary ratings (a's True then False down, b's across,
    `kappa.kappa_from_confusion`'s layout), as four 0/1 columns."""
    return np.column_stack([a & b, a & ~b, ~a & b, ~a & ~b]).astype(float)


def kappa_of_totals(totals: np.ndarray) -> np.ndarray:
    """Cohen's kappa of each row of 2x2 table totals (`confusion_columns`' four columns); NaN for a row of NaN
    (no resample, `resampled_totals`)."""
    missing = np.isnan(totals).any(axis=1)
    return np.where(missing, np.nan, kappa_from_confusion(np.where(missing[:, None], 0, totals).reshape(-1, 2, 2)))


def cohen_kappa(a: Any, b: Any) -> float:
    """Cohen's kappa between two binary ratings of the same items; NaN when undefined."""
    a, b = _binary(a, "a"), _binary(b, "b")
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"ratings must be two 1-D arrays of one length, got shapes {a.shape} and {b.shape}")
    return float(kappa_of_totals(confusion_columns(a, b).sum(axis=0)[None, :])[0])


def bootstrap_kappa(
    a: Any,
    b: Any,
    n_boot: int = 2000,
    seed: int | np.random.Generator = 0,
    level: float = 0.95,
    clusters: Any = None,
) -> Estimate:
    """Cohen's kappa with a percentile-bootstrap interval over `clusters` of items (resamples where kappa is
    undefined are left out of the percentiles); all NaN when kappa itself is undefined."""
    a, b = _binary(a, "a"), _binary(b, "b")
    if not len(a):
        return NAN_ESTIMATE
    return interval(confusion_columns(a, b), kappa_of_totals, clusters, n_boot, seed, level)


def accuracy_summary(correct: Any, clusters: Any, unit: str, n_boot: int = 1000) -> str:
    """Accuracy with its 95% interval resampling `clusters` (what `unit` names), for a summary line:
    "accuracy 0.612 [0.581, 0.640], resampling prompts"."""
    found = bootstrap_accuracy(correct, n_boot, 0, clusters=clusters)
    if np.isnan(found.value):
        return "accuracy n/a"
    return f"accuracy {found.value:.3f} [{found.low:.3f}, {found.high:.3f}], resampling {unit}"
