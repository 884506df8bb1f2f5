"""Table 7's human study: each annotator's question set, drawn as the paper describes, and the answers
people give read back as Table 7's human answers (`schemas.HUMAN_ANSWERS`).

The paper (Table 7's caption): each annotator answers "50 per annotator, 8 of which have NOTA as the
correct answer" of the original questions, and "stress questions" whose NOTA hit rate is compared with
the models' NOTA-only predictions on the same questions. Here (docs/fidelity.md, the human study):
- a stress question is a question whose correct answer is an option, shown as the stress setting
  (NOTA-only) shows it: its correct option removed, so NOTA is right;
- the sets are disjoint: no question is shown to two annotators, nor to one annotator twice (a
  person who saw a question's correct option would know it was removed);
- which questions is a hash of (seed, question id), per pool (NOTA correct, an option correct), so a
  set does not change with the order of the questions table, and each annotator's items come in a
  hashed order, original and stress questions mixed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from blindspot import schemas
from blindspot.humblebench.questions import row_question
from blindspot.humblebench.settings import nota_letter, present


def item_id(setting: str, question_id: str) -> str:
    """An answering item's id: the setting and the question, so a label names both."""
    return f"{setting}:{question_id}"


def _rank(seed: int, *parts: str) -> str:
    return hashlib.sha256("\0".join([str(seed), *parts]).encode()).hexdigest()


def sample_question_sets(
    questions: pd.DataFrame,
    annotators: Sequence[str],
    study: Mapping[str, Any],
    original: str,
    stress: str,
    settings: Mapping[str, Mapping[str, Any]],
    seed: int,
) -> pd.DataFrame:
    """Each annotator's items (`schemas.HUMAN_STUDY`): `study["questions"]` original questions, of which
    `study["nota_questions"]` have NOTA correct, and `study["stress_questions"]` questions as the
    `stress` setting shows them, drawn as the module says with `study["seed"]`; `settings` holds the
    settings' transforms, `seed` the run's seed (what `present` shows). Too few questions for the study
    is a ValueError naming the key."""
    if len(set(annotators)) != len(annotators) or not annotators:
        raise ValueError("humblebench.human_study.annotators must be one or more distinct names")
    per, nota, stressed = study["questions"], study["nota_questions"], study["stress_questions"]
    if not 0 <= nota <= per:
        raise ValueError(f"humblebench.human_study.nota_questions {nota} is not between 0 and questions ({per})")
    for name in (original, stress):
        if name not in settings:
            raise ValueError(f"humblebench.human_study: setting {name!r} is not one of {list(settings)}")
    rows = questions.to_dict("records")
    is_nota = {row["question_id"]: row["label"] == nota_letter(json.loads(row["options"])) for row in rows}
    pools = {
        kind: sorted(
            (r for r in rows if is_nota[r["question_id"]] == kind), key=lambda r: _rank(study["seed"], r["question_id"])
        )
        for kind in (True, False)
    }
    count = len(annotators)
    need = {True: count * nota, False: count * (per - nota + stressed)}
    for kind, what in ((True, "NOTA correct"), (False, "an option correct")):
        if len(pools[kind]) < need[kind]:
            raise ValueError(
                f"humblebench.human_study: {count} annotators need {need[kind]} questions with {what}; "
                f"the questions have {len(pools[kind])} (fewer annotators or questions per annotator)"
            )
    items = []
    for i, annotator in enumerate(annotators):
        normal = pools[True][i * nota : (i + 1) * nota] + pools[False][i * (per - nota) : (i + 1) * (per - nota)]
        start = count * (per - nota) + i * stressed
        chosen = [(original, r) for r in normal] + [(stress, r) for r in pools[False][start : start + stressed]]
        for setting, row in chosen:
            shown = present(row_question(row), setting, settings[setting], seed)
            key = item_id(setting, row["question_id"])
            items.append(
                {
                    "annotator": annotator,
                    "item_id": key,
                    "setting": setting,
                    "question_id": row["question_id"],
                    "type": row["type"],
                    "image_path": row["image_path"],
                    "question": shown.question,
                    "options": json.dumps(list(shown.options)),
                    "letters": "".join(shown.letters),
                    "order": _rank(study["seed"], annotator, key),
                }
            )
    frame = pd.DataFrame(items, columns=[*schemas.HUMAN_STUDY.names, "order"])
    return frame.sort_values(["annotator", "order"], kind="stable").drop(columns="order").reset_index(drop=True)


def answers_from_labels(labels: pd.DataFrame, study: pd.DataFrame | None, source: str) -> pd.DataFrame:
    """People's answers (`annotator`, `item_id`, `answer`: what `read_labels("humble_answer", ...)` gives) as
    Table 7's human answers (`schemas.HUMAN_ANSWERS`). With the `study` (`sample_question_sets`), an answer to
    an item not in the annotator's set, or a letter the item did not show, is a ValueError naming `source`,
    the annotator and the item; without it, the item ids are read as `item_id` writes them."""
    if study is None:
        parts = labels["item_id"].astype(str).str.partition(":")
        bad = labels[(parts[0] == "") | (parts[2] == "")]
        if len(bad):
            raise ValueError(f"{source}: item {bad['item_id'].iloc[0]!r} is not setting:question_id")
        found = pd.DataFrame({"setting": parts[0], "question_id": parts[2]})
    else:
        shown = study.set_index(["annotator", "item_id"])
        for row in labels.itertuples(index=False):
            if (row.annotator, row.item_id) not in shown.index:
                raise ValueError(
                    f"{source}: {row.annotator} answered {row.item_id}, which is not in their question set"
                )
            letters = shown.loc[(row.annotator, row.item_id), "letters"]
            if row.answer not in letters:
                raise ValueError(
                    f"{source}: {row.annotator} answered {row.answer!r} to {row.item_id}, showing {', '.join(letters)}"
                )
        keys = list(zip(labels["annotator"], labels["item_id"], strict=True))
        found = pd.DataFrame(
            [shown.loc[key, ["setting", "question_id"]] for key in keys], columns=["setting", "question_id"]
        )
    frame = pd.DataFrame(
        {
            "annotator": labels["annotator"].to_numpy(),
            "question_id": found["question_id"].to_numpy(),
            "setting": found["setting"].to_numpy(),
            "answer": labels["answer"].to_numpy(),
        }
    )
    return frame[list(schemas.HUMAN_ANSWERS.names)].astype(str)
