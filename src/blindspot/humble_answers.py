"""One VLM answering one shard of HumbleBench's questions in one setting (the `answer_humble` step):
which questions are the shard's, how the setting shows them, and the answers as a table with counters."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from blindspot import tables
from blindspot.config import ModelSpec
from blindspot.humble import answer_in_batches, present, shard_of
from blindspot.humble_questions import row_question
from blindspot.prompts import PromptTemplate


def shard_questions(questions: pd.DataFrame, shard: int, shards: int) -> pd.DataFrame:
    """The questions of answer shard `shard` of `shards` (`humble.shard_of`), in the table's order."""
    return questions[questions["question_id"].map(lambda question_id: shard_of(question_id, shards)) == shard]


def answer_shard(
    questions: pd.DataFrame, setting: str, transforms: Mapping[str, Any], template: PromptTemplate, spec: ModelSpec,
    load_scorer: Callable[[], Any], max_new_tokens: int, seed: int,
) -> tuple[pd.DataFrame, dict[str, int]]:  # fmt: skip
    """The answers of the VLM `spec` to `questions` as the setting shows them (`humble.present`), one
    row per question (`tables.HUMBLE_ANSWERS`), and counters: questions, answers whose text names no
    option, answers whose two readings agree. `load_scorer` is called only for a shard with questions,
    so an empty shard never loads the model."""
    shown = [
        (present(row_question(row), setting, transforms, seed), row["image_path"])
        for row in questions.to_dict("records")
    ]
    answered = []
    if shown:
        answered = answer_in_batches(shown, load_scorer(), {setting: template}, max_new_tokens, seed)
    about = {"vlm": spec.name, "model_id": spec.model_id, "model_revision": spec.revision or ""}
    frame = pd.DataFrame([row | about for row in answered], columns=tables.HUMBLE_ANSWERS.names)
    counters = {
        "questions": len(frame),
        "unparseable_text": int((frame["prediction_text"] == "").sum()),
        "text_and_logits_agree": int((frame["prediction_text"] == frame["prediction_logits"]).sum()),
    }
    return frame, counters
