"""Percentile-bootstrap intervals for pairwise accuracy and Cohen's kappa over pairs.

Vectorised: accuracy is the mean of a 0/1 vector and kappa depends only on the 2x2 table of (metric,
human) choices, so resampling n pairs with replacement is exactly a Binomial(n, acc) draw for accuracy
and a Multinomial(n, cell shares) draw for the kappa table. We draw those (n_boot at a time) instead of
an n_boot x n index matrix, which would not fit in memory for a 30k-pair test split.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from blindspot.kappa import kappa_from_confusion


class Estimate(NamedTuple):
    value: float
    low: float
    high: float


NAN_ESTIMATE = Estimate(float("nan"), float("nan"), float("nan"))


def _rng(seed: int | np.random.Generator) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _percentiles(samples: np.ndarray, level: float) -> tuple[float, float]:
    samples = samples[~np.isnan(samples)]
    if not len(samples):
        return float("nan"), float("nan")
    low, high = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def bootstrap_accuracy(
    correct: Iterable[bool], n_boot: int = 2000, seed: int | np.random.Generator = 0, level: float = 0.95
) -> Estimate:
    """Pairwise accuracy with a percentile-bootstrap interval over pairs (NaN for no pairs)."""
    correct = _binary(correct, "correct")
    n = len(correct)
    if n == 0:
        return NAN_ESTIMATE
    accuracy = float(correct.mean())
    resampled = _rng(seed).binomial(n, accuracy, size=n_boot) / n  # = the mean of n pairs drawn with replacement
    return Estimate(accuracy, *_percentiles(resampled, level))


def _binary(values: Any, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype != bool:
        if not np.isin(array, (0, 1)).all():
            raise ValueError(f"{name} must be binary (bool or 0/1), got values {sorted(set(array.tolist()))[:5]}")
        array = array.astype(bool)
    return array


def _counts(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The 2x2 confusion matrix, a's True then False down, b's across (`kappa.kappa_from_confusion`)."""
    return np.array([[(a & b).sum(), (a & ~b).sum()], [(~a & b).sum(), (~a & ~b).sum()]], dtype=np.int64)


def cohen_kappa(a: Any, b: Any) -> float:
    """Cohen's kappa between two binary ratings of the same items; NaN when undefined."""
    a, b = _binary(a, "a"), _binary(b, "b")
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"ratings must be two 1-D arrays of one length, got shapes {a.shape} and {b.shape}")
    return float(kappa_from_confusion(_counts(a, b)))


def bootstrap_kappa(
    a: Any, b: Any, n_boot: int = 2000, seed: int | np.random.Generator = 0, level: float = 0.95
) -> Estimate:
    """Cohen's kappa with a percentile-bootstrap interval over items (resamples where kappa is undefined are
    left out of the percentiles); all NaN when kappa itself is undefined."""
    a, b = _binary(a, "a"), _binary(b, "b")
    counts = _counts(a, b)
    kappa = float(kappa_from_confusion(counts))
    if np.isnan(kappa):
        return NAN_ESTIMATE
    n = int(counts.sum())
    # = the 2x2 table of n items drawn with replacement
    tables = _rng(seed).multinomial(n, counts.ravel() / n, size=n_boot).reshape(n_boot, 2, 2)
    return Estimate(kappa, *_percentiles(kappa_from_confusion(tables), level))
