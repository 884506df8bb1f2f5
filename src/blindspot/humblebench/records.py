"""HumbleBench's per-item records (`schemas.HUMBLE_RECORDS`): each answer of each VLM in each setting with
its question, its options as shown, the raw answer, how the metrics read it and whether that is right, read
by the metrics' own code (`humility.answer_outcomes`) so that a record and the tables never disagree."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pandas as pd

from blindspot import schemas
from blindspot.humblebench.humility import answer_outcomes, require_columns, shown_letters
from blindspot.humblebench.settings import LETTERS

RIGHT, WRONG, UNREADABLE = "right", "wrong", "unreadable"
# The order `failures_first` shows them in: a wrong letter, then no letter, then the right ones.
OUTCOMES = (WRONG, UNREADABLE, RIGHT)


def _shown(values: str, letter_map: str) -> dict[str, Any] | None:
    """A JSON list in the order of the shown letters as {letter: value}; None when a value is missing."""
    found = json.loads(values)
    return None if None in found else dict(zip(sorted(shown_letters(letter_map)), found, strict=True))


def answer_records(
    answers: pd.DataFrame, questions: pd.DataFrame, reading: str, noise: Mapping[str, str], seed: int
) -> pd.DataFrame:
    """One record per answer row (`schemas.HUMBLE_ANSWERS`, its texts read as the tables read them:
    `metrics.with_todays_reading`) with its question (`schemas.HUMBLE_QUESTIONS`: the stem and the image),
    the metrics' reading of it under `reading` (text or logits) and its outcome; in the answers' order.
    `noise`: each setting's noise (`settings.noise_kind`), drawn per question from `seed`, so that a noise
    image can be made again as it was shown."""
    require_columns(questions, ["question_id", "question", "image_path"], "HumbleBench questions")
    asked = questions.drop_duplicates("question_id").set_index("question_id")
    unknown = answers.loc[~answers["question_id"].isin(asked.index), "question_id"]
    if len(unknown):
        raise ValueError(f"HumbleBench answers: question {unknown.iloc[0]} is not among the questions")
    outcomes = answer_outcomes(answers.assign(prediction=answers[f"prediction_{reading}"]))
    outcome = outcomes["correct"].map({True: RIGHT, False: WRONG}).where(outcomes["prediction"] != "", UNREADABLE)
    shown_noise = answers["setting"].map(lambda setting: noise.get(setting, "")).where(answers["noise_image"], "")
    records = pd.DataFrame(
        {
            "vlm": answers["vlm"],
            "setting": answers["setting"],
            "question_id": answers["question_id"],
            "type": answers["type"],
            "question": answers["question_id"].map(asked["question"]),
            "image": answers["question_id"].map(asked["image_path"]),
            "noise_image": answers["noise_image"].astype(bool),
            "noise": shown_noise,
            "noise_seed": [seed if kind == "per_question" else None for kind in shown_noise],
            "options": [_shown(o, m) for o, m in zip(answers["options"], answers["letter_map"], strict=True)],
            "label": answers["label"],
            "nota": answers["nota"],
            "answer": answers["text"],
            "reasoning": answers["reasoning"],
            "stopped": answers["stopped"].astype(bool),
            "cut_off": answers["cut_off"].astype(bool),
            "letter_probabilities": [
                _shown(p, m) for p, m in zip(answers["letter_probabilities"], answers["letter_map"], strict=True)
            ],
            "prediction_text": answers["prediction_text"],
            "prediction_logits": answers["prediction_logits"],
            "reading": reading,
            "prediction": outcomes["prediction"],
            "correct": outcomes["correct"].astype(bool),
            "outcome": outcome,
        }
    )
    return records[schemas.HUMBLE_RECORDS.names].reset_index(drop=True)


def failures_first(records: pd.DataFrame) -> pd.DataFrame:
    """The records with the wrong answers first, then the unreadable ones, then the right ones; in file order
    within each."""
    rank = records["outcome"].map({outcome: i for i, outcome in enumerate(OUTCOMES)})
    return records.iloc[rank.argsort(kind="stable")].reset_index(drop=True)


def failed(records: pd.DataFrame) -> pd.Series:
    return ~records["correct"].astype(bool)


def shares(group: pd.DataFrame) -> str:
    """The share of the answers reading each letter, NOTA and none ("NA"), as the official scorer's
    Proportions give them: "A 40%, B 20%, C 0%, D 0%, E 40%; NOTA 40%, NA 0%"."""

    def percent(hits: pd.Series) -> str:
        return f"{100 * hits.mean():.0f}%"

    letters = ", ".join(f"{letter} {percent(group['prediction'] == letter)}" for letter in LETTERS)
    return f"{letters}; NOTA {percent(group['prediction'] == group['nota'])}, NA {percent(group['prediction'] == '')}"


def counts(records: pd.DataFrame) -> list[str]:
    """A line per VLM and setting: how many of its answers failed, and how, its accuracy with a 95% interval that
    resamples images with all of their questions, and the share of each reading."""
    from blindspot.bootstrap import accuracy_summary

    lines = []
    for (vlm, setting), group in records.groupby(["vlm", "setting"], sort=False):
        found = group["outcome"].value_counts()
        accuracy = accuracy_summary(group["outcome"] == RIGHT, group["image"], "images")
        lines.append(
            f"{vlm}, {setting}: {int(failed(group).sum())} of {len(group)} answers failed "
            f"({int(found.get(WRONG, 0))} wrong, {int(found.get(UNREADABLE, 0))} unreadable); {accuracy}; "
            f"read as {shares(group)}"
        )
    return lines
