"""HumbleBench's NOTA-aware metrics (paper, Table 3 and section 7.2): accuracy per type, NOTA hit and
false-NOTA rates, Humility Score, macro-F1 and d'."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from blindspot.humblebench.parsing import parse_answer
from blindspot.humblebench.settings import LETTERS, TYPES

# Metrics. `answers` has one row per shown question (ANSWER_COLUMNS): label, nota, prediction (a letter,
# or empty when unparseable), type, and letter_map (which letters the question showed). An unparseable
# answer is wrong and is not NOTA.
ANSWER_COLUMNS = ("label", "nota", "prediction", "type", "letter_map")


def require_columns(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """A ValueError naming the columns `frame` lacks, rather than a KeyError from inside pandas."""
    missing = [column for column in dict.fromkeys(columns) if column not in frame.columns]
    if missing:
        raise ValueError(f"{what} lack columns {missing} (have {list(frame.columns)})")


@lru_cache(maxsize=4096)
def shown_letters(letter_map: str) -> frozenset[str]:
    """The letters a question showed: the values of its answer row's `letter_map` (JSON)."""
    try:
        mapping = json.loads(letter_map)
    except ValueError:
        mapping = None
    if not isinstance(mapping, dict) or not any(mapping.values()):
        raise ValueError(f"HumbleBench answers: letter_map {letter_map!r} is not a JSON object of shown letters")
    return frozenset(letter for letter in mapping.values() if letter)


def read_predictions(answers: pd.DataFrame) -> pd.Series:
    """Each answer's prediction where it is a letter its question showed, else "" (unparseable): a
    missing, NaN or None prediction (an empty cell of a CSV), or a letter not shown ("F", or "E" when
    four options were shown)."""
    return pd.Series(
        [
            prediction if isinstance(prediction, str) and prediction in shown_letters(str(letter_map)) else ""
            for prediction, letter_map in zip(answers["prediction"], answers["letter_map"], strict=True)
        ],
        index=answers.index,
        dtype=object,
    )


def parsed_texts(answers: pd.DataFrame) -> pd.Series:
    """Each answer's `text` read by today's parser over the options its question showed (`options`, in
    the order of its shown letters): the tables read the stored texts again, so a parser fix reaches
    answers written before it without asking the VLMs again."""
    rows = zip(answers["text"], answers["options"], answers["letter_map"], strict=True)
    return pd.Series(
        [
            parse_answer(text, dict(zip(sorted(shown_letters(letter_map)), json.loads(options), strict=True))) or ""
            for text, options, letter_map in rows
        ],
        index=answers.index,
        dtype=object,
    )


def with_todays_reading(answers: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The answer rows with `prediction_text` read again by today's parser (`parsed_texts`), as the tables
    and the records read them, and how many answers it reads otherwise than when they were answered."""
    reread = parsed_texts(answers)
    return answers.assign(prediction_text=reread), int((reread != answers["prediction_text"]).sum())


def answer_outcomes(answers: pd.DataFrame) -> pd.DataFrame:
    """Per answer row (ANSWER_COLUMNS): `prediction`, the letter as the metrics read it ("" unparseable:
    `read_predictions`), and `correct`, whether it is the label."""
    prediction = read_predictions(answers)
    return pd.DataFrame({"prediction": prediction, "correct": prediction == answers["label"]}, index=answers.index)


def _rate(hits: int, total: int) -> float:
    return hits / total if total else math.nan


def _z_corrected(count: Any, total: Any) -> Any:
    """z of the rate count/total, a rate of 0 or 1 moved half a count inward: to 1/(2N) or 1 - 1/(2N) (Macmillan
    and Kaplan, 1985); element by element for arrays (the resamples, `humility_intervals`)."""
    from scipy.stats import norm

    with np.errstate(invalid="ignore", divide="ignore"):
        return norm.ppf(np.clip(np.divide(count, total), 1 / (2 * np.asarray(total)), 1 - 1 / (2 * np.asarray(total))))


def d_prime(hits: int, signals: int, false_alarms: int, noises: int) -> float:
    """Signal-detection sensitivity of NOTA detection, z(hit rate) - z(false-alarm rate), each rate of 0 or 1
    moved half a count inward (`_z_corrected`): it would make d' infinite. Undefined (NaN) without both NOTA
    and non-NOTA questions."""
    if not signals or not noises:
        return math.nan
    return float(_z_corrected(hits, signals) - _z_corrected(false_alarms, noises))


def macro_f1(labels: Sequence[str], predictions: Sequence[str]) -> float:
    """Mean F1 over the letters that are labels or predictions; an unparseable answer ("", or no
    string at all) is a miss of its label's letter and has no F1 of its own."""
    classes = sorted({letter for letter in (*labels, *predictions) if isinstance(letter, str) and letter})
    scores = []
    for letter in classes:
        tp = sum(lab == letter and pred == letter for lab, pred in zip(labels, predictions, strict=True))
        fp = sum(lab != letter and pred == letter for lab, pred in zip(labels, predictions, strict=True))
        fn = sum(lab == letter and pred != letter for lab, pred in zip(labels, predictions, strict=True))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(scores)) if scores else math.nan


def humility_metrics(answers: pd.DataFrame) -> dict[str, float]:
    """Every metric of the paper's Table 3 and 7.2, over `answers` (ANSWER_COLUMNS), as fractions (not
    percentages). A prediction that is not a shown letter counts as unparseable (`read_predictions`)."""
    require_columns(answers, ANSWER_COLUMNS, "HumbleBench answers")
    outcomes = answer_outcomes(answers)
    prediction, correct = outcomes["prediction"], outcomes["correct"]
    nota_true = answers["label"] == answers["nota"]
    nota_said = prediction == answers["nota"]
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
        "unparseable": _rate(int((prediction == "").sum()), len(answers)),
        # The share of each letter read, as the official scorer's Proportions give it (a position-bias
        # check); NOTA's share is `nota_selection`, the unreadable share `unparseable`.
        **{f"share_{letter.lower()}": _rate(int((prediction == letter).sum()), len(answers)) for letter in LETTERS},
        "macro_f1": macro_f1(list(answers["label"]), list(prediction)),
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


# The metrics given an interval (`humility_intervals`): their `_low` and `_high` beside them.
INTERVAL_METRICS = (
    "overall",
    *(t.lower() for t in TYPES),
    "non_nota_accuracy",
    "nota_hit",
    "false_nota",
    "humility",
    "macro_f1",
    "d_prime",
)


def _counts(answers: pd.DataFrame) -> tuple[np.ndarray, dict[str, int]]:
    """Per answer, the 0/1 counts every metric of INTERVAL_METRICS is a function of (they add up over
    questions), and where each count is in the columns."""
    prediction = read_predictions(answers).to_numpy()
    label, nota = answers["label"].to_numpy(), answers["nota"].to_numpy()
    correct, nota_true, nota_said = prediction == label, label == nota, prediction == nota
    columns = {"asked": np.ones(len(answers), bool), "correct": correct, "non_nota": ~nota_true}
    columns |= {"non_nota_correct": correct & ~nota_true, "nota": nota_true}
    columns |= {"hits": nota_said & nota_true, "false_alarms": nota_said & ~nota_true}
    for t in TYPES:
        is_type = answers["type"].to_numpy() == t
        columns |= {f"{t}_asked": is_type, f"{t}_correct": correct & is_type}
    for letter in LETTERS:
        columns |= {
            f"{letter}_tp": (label == letter) & (prediction == letter),
            f"{letter}_fp": (label != letter) & (prediction == letter),
            f"{letter}_fn": (label == letter) & (prediction != letter),
        }
    return np.column_stack(list(columns.values())).astype(float), {name: i for i, name in enumerate(columns)}


def _statistics(totals: np.ndarray, at: dict[str, int]) -> dict[str, np.ndarray]:
    """INTERVAL_METRICS of each row of count totals (`_counts`), as `humility_metrics` computes them."""

    def col(name: str) -> np.ndarray:
        return totals[:, at[name]]

    def rate(hits: np.ndarray, total: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, hits / total, np.nan)

    found = {"overall": rate(col("correct"), col("asked"))}
    found |= {t.lower(): rate(col(f"{t}_correct"), col(f"{t}_asked")) for t in TYPES}
    found["non_nota_accuracy"] = rate(col("non_nota_correct"), col("non_nota"))
    found["nota_hit"], found["false_nota"] = rate(col("hits"), col("nota")), rate(col("false_alarms"), col("non_nota"))
    found["humility"] = (found["nota_hit"] + 1 - found["false_nota"]) / 2
    tp, fp, fn = (np.column_stack([col(f"{letter}_{kind}") for letter in LETTERS]) for kind in ("tp", "fp", "fn"))
    present = tp + fp + fn > 0  # a letter that is a label or a prediction
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(present, 2 * tp / (2 * tp + fp + fn), 0.0)
        found["macro_f1"] = np.where(present.any(axis=1), f1.sum(axis=1) / present.sum(axis=1), np.nan)
    both = (col("nota") > 0) & (col("non_nota") > 0)
    d_primes = _z_corrected(col("hits"), col("nota")) - _z_corrected(col("false_alarms"), col("non_nota"))
    found["d_prime"] = np.where(both, d_primes, np.nan)
    return found


def image_clusters(questions: Sequence[str], images: Mapping[str, str] | None) -> np.ndarray:
    """Per question, the cluster its intervals resample it in: its image, named by the first question id (in
    sorted order) that shows it, so the draws do not depend on where the images lie; each question its own
    where `images` does not name its image."""
    image = [(images or {}).get(question, f"question:{question}") for question in questions]
    first: dict[str, str] = {}
    for question, shown in sorted(zip(map(str, questions), image, strict=True)):
        first.setdefault(shown, question)
    return np.array([first[shown] for shown in image], dtype=object)


def humility_intervals(
    answers: pd.DataFrame, clusters: Sequence[str], n_boot: int, seed: int | np.random.Generator, level: float = 0.95
) -> dict[str, float]:
    """Each of INTERVAL_METRICS' percentile-bootstrap interval (`{metric}_low`, `{metric}_high`) over
    `answers`, resampling `clusters` (per answer: its image, which several questions share) whole."""
    from blindspot.bootstrap import percentiles, resample

    counts, at = _counts(answers)
    observed, resampled = resample(counts, clusters, n_boot, seed)
    seen, drawn = _statistics(observed, at), _statistics(resampled, at)
    found: dict[str, float] = {}
    for metric in INTERVAL_METRICS:
        low, high = (math.nan, math.nan) if np.isnan(seen[metric][0]) else percentiles(drawn[metric], level)
        found |= {f"{metric}_low": low, f"{metric}_high": high}
    return found
