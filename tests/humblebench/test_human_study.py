"""Table 7's human study: each annotator's question set as the paper describes it (50 original questions,
8 of them with NOTA correct, and stress questions shown NOTA-only), seeded, disjoint between annotators;
people's answers read back as the human answers Table 7 reads, and checked against the sets."""

import json

import pandas as pd
import pytest

from blindspot import schemas
from blindspot.humblebench.human_study import answers_from_labels, sample_question_sets

SETTINGS = {"original": {}, "nota_only": {"remove_correct": True}}
PAPER = {"questions": 50, "nota_questions": 8, "stress_questions": 10, "seed": 0}


def questions(n_nota: int, n_other: int) -> pd.DataFrame:
    """n_nota questions with NOTA correct (E) and n_other with an option correct (B)."""
    rows = [
        {
            "question_id": f"q{i:04d}",
            "source": "release",
            "question": f"What is shown ({i})?",
            "options": json.dumps(["a cat", "a dog", "a cow", "a hen", "None of the above"]),
            "label": "E" if i < n_nota else "B",
            "type": "Object",
            "image_path": f"images/{i}.png",
            "origin": "{}",
            "verified": True,
        }
        for i in range(n_nota + n_other)
    ]
    return pd.DataFrame(rows, columns=schemas.HUMBLE_QUESTIONS.names)


def sample(frame: pd.DataFrame, annotators=("ann1", "ann2", "ann3", "ann4", "ann5"), **study) -> pd.DataFrame:
    return sample_question_sets(frame, list(annotators), PAPER | study, "original", "nota_only", SETTINGS, 7)


def test_each_annotator_gets_the_paper_s_set_disjoint_from_the_others():
    frame = questions(100, 400)
    drawn = sample(frame)
    assert list(drawn.columns) == schemas.HUMAN_STUDY.names
    labels = frame.set_index("question_id")["label"]
    assert list(drawn["annotator"].unique()) == ["ann1", "ann2", "ann3", "ann4", "ann5"]
    for _, own in drawn.groupby("annotator"):
        normal, stress = own[own["setting"] == "original"], own[own["setting"] == "nota_only"]
        assert len(normal) == 50
        assert (labels[normal["question_id"]] == "E").sum() == 8
        # a stress question had an option correct, which NOTA-only removes: B is gone, the rest keep their letters
        assert len(stress) == 10
        assert (labels[stress["question_id"]] == "B").all()
        assert set(stress["letters"]) == {"ACDE"}
        assert json.loads(stress["options"].iloc[0]) == ["a cat", "a cow", "a hen", "None of the above"]
        assert set(normal["letters"]) == {"ABCDE"}
        # original and stress questions come mixed, not in two blocks
        assert list(own["setting"]) != sorted(own["setting"], reverse=True)
    # no question is shown twice, to anyone
    assert drawn["question_id"].is_unique
    assert (drawn["item_id"] == drawn["setting"] + ":" + drawn["question_id"]).all()


def test_the_sets_follow_the_seed_not_the_table_s_order():
    frame = questions(40, 300)
    drawn = sample(frame)
    pd.testing.assert_frame_equal(drawn, sample(frame.sample(frac=1, random_state=3)))
    assert set(sample(frame, seed=1)["question_id"]) != set(drawn["question_id"])
    # a question added to the release leaves most of each set as it was
    added = questions(1, 1).assign(question_id=["new-nota", "new-other"])
    grown = sample(pd.concat([frame, added], ignore_index=True))
    assert len(set(grown["question_id"]) & set(drawn["question_id"])) >= len(drawn) - 4


@pytest.mark.parametrize(
    ("nota", "other", "problem"),
    [
        (39, 400, "5 annotators need 40 questions with NOTA correct; the questions have 39"),
        (40, 259, "5 annotators need 260 questions with an option correct; the questions have 259"),
    ],
)
def test_too_few_questions_is_one_line_naming_the_key(nota, other, problem):
    with pytest.raises(ValueError, match=r"^humblebench\.human_study: ") as error:
        sample(questions(nota, other))
    assert problem in str(error.value)
    assert "\n" not in str(error.value)


def test_answers_become_the_human_answers_table_and_are_checked_against_the_sets():
    drawn = sample(questions(2, 6), annotators=("ann1", "ann2"), questions=3, nota_questions=1, stress_questions=1)
    first, second = (drawn[drawn["annotator"] == name] for name in ("ann1", "ann2"))
    stress = first[first["setting"] == "nota_only"].iloc[0]
    labels = pd.DataFrame(
        {
            "annotator": ["ann1", "ann1", "ann2"],
            "item_id": [first["item_id"].iloc[0], stress["item_id"], second["item_id"].iloc[0]],
            "answer": ["A", "E", "C"],
        }
    )
    found = answers_from_labels(labels, drawn, "labels.json")
    assert list(found.columns) == schemas.HUMAN_ANSWERS.names
    assert found.to_dict("records")[1] == {
        "annotator": "ann1",
        "question_id": stress["question_id"],
        "setting": "nota_only",
        "answer": "E",
    }
    # without the sets, the item ids say the setting and the question
    pd.testing.assert_frame_equal(answers_from_labels(labels, None, "labels.json"), found)
    # ann2 answering ann1's item, or a letter NOTA-only did not show
    crossed = labels.assign(annotator=["ann1", "ann1", "ann1"])
    theirs = second["item_id"].iloc[0]
    with pytest.raises(ValueError, match=f"^labels.json: ann1 answered {theirs}, which is not in their question set"):
        answers_from_labels(crossed, drawn, "labels.json")
    gap = labels.assign(answer=["A", "B", "C"])
    with pytest.raises(ValueError, match=f"^labels.json: ann1 answered 'B' to {stress['item_id']}, showing A, C, D, E"):
        answers_from_labels(gap, drawn, "labels.json")
