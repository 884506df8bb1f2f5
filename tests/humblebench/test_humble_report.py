"""HumbleBench's report (`humble_tables.report_tables`): the metrics, Tables 4 to 6, Table 7 given people's
answers, their captions; and the make_humble_tables step that writes them and the NOTA plot."""

import json
import math

import pandas as pd
import pytest
from helpers.humble import FIVE_OPTIONS, SETTINGS, answers, make_tables, write_answers, write_questions
from helpers.unreadable_csvs import UNREADABLE_CSVS, assert_one_line_error

from blindspot import schemas
from blindspot.humblebench.humility import parsed_texts
from blindspot.humblebench.parsing import PARSER_VERSION
from blindspot.humblebench.tables import (
    metrics_table,
    plot_nota_tradeoff,
    read_human_answers,
    report_tables,
    table4,
    table5,
    table6,
    table7,
)
from blindspot.io import write_table

BOLD = "; bold: the best of the models (False-NOTA: the lowest)"  # no groups given


@pytest.fixture
def humans(tmp_path):
    (tmp_path / "humans.csv").write_text(
        "annotator,question_id,setting,answer\nann1,q1,original,A\nann1,q2,original,E\nann1,q2,nota_only,E\n"
    )
    return read_human_answers(tmp_path / "humans.csv")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        *UNREADABLE_CSVS,
        pytest.param(
            b"annotator,question_id,answer\nann1,q1,A\n", "human answers lack columns ['setting']", id="missing-column"
        ),
    ],
)
def test_an_unreadable_human_answers_file_is_one_line_naming_it(tmp_path, content, problem):
    assert_one_line_error(read_human_answers, tmp_path / "humans.csv", content, problem)


def test_the_report_is_each_table_of_the_metrics_with_its_caption(humans):
    found, report = report_tables(answers(), None, "text", SETTINGS, "original", "nota_only")
    pd.testing.assert_frame_equal(found, metrics_table(answers()))
    assert list(report) == ["table4", "table5", "table6", "table_a2"]  # no people's answers: no Table 7
    intervals = report["table_a2"][0].set_index("Model")
    row = found[(found["vlm"] == "vlm-a") & (found["setting"] == "original") & (found["reading"] == "text")].iloc[0]
    assert intervals.loc["vlm-a", "Overall"] == (
        f"{100 * row['overall']:.2f} [{100 * row['overall_low']:.2f}, {100 * row['overall_high']:.2f}]"
    )
    pd.testing.assert_frame_equal(report["table4"][0], table4(found, "text", "original"))
    pd.testing.assert_frame_equal(report["table5"][0], table5(found, "text", SETTINGS))
    pd.testing.assert_frame_equal(report["table6"][0], table6(found, "text", SETTINGS))
    # every caption says which protocol the answers ran under; Tables 5 and 6 whom they are over
    ran, everyone = "text reading, official protocol", "over the 2 models that answered every setting"
    assert report["table4"][1] == f"Table 4: the Original setting ({ran}), %" + BOLD
    assert report["table5"][1] == f"Table 5: the settings ({ran}), %, {everyone}"
    assert report["table6"][1] == f"Table 6: models across settings ({ran}), %, {everyone}" + BOLD
    found, report = report_tables(answers(), humans, "logits", SETTINGS, "nota_only", "original")
    # Table 4 shows the setting named `original`; Table 7 puts people in `original`'s and `stress`'s columns
    assert report["table4"][1] == "Table 4: the NOTA-only setting (logits reading, official protocol), %" + BOLD
    pd.testing.assert_frame_equal(report["table4"][0], table4(found, "logits", "nota_only"))
    pd.testing.assert_frame_equal(
        report["table7"][0], table7(answers(), humans, "logits", original="nota_only", stress="original")
    )
    assert report["table7"][1] == (
        'Table 7: humans and models on the same questions (logits reading, official protocol), %; "-": a model '
        "not asked the stress setting"
    )


def test_the_step_writes_every_table_and_the_plot(tmp_path, humans):
    frame = answers()
    make_tables(tmp_path, write_answers(tmp_path, frame))
    found, report = report_tables(frame, humans, "text", SETTINGS, "original", "nota_only", "nota_only", n_boot=200)
    assert (tmp_path / "metrics.csv").read_text() == found.to_csv(index=False)
    caption = (
        "Appendix Table 1: Original → NOTA-only, NOTA behaviour per model (text reading, official protocol), % "
        "(d' as it is), over the 2 models that answered every setting"
    )
    assert report["table_a1"][1] == caption
    tables = {"table4": "t4", "table5": "t5", "table6": "t6", "table7": "t7", "table_a1": "ta1", "table_a2": "ta2"}
    for name, short in tables.items():
        assert (tmp_path / f"{short}.csv").read_text() == report[name][0].to_csv(index=False)
        assert (tmp_path / f"{short}.md").read_text().startswith(report[name][1])
    assert (tmp_path / "nota.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_tables_read_the_stored_texts_with_todays_parser(tmp_path):
    """Answers written by an older parser: the tables read their texts again, and a job whose parser is
    not the one the workflow planned with stops."""
    frame = answers()
    fresh = frame.copy()
    # vlm-a's q1 in both settings said "A", read then as nothing; its q2 texts name two options.
    texts = {0: "The answer is (A), a cat.", 4: "**A**", 1: "A or B", 5: "E"}
    for row, text in texts.items():
        frame.loc[row, "text"] = text
        fresh.loc[row, "text"] = text
        frame.loc[row, "prediction_text"] = "C"  # what no reading of the text says
    fresh.loc[[0, 4], "prediction_text"] = "A"
    fresh.loc[1, "prediction_text"] = ""  # two letters: ambiguous
    fresh.loc[5, "prediction_text"] = "E"
    assert parsed_texts(frame).tolist() == fresh["prediction_text"].tolist()
    make_tables(tmp_path, write_answers(tmp_path, frame), humans=False)
    assert (tmp_path / "metrics.csv").read_text() == metrics_table(fresh, n_boot=200).to_csv(index=False)
    assert (tmp_path / "metrics.csv").read_text() != metrics_table(frame, n_boot=200).to_csv(index=False)
    with pytest.raises(ValueError, match=f"parser is version {PARSER_VERSION}, the workflow planned with 0"):
        make_tables(tmp_path, write_answers(tmp_path, frame), humans=False, parser_version=0)


def test_shown_options_pair_with_their_letters_where_the_letters_have_a_gap():
    frame = answers().head(1)
    # The official NOTA-only: the correct option (A) removed, the others keep their letters.
    frame = frame.assign(
        options=json.dumps(["a dog", "a bird", "a fish", "None of the above"]),
        letter_map=json.dumps({"A": "", "B": "B", "C": "C", "D": "D", "E": "E"}),
    )
    readings = {"C. a bird": "C", "a fish": "D", "A": "", "None of the above": "E"}
    for text, letter in readings.items():
        assert parsed_texts(frame.assign(text=text)).tolist() == [letter], text


def test_a_results_file_with_empty_cells_and_unshown_letters_is_scored(tmp_path):
    """What a CSV of answers reads back as: empty cells are NaN; "F" and "Z" are no options."""
    frame = answers()
    frame.loc[0, "prediction_text"] = ""  # vlm-a, original, q1: empty cell
    frame.loc[1, "prediction_text"] = "F"  # q2: no such option
    frame.loc[2, "prediction_text"] = "Z"  # q3
    frame.to_csv(tmp_path / "answers.csv", index=False)
    read = pd.read_csv(tmp_path / "answers.csv")
    assert read["prediction_text"].isna().sum() == 3  # vlm-a's q1, and vlm-b's q4 ("ACE") in both settings
    found = metrics_table(read).set_index(["vlm", "setting", "reading"])
    vlm_a = found.loc[("vlm-a", "original", "text")]
    assert vlm_a["unparseable"] == pytest.approx(3 / 4)
    assert vlm_a["overall"] == 0.0  # q4 said B, its label is A
    assert vlm_a["macro_f1"] == pytest.approx((0 + 0 + 0) / 3)  # A, B, E; no F or Z
    assert found.loc[("vlm-b", "original", "text"), "unparseable"] == pytest.approx(1 / 4)
    pd.testing.assert_frame_equal(
        found.reset_index(),
        metrics_table(read.assign(prediction_text=read["prediction_text"].where(~read.index.isin([0, 1, 2]), None))),
    )


def test_missing_columns_and_readings_are_one_line_errors_naming_them():
    frame = answers()
    with pytest.raises(ValueError, match=r"HumbleBench answers lack columns \['prediction_logits'\]"):
        metrics_table(frame.drop(columns="prediction_logits"))
    with pytest.raises(ValueError, match=r"lack columns \['vlm', 'letter_map'\]"):
        report_tables(frame.drop(columns=["letter_map", "vlm"]), None, "text", SETTINGS, "original", "nota_only")
    with pytest.raises(ValueError, match=r"HumbleBench answers: 1 rows have no setting \(first: row 5\)"):
        metrics_table(frame.assign(setting=frame["setting"].where(frame.index != 5, None)))
    # a run with only the text reading (others' runs): its metrics, and no logits rows
    only_text = metrics_table(frame.drop(columns="prediction_logits"), readings=["text"])
    assert set(only_text["reading"]) == {"text"}
    with pytest.raises(ValueError, match=r"no rows of reading 'logits' \(have \['text'\]\)"):
        table4(only_text, "logits", "original")
    found = metrics_table(frame)
    for make in (
        lambda m: table4(m, "text", "original"),
        lambda m: table5(m, "text", SETTINGS),
        lambda m: table6(m, "text", SETTINGS),
    ):
        with pytest.raises(ValueError, match=r"HumbleBench metrics lack columns \['overall'\]"):
            make(found.drop(columns="overall"))
    with pytest.raises(ValueError, match=r"HumbleBench metrics lack columns \['nota_hit'\]"):
        plot_nota_tradeoff(found.drop(columns="nota_hit"), "text", SETTINGS, "never.png")
    with pytest.raises(ValueError, match=r"Table 4's setting 'shuffled' is not one of the settings"):
        report_tables(frame, None, "text", SETTINGS, "shuffled", "nota_only")


def test_tables_and_the_plot_from_a_metrics_file_read_back(tmp_path):
    """A metrics CSV read back (NaN where a rate is undefined, as for NOTA-only's humility score) makes
    the same tables; a setting the config does not name is left out of the plot, as of Tables 5 and 6."""
    found = metrics_table(answers())
    found.to_csv(tmp_path / "metrics.csv", index=False)
    read = pd.read_csv(tmp_path / "metrics.csv")
    assert math.isnan(read.set_index(["vlm", "setting", "reading"]).loc[("vlm-a", "nota_only", "text"), "humility"])
    pd.testing.assert_frame_equal(table5(read, "text", SETTINGS), table5(found, "text", SETTINGS))
    pd.testing.assert_frame_equal(table6(read, "text", SETTINGS), table6(found, "text", SETTINGS))
    only_original = {"original": SETTINGS["original"]}
    plot_nota_tradeoff(read, "text", only_original, tmp_path / "nota.png")
    assert (tmp_path / "nota.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_step_makes_table7_from_the_human_study_project_s_labels(tmp_path, humans):
    """The humble_answer project's labels (Label Studio's JSON export) become the same Table 7 as a CSV of
    the same answers, checked against the annotators' question sets."""
    from blindspot.steps.humble import make_humble_tables

    study = pd.DataFrame(
        {
            "annotator": ["ann1"] * 3,
            "item_id": ["original:q1", "original:q2", "nota_only:q2"],
            "setting": ["original", "original", "nota_only"],
            "question_id": ["q1", "q2", "q2"],
            "type": ["Object"] * 3,
            "image_path": ["i.png"] * 3,
            "question": ["?"] * 3,
            "options": [FIVE_OPTIONS] * 3,
            "letters": ["ABCDE", "ABCDE", "ABCDE"],
        }
    )
    write_table(tmp_path / "study.parquet", study, schemas.HUMAN_STUDY)
    export = [
        {
            "id": i,
            "data": {"item_id": item, "annotator": "ann1"},
            "annotations": [
                {
                    "completed_by": {"email": "ann1"},
                    "result": [{"from_name": "answer", "type": "choices", "value": {"choices": [letter]}}],
                }
            ],
        }
        for i, (item, letter) in enumerate(zip(study["item_id"], "AEE", strict=True))
    ]
    (tmp_path / "labels.json").write_text(json.dumps(export))
    paths = write_answers(tmp_path, answers())
    files = {name: [str(tmp_path / f"{name}.{ext}") for ext in ("csv", "md", "tex")] for name in ("t4", "t5", "t6")}
    make_humble_tables(
        answers=paths,
        questions=write_questions(tmp_path, answers()),
        human_answers=[str(tmp_path / "labels.json")],
        human_study=[str(tmp_path / "study.parquet")],
        reading="text",
        settings=SETTINGS,
        original="original",
        stress="nota_only",
        cautious=None,
        metrics=str(tmp_path / "metrics.csv"),
        table4=files["t4"],
        table5=files["t5"],
        table6=files["t6"],
        table7=[str(tmp_path / f"t7.{ext}") for ext in ("csv", "md", "tex")],
        table_a1=[],
        table_a2=[str(tmp_path / f"ta2.{ext}") for ext in ("csv", "md", "tex")],
        plot=str(tmp_path / "nota.png"),
        parser_version=PARSER_VERSION,
        groups=None,
        sample=[],
        bootstrap={"n_boot": 200, "seed": 0},
        comparisons=[str(tmp_path / "comparisons.csv"), str(tmp_path / "comparisons.md")],
    )
    table = pd.read_csv(tmp_path / "t7.csv")
    expected = table7(answers(), humans, "text")
    pd.testing.assert_frame_equal(table, expected, check_dtype=False)
    assert list(table.columns) == ["Model", "Overall", "Non-NOTA", "NOTA hit", "False-NOTA", "HS", "NOTA hit (stress)"]
    assert list(table["Model"]) == ["Human (mean of 1)", "vlm-a", "vlm-b"]
