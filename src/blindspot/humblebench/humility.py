"""HumbleBench's NOTA-aware metrics (paper, Table 3 and section 7.2): accuracy per type, NOTA hit and
false-NOTA rates, Humility Score, macro-F1 and d'."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from functools import lru_cache

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
