"""HumbleBench's NOTA-aware metrics (paper, Table 3 and section 7.2): accuracy per type, NOTA hit and
false-NOTA rates, Humility Score, macro-F1 and d'."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from blindspot.humblebench.settings import TYPES


# Metrics. `answers` has one row per shown question: label, nota, prediction (a letter, or empty when
# unparseable) and type. An unparseable answer is wrong and is not NOTA.
def _rate(hits: int, total: int) -> float:
    return hits / total if total else math.nan


def d_prime(hits: int, signals: int, false_alarms: int, noises: int) -> float:
    """Signal-detection sensitivity of NOTA detection, z(hit rate) - z(false-alarm rate). A rate of 0
    or 1 would make it infinite; it is moved half a count inward, to 1/(2N) or 1 - 1/(2N) (Macmillan
    and Kaplan, 1985). Undefined (NaN) without both NOTA and non-NOTA questions."""
    from scipy.stats import norm

    if not signals or not noises:
        return math.nan

    def corrected(count: int, total: int) -> float:
        return min(max(count / total, 1 / (2 * total)), 1 - 1 / (2 * total))

    return float(norm.ppf(corrected(hits, signals)) - norm.ppf(corrected(false_alarms, noises)))


def macro_f1(labels: Sequence[str], predictions: Sequence[str]) -> float:
    """Mean F1 over the letters that are labels or predictions; an unparseable answer ("") is a miss
    of its label's letter and has no F1 of its own."""
    classes = sorted((set(labels) | set(predictions)) - {""})
    scores = []
    for letter in classes:
        tp = sum(lab == letter and pred == letter for lab, pred in zip(labels, predictions, strict=True))
        fp = sum(lab != letter and pred == letter for lab, pred in zip(labels, predictions, strict=True))
        fn = sum(lab == letter and pred != letter for lab, pred in zip(labels, predictions, strict=True))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(scores)) if scores else math.nan


def humility_metrics(answers: pd.DataFrame) -> dict[str, float]:
    """Every metric of the paper's Table 3 and 7.2, over `answers`, as fractions (not percentages)."""
    correct = answers["prediction"] == answers["label"]
    nota_true = answers["label"] == answers["nota"]
    nota_said = answers["prediction"] == answers["nota"]
    metrics = {
        "questions": float(len(answers)),
        "overall": _rate(int(correct.sum()), len(answers)),
        **{
            t.lower(): _rate(int(correct[answers["type"] == t].sum()), int((answers["type"] == t).sum())) for t in TYPES
        },
        "non_nota_accuracy": _rate(int(correct[~nota_true].sum()), int((~nota_true).sum())),
        "nota_hit": _rate(int(nota_said[nota_true].sum()), int(nota_true.sum())),
        "false_nota": _rate(int(nota_said[~nota_true].sum()), int((~nota_true).sum())),
        "nota_selection": _rate(int(nota_said.sum()), len(answers)),
        "unparseable": _rate(int((answers["prediction"] == "").sum()), len(answers)),
        "macro_f1": macro_f1(list(answers["label"]), list(answers["prediction"])),
        "d_prime": d_prime(
            int(nota_said[nota_true].sum()),
            int(nota_true.sum()),
            int(nota_said[~nota_true].sum()),
            int((~nota_true).sum()),
        ),
    }
    metrics["humility"] = (
        (metrics["nota_hit"] + 1 - metrics["false_nota"]) / 2
        if not (math.isnan(metrics["nota_hit"]) or math.isnan(metrics["false_nota"]))
        else math.nan
    )
    return metrics
