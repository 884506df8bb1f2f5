"""Figure 2 (the correct answers and the question types) and Table 9 (the filtering per type) of HumbleBench,
and the describe_humble_questions step that writes them."""

import json
import math

import pandas as pd
import pytest
from helpers.humble import SOURCE_OPTIONS as OPTIONS

from blindspot import schemas
from blindspot.humblebench.distributions import PANELS, figure2_table, table9
from blindspot.humblebench.questions import question_row
from blindspot.humblebench.settings import Question
from blindspot.io import write_json, write_table


def questions() -> pd.DataFrame:
    """Six questions: labels A, A, B, E (NOTA), C and D where D is NOTA (an option removed), types mixed."""
    specs = [
        ("A", "Object", OPTIONS),
        ("A", "Object", OPTIONS),
        ("B", "Relation", OPTIONS),
        ("E", "Attribute", OPTIONS),
        ("C", "Object", OPTIONS),
        ("D", "Attribute", OPTIONS[1:]),
    ]
    rows = [
        question_row(Question(f"q{i}", "What?", options, label, kind), "release", "x.png", {}, verified=True)
        for i, (label, kind, options) in enumerate(specs)
    ]
    return pd.DataFrame(rows, columns=schemas.HUMBLE_QUESTIONS.names)


def test_figure2_counts_the_correct_answers_with_nota_apart_and_the_types_in_the_papers_order():
    found = figure2_table(questions())
    assert list(found.columns) == schemas.HUMBLE_DISTRIBUTIONS.names
    answers = found[found["panel"] == PANELS["answer"]]
    assert list(zip(answers["value"], answers["questions"], strict=True)) == [("A", 2), ("B", 1), ("C", 1), ("NOTA", 2)]
    kinds = found[found["panel"] == PANELS["type"]]
    assert list(zip(kinds["value"], kinds["questions"], strict=True)) == [
        ("Object", 3),
        ("Attribute", 2),
        ("Relation", 1),
    ]
    assert answers["percent"].tolist() == [33.33, 16.67, 16.67, 33.33]
    assert kinds["percent"].sum() == pytest.approx(100, abs=0.02)


def test_no_questions_is_one_line():
    with pytest.raises(ValueError, match=r"^no HumbleBench questions: no source gave any"):
        figure2_table(questions().iloc[:0])


def test_table9_has_the_papers_rows_and_columns_as_shares_of_each_types_candidates():
    filtering = {
        "Object": {"candidates": 10, "keep": 4, "modify": 2, "delete": 4, "undecided": 0},
        "Relation": {"candidates": 5, "keep": 1, "modify": 0, "delete": 4, "undecided": 0},
    }
    found = table9(filtering).set_index("measure")
    assert list(found.index) == ["Candidates", "Kept", "Modified", "Deleted", "Final", "Final (%)"]
    assert list(found.columns) == ["Object", "Attribute", "Relation", "Total"]
    assert found["Object"].tolist() == [10, 40, 20, 40, 6, 60]
    assert found["Total"].tolist() == [15, 33.33, 13.33, 53.33, 7, 46.67]
    assert found.loc["Candidates", "Attribute"] == 0
    assert math.isnan(found.loc["Kept", "Attribute"])  # no candidates of the type: no share
    undecided = table9({"Object": {"candidates": 4, "keep": 1, "modify": 0, "delete": 1, "undecided": 2}})
    assert undecided.set_index("measure").loc["Undecided", "Object"] == 50
    with pytest.raises(ValueError, match=r"^scene-graph candidates of type 'Colour', not one of Object"):
        table9({"Colour": {"candidates": 1, "keep": 1, "modify": 0, "delete": 0, "undecided": 0}})


@pytest.mark.parametrize("with_table9", [True, False])
def test_the_step_writes_figure2_its_plot_and_table9_from_the_question_counters(tmp_path, with_table9):
    from blindspot.sampling import sample_record
    from blindspot.steps.humble import describe_humble_questions

    write_table(tmp_path / "questions.parquet", questions(), schemas.HUMBLE_QUESTIONS)
    filtering = {"Object": {"candidates": 2, "keep": 1, "modify": 0, "delete": 1, "undecided": 0}}
    sample = sample_record(None, 6, 6)  # every question: make_humble_questions writes it, sampled or not
    write_json(tmp_path / "counters.json", {"questions": 6, "scene_graph_filtering": filtering, "sample": sample})

    def files(name):
        return [str(tmp_path / f"{name}.{ext}") for ext in ("csv", "md", "tex")]

    describe_humble_questions(
        questions=str(tmp_path / "questions.parquet"),
        question_counters=str(tmp_path / "counters.json"),
        figure2=files("f2"),
        figure2_plot=str(tmp_path / "f2.png"),
        table9=files("t9") if with_table9 else [],
    )
    assert pd.read_csv(tmp_path / "f2.csv", keep_default_na=False).equals(figure2_table(questions()))
    assert (tmp_path / "f2.md").read_text().startswith("Figure 2: HumbleBench's 6 questions")
    assert (tmp_path / "f2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "t9.csv").exists() == with_table9
    if with_table9:
        table = pd.read_csv(tmp_path / "t9.csv").set_index("measure")
        assert table.loc["Final (%)", "Object"] == 50
        assert "| Deleted | 50 |" in (tmp_path / "t9.md").read_text()
    assert json.loads((tmp_path / "counters.json").read_text())["questions"] == 6  # read, not changed
