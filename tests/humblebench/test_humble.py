"""HumbleBench: settings and their letter maps, the answer parser on tricky answers, and every metric
against hand-computed values."""

import json
import math
import re
import time

import numpy as np
import pandas as pd
import pytest
from helpers.humble import letter_protocol
from helpers.workflow import REPO
from PIL import Image

from blindspot.humblebench.answers import Asked, answer_in_batches, answer_questions
from blindspot.humblebench.humility import d_prime, humility_metrics, macro_f1
from blindspot.humblebench.parsing import parse_answer
from blindspot.humblebench.settings import Question, is_nota, noise_image, present

OPTIONS = ("red", "green", "blue", "yellow", "None of the above")
QUESTION = Question("q1", "What colour is the car?", OPTIONS, label="C", type="Attribute")


def test_original_shows_the_question_unchanged():
    shown = present(QUESTION, "original", {"template": "x.yaml"}, seed=0)
    assert (shown.options, shown.label, shown.nota, shown.noise_image) == (OPTIONS, "C", "E", False)
    assert shown.letter_map == {letter: letter for letter in "ABCDE"}


def test_shuffled_nota_moves_nota_and_re_letters_the_rest():
    positions = set()
    for i in range(40):
        question = Question(f"q{i}", "What colour?", OPTIONS, label="C", type="Attribute")
        shown = present(question, "shuffled_nota", {"shuffle_nota": True}, seed=7)
        at = "ABCDE".index(shown.nota)
        positions.add(at)
        assert shown.options[at] == "None of the above"
        assert [o for o in shown.options if o != "None of the above"] == list(OPTIONS[:4])  # order kept
        assert shown.options["ABCDE".index(shown.label)] == "blue"  # the label follows its text
        assert shown.letter_map["E"] == shown.nota
        for old, new in shown.letter_map.items():
            assert shown.options["ABCDE".index(new)] == OPTIONS["ABCDE".index(old)]
        assert present(question, "shuffled_nota", {"shuffle_nota": True}, seed=7) == shown  # seeded
    assert positions == {0, 1, 2, 3, 4}
    # NOTA at A: every other option moves down one letter.
    question = next(
        Question(f"q{i}", "?", OPTIONS, "C", "Object")
        for i in range(100)
        if present(Question(f"q{i}", "?", OPTIONS, "C", "Object"), "s", {"shuffle_nota": True}, 7).nota == "A"
    )
    shown = present(question, "s", {"shuffle_nota": True}, 7)
    assert shown.letter_map == {"E": "A", "A": "B", "B": "C", "C": "D", "D": "E"}
    assert shown.label == "D"


def test_nota_only_removes_the_correct_option():
    shown = present(QUESTION, "nota_only", {"remove_correct": True, "reletter": True}, seed=0)
    assert shown.options == ("red", "green", "yellow", "None of the above")
    assert (shown.label, shown.nota) == ("D", "D")
    assert shown.letter_map == {"A": "A", "B": "B", "C": "", "D": "C", "E": "D"}
    already = Question("q2", "?", OPTIONS, label="E", type="Object")
    assert present(already, "nota_only", {"remove_correct": True, "reletter": True}, seed=0).options == OPTIONS


def test_noise_image_keeps_the_label_and_the_noise_is_seeded():
    shown = present(QUESTION, "noise", {"noise_image": True}, seed=3)
    assert (shown.label, shown.nota, shown.noise_image, shown.options) == ("C", "E", True, OPTIONS)
    first, again, other = (np.asarray(noise_image(q, 3, (16, 8))) for q in ("q1", "q1", "q2"))
    assert first.shape == (8, 16, 3)
    assert (first == again).all()
    assert not (first == other).all()


def test_bad_questions_and_settings_are_refused():
    with pytest.raises(ValueError, match="2 options read 'None of the above'"):
        Question("q", "?", ("None of the above", "a", "None of the above."), "B", "Object")
    with pytest.raises(ValueError, match="label 'F'"):
        Question("q", "?", OPTIONS, "F", "Object")
    with pytest.raises(ValueError, match="unknown keys"):
        present(QUESTION, "x", {"shuffle": True}, 0)


FOUR = ("red", "green", "yellow", "None of the above")  # as NOTA-only shows them, re-lettered
LETTERED = ["red", "blue", "E-scooter", "A cat", "None of the above"]  # options whose texts hold capitals
GAP = {"A": "red", "B": "green", "D": "yellow", "E": "None of the above"}  # original letters, C removed


@pytest.mark.parametrize(
    ("answer", "options", "expected"),
    [
        # the whole answer is a letter
        ("E", OPTIONS, "E"),
        ("E.", OPTIONS, "E"),
        ("(E)", OPTIONS, "E"),
        ("  **(B)**  ", OPTIONS, "B"),
        ("[C]", OPTIONS, "C"),
        ("A", OPTIONS, "A"),
        ("A.", OPTIONS, "A"),
        ("d", OPTIONS, "D"),  # lower case is a letter only when it is the whole answer
        ("e", OPTIONS, "E"),
        ("a", OPTIONS, "A"),
        # a leading letter
        ("E. None of the above", OPTIONS, "E"),
        ("(D) yellow", OPTIONS, "D"),
        ("B) green", OPTIONS, "B"),
        ("B, because the car is green.", OPTIONS, "B"),
        ("B\n\nThe car is green, and it is parked.", OPTIONS, "B"),
        ("**B**\n\nThe car is green.", OPTIONS, "B"),
        # a keyword
        ("The answer is C.", OPTIONS, "C"),
        ("Answer: (A)", OPTIONS, "A"),
        ("**Answer:** C", OPTIONS, "C"),
        ("I would choose option D because the car is yellow.", OPTIONS, "D"),
        ("Looking closely, the correct choice is (B).", OPTIONS, "B"),
        ("Option D. A yellow car is in view.", OPTIONS, "D"),
        ("答案是A。", OPTIONS, "A"),
        ("答案\uff1aA", OPTIONS, "A"),  # a full-width colon
        ("我选择B", OPTIONS, "B"),
        ("答案是\uff08C\uff09", OPTIONS, "C"),  # full-width brackets
        # final-answer markup, whatever the reasoning before it names
        ("\\boxed{C}", OPTIONS, "C"),
        ("The final answer is $\\boxed{\\text{D}}$.", OPTIONS, "D"),
        ("<answer>C</answer>", OPTIONS, "C"),
        ("<think>A or B? The car is blue.</think>\n<answer>C</answer>", OPTIONS, "C"),
        ("<answer>B. green</answer>", OPTIONS, "B"),
        # what an official wrapper left of an answer (tests/data/humblebench_official_rows.jsonl has them all)
        (": B", OPTIONS, "B"),
        (").\n\nA", OPTIONS, "A"),
        (" letter C", OPTIONS, "C"),
        (" by the way, the car is red\n\nc", OPTIONS, "C"),  # a letter alone on the last line
        ("C is in front of the car", OPTIONS, "C"),
        ("A is in front of the car", OPTIONS, "A"),  # "is" follows no article
        ("C the middle of the street", OPTIONS, "C"),
        ("It rules out A, B and D. Thus, the answer is C.", OPTIONS, "C"),  # the conclusion
        ("<|begin_of_box|>C<|end_of_box|></answer>", OPTIONS, "C"),  # `<answer>` cut off by the wrapper
        ("E. None of the above </CONCLUSION>", OPTIONS, "E"),
        ("<think>A or B?</think> C</answer>", OPTIONS, "C"),
        # an option's text
        ("None of the above", OPTIONS, "E"),
        ("blue.", OPTIONS, "C"),
        # a capital letter inside the chosen option's own text is not a second letter
        ("C. E-scooter", LETTERED, "C"),
        ("The answer is D. A cat", LETTERED, "D"),
        ("D. A cat, not C. E-scooter", LETTERED, None),
        # only whole option texts are taken out: "on" inside "Done", "at" inside "Cats"
        ("The answer is D. Cats sit there.", ["on", "in", "at", "under", "None of the above"], "D"),
        ("B. Done, it is in the box.", ["on", "in", "at", "under", "None of the above"], "B"),
        ("The answer is B. A cathedral", ["A cat", "A cathedral", "a dog", "a bird", "None of the above"], "B"),
        # never guessed: articles, two letters, no letter, a letter not shown
        ("a car is parked", OPTIONS, None),
        ("A car is parked on the street", OPTIONS, None),
        ("A or B", OPTIONS, None),
        ("The answer is A or B", OPTIONS, None),
        ("The answer is C, not D", OPTIONS, None),
        ("The answer is A. The answer is B, or C", OPTIONS, None),
        ("It is B.\nA or", OPTIONS, None),
        ("(A) or (B)", OPTIONS, None),
        ("B, not C", OPTIONS, None),
        ("B\n\nThe car is green, not C.", OPTIONS, None),
        ("A\n\nthe car is red, not B", OPTIONS, None),  # an "A" that ends its line is no article
        ("\\boxed{A} or \\boxed{B}", OPTIONS, None),
        ("<answer>A or B</answer>", OPTIONS, None),
        ("<answer></answer> C", OPTIONS, None),  # the markup is the answer, and it is empty
        ("答案是A或B", OPTIONS, None),
        ("F", OPTIONS, None),
        ("I cannot tell.", OPTIONS, None),
        ("", OPTIONS, None),
        # a letter beyond the shown options
        ("E", FOUR, None),
        ("\\boxed{E}", FOUR, None),
        ("D", FOUR, "D"),
        ("E", GAP, "E"),
        ("C", GAP, None),
        ("yellow", GAP, "D"),
    ],
)
def test_the_parser_reads_every_clear_answer_and_nothing_else(answer, options, expected):
    assert parse_answer(answer, options) == expected


@pytest.mark.parametrize(
    "answer",
    [
        "answer" + " " * 200_000,  # took minutes with the old keyword pattern (4 s at 8,000 spaces)
        "The answer is" + " " * 200_000 + "x",
        "答案" + " " * 200_000,
        "answer " * 30_000,
        "A" + " " * 200_000 + "car",
        "A " * 100_000,
        "(" * 200_000,
        "*" * 200_000 + "B",
        "<answer>" * 25_000,
        "<answer>" + "x" * 200_000,
        "\\boxed{" * 30_000,
        "\\boxed{\\text{" * 15_000,
        "\n x" * 100_000,
        "answer is A " * 30_000,
        ":" * 200_000 + "B",
        "</answer>" * 25_000,
    ],
)
def test_the_parser_takes_linear_time_on_long_adversarial_answers(answer):
    # Linear, each of these takes milliseconds; quadratic, they take minutes. CPU time, so that a busy
    # machine does not fail the test.
    started = time.process_time()
    parse_answer(answer, OPTIONS)
    assert time.process_time() - started < 1.0  # the issue: a 200k-character answer within a second


FIVE_SHOWN = json.dumps({letter: letter for letter in "ABCDE"})
FOUR_SHOWN = json.dumps({"A": "A", "B": "B", "C": "", "D": "C", "E": "D"})  # NOTA-only: C removed, re-lettered


def answers(rows, letter_map=FIVE_SHOWN):
    return pd.DataFrame(rows, columns=["label", "nota", "prediction", "type"]).assign(letter_map=letter_map)


def test_metrics_by_hand():
    # 6 questions: 2 with NOTA correct (E), 4 without.
    frame = answers(
        [
            ("E", "E", "E", "Object"),  # NOTA hit
            ("E", "E", "B", "Relation"),  # NOTA missed
            ("A", "E", "A", "Object"),  # right
            ("B", "E", "E", "Attribute"),  # false NOTA
            ("C", "E", "", "Attribute"),  # unparseable: wrong, not NOTA
            ("D", "E", "A", "Relation"),  # wrong
        ]
    )
    got = humility_metrics(frame)
    assert got["overall"] == pytest.approx(2 / 6)
    assert (got["object"], got["attribute"], got["relation"]) == pytest.approx((1.0, 0.0, 0.0))
    assert got["non_nota_accuracy"] == pytest.approx(1 / 4)
    assert got["nota_hit"] == pytest.approx(1 / 2)
    assert got["false_nota"] == pytest.approx(1 / 4)
    assert got["nota_selection"] == pytest.approx(2 / 6)
    assert got["humility"] == pytest.approx((0.5 + 0.75) / 2)
    assert got["unparseable"] == pytest.approx(1 / 6)
    # F1 per letter: A: tp1 fp1 fn0 -> 2/3; B: tp0 fp1 fn1 -> 0; C: fn1 -> 0; D: fn1 -> 0; E: tp1 fp1 fn1 -> 1/2
    assert got["macro_f1"] == pytest.approx((2 / 3 + 0 + 0 + 0 + 1 / 2) / 5)
    from scipy.stats import norm

    assert got["d_prime"] == pytest.approx(norm.ppf(0.5) - norm.ppf(0.25))


def test_d_prime_corrects_rates_of_zero_and_one_by_half_a_count():
    from scipy.stats import norm

    # all 4 NOTA questions hit, none of 10 others false: 1 - 1/8 and 1/20
    assert d_prime(4, 4, 0, 10) == pytest.approx(norm.ppf(1 - 1 / 8) - norm.ppf(1 / 20))
    assert d_prime(0, 4, 10, 10) == pytest.approx(norm.ppf(1 / 8) - norm.ppf(1 - 1 / 20))
    assert d_prime(2, 4, 5, 10) == pytest.approx(0.0)
    assert math.isnan(d_prime(0, 0, 1, 10))


def test_metrics_without_nota_questions_leave_humility_undefined():
    got = humility_metrics(answers([("A", "E", "A", "Object"), ("B", "E", "E", "Object")]))
    assert math.isnan(got["nota_hit"])
    assert math.isnan(got["humility"])
    assert math.isnan(got["d_prime"])
    assert got["false_nota"] == pytest.approx(0.5)
    nota_only = humility_metrics(answers([("D", "D", "D", "Object"), ("D", "D", "A", "Object")]))
    assert nota_only["nota_hit"] == pytest.approx(0.5)
    assert math.isnan(nota_only["humility"])


def test_missing_and_unshown_predictions_are_unparseable_and_counted():
    frame = pd.concat(
        [
            answers(
                [
                    ("A", "E", "A", "Object"),  # right
                    ("B", "E", None, "Object"),  # no answer
                    ("C", "E", math.nan, "Object"),  # an empty CSV cell
                    ("D", "E", "F", "Object"),  # no such option
                    ("E", "E", "Z", "Object"),
                ]
            ),
            answers([("D", "D", "E", "Object")], FOUR_SHOWN),  # four options shown: "E" is none of them
        ],
        ignore_index=True,
    )
    got = humility_metrics(frame)
    assert got["unparseable"] == pytest.approx(5 / 6)
    assert got["overall"] == pytest.approx(1 / 6)
    assert got["nota_selection"] == 0.0  # "E" on the NOTA-only question is not its NOTA (D)
    # F and Z are no classes of their own: A scores 1, B to E 0
    assert got["macro_f1"] == pytest.approx(1 / 5)
    assert got == humility_metrics(frame.assign(prediction=["A", "", "", "", "", ""]))
    assert macro_f1(["A", "B"], ["A", None]) == pytest.approx(1 / 2)


def test_malformed_answers_are_one_line_errors_naming_what_is_wrong():
    frame = answers([("A", "E", "A", "Object")])
    with pytest.raises(ValueError, match=r"HumbleBench answers lack columns \['letter_map'\]"):
        humility_metrics(frame.drop(columns="letter_map"))
    with pytest.raises(ValueError, match=r"lack columns \['label', 'prediction'\]"):
        humility_metrics(frame.drop(columns=["prediction", "label"]))
    for letter_map in ("{}", "not json", "[1]", None):
        with pytest.raises(ValueError, match=re.escape(f"letter_map {str(letter_map)!r} is not a JSON object")):
            humility_metrics(frame.assign(letter_map=letter_map))


def test_macro_f1_matches_scikit_learn_without_unparseable_answers():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    labels = list(rng.choice(list("ABCDE"), 200))
    predictions = [label if rng.random() < 0.6 else str(rng.choice(list("ABCDE"))) for label in labels]
    assert macro_f1(labels, predictions) == pytest.approx(f1_score(labels, predictions, average="macro"))


SETTINGS = {
    "original": {"label": "Original", "headline": "overall"},
    "noise": {"label": "Noise image", "headline": "nota_selection", "noise_image": True},
}


def answer_rows(vlm, setting, rows):
    """Answer-table rows; `rows` are (question_id, label, nota, text reading, logits reading, type)."""
    return [
        {
            "vlm": vlm,
            "setting": setting,
            "question_id": q,
            "label": label,
            "nota": nota,
            "prediction_text": text,
            "prediction_logits": logits,
            "type": kind,
            "letter_map": FIVE_SHOWN,
        }
        for q, label, nota, text, logits, kind in rows
    ]


@pytest.fixture
def answered():
    original = [
        ("q1", "A", "E", "A", "A", "Object"),
        ("q2", "E", "E", "E", "B", "Relation"),
        ("q3", "B", "E", "E", "B", "Attribute"),
        ("q4", "C", "E", "", "C", "Object"),
    ]
    noise = [
        (q, label, "E", pred, pred, kind) for (q, label, _, _, _, kind), pred in zip(original, "EAEE", strict=True)
    ]
    other = [
        ("q1", "A", "E", "B", "A", "Object"),
        ("q2", "E", "E", "E", "E", "Relation"),
        ("q3", "B", "E", "B", "B", "Attribute"),
        ("q4", "C", "E", "C", "C", "Object"),
    ]
    return pd.DataFrame(
        answer_rows("vlm-a", "original", original)
        + answer_rows("vlm-a", "noise", noise)
        + answer_rows("vlm-b", "original", other)
        + answer_rows("vlm-b", "noise", [(q, label, "E", "A", "A", k) for q, label, *_, k in other])
    )


def test_tables_4_5_and_6_from_answers(answered):
    from blindspot.humblebench.tables import metrics_table, table4, table5, table6

    metrics = metrics_table(answered)
    assert len(metrics) == 2 * 2 * 2  # vlm x setting x reading
    t4 = table4(metrics, "text", "original").set_index("Model")
    # vlm-a, text: q1 right, q2 NOTA hit, q3 false NOTA, q4 unparseable -> 2/4 overall
    assert t4.loc["vlm-a"].to_dict() == {
        "Object": 50.0,
        "Relation": 100.0,
        "Attribute": 0.0,
        "Overall": 50.0,
        "Non-NOTA": 33.33,
        "NOTA hit": 100.0,
        "False-NOTA": 33.33,
        "HS": 83.33,
    }
    assert t4.loc["vlm-b", "Overall"] == 75.0
    assert table4(metrics, "logits", "original").set_index("Model").loc["vlm-a", "Overall"] == 75.0  # other reading
    noise = table4(metrics, "text", "noise").set_index("Model")
    assert noise.loc["vlm-a", "Overall"] == 0.0  # 3 of 4 say NOTA, which their labels are not
    assert noise.loc["vlm-a", "HS"] == 0.0  # q2 (NOTA) missed, NOTA said on all three others
    t5 = table5(metrics, "text", SETTINGS).set_index("Setting")
    assert t5.loc["Original", "# Models"] == 2
    assert t5.loc["Original", "Avg. Overall"] == 62.5
    # vlm-b: 3/4 right, its one NOTA question hit, no false NOTA -> HS 100
    assert t5.loc["Original", "Best Model(s)"] == "vlm-b (75.00) / vlm-b (100.00)"
    assert t5.loc["Noise image", "Avg. NOTA Sel."] == 37.5  # vlm-a 3/4, vlm-b 0/4
    assert t5.loc["Noise image", "Best Model(s)"] == "NOTA sel.: vlm-a (75.00)"
    t6 = table6(metrics, "text", SETTINGS).set_index("Model")
    assert t6.loc["vlm-a"].to_dict() == {"Original (Overall)": 50.0, "Noise image (NOTA sel.)": 75.0}
    assert t6.loc["vlm-b"].to_dict() == {"Original (Overall)": 75.0, "Noise image (NOTA sel.)": 0.0}


def test_the_appendix_table_shows_each_nota_measure_moving_from_one_setting_to_another(answered):
    from blindspot.humblebench.tables import metrics_table, shift_table

    table = shift_table(metrics_table(answered), "text", "original", "noise").set_index("Model")
    # vlm-a says NOTA on q2 and q3 of the original (q4 unparseable), on all but q2 on noise (labels kept)
    assert table.loc["vlm-a"].drop("d'").to_dict() == {
        "NOTA Selection": "50.00 → 75.00",
        "NOTA Hit": "100.00 → 0.00",
        "False-NOTA": "33.33 → 100.00",
        "Non-NOTA Acc.": "33.33 → 0.00",
    }
    # d' from the counts above: original, the one NOTA question hit and 1 of 3 others a false NOTA (q4
    # unparseable is no NOTA); noise, the NOTA question missed and all 3 others false NOTAs.
    before, after = d_prime(hits=1, signals=1, false_alarms=1, noises=3), d_prime(0, 1, 3, 3)
    assert table.loc["vlm-a", "d'"] == f"{before:.2f} → {after:.2f}" == "0.43 → -0.97"
    # the last row averages over the models, as the paper's: noise's NOTA selection, vlm-a 3/4 and vlm-b 0/4
    assert list(table.index) == ["vlm-a", "vlm-b", "Average"]
    assert table.loc["Average", "NOTA Selection"].endswith(" → 37.50")
    cautious = shift_table(metrics_table(answered), "text", "original", "cautious")
    # no model answered both settings: none is listed, and the average has no value
    assert list(cautious["Model"]) == ["Average"]
    assert cautious["NOTA Hit"].iloc[-1] == "- → -"
    # a model without the second setting is left out: of its rows and of both sides of the average
    one_side = answered[~((answered["vlm"] == "vlm-b") & (answered["setting"] == "noise"))]
    table = shift_table(metrics_table(one_side), "text", "original", "noise").set_index("Model")
    assert list(table.index) == ["vlm-a", "Average"]
    assert table.loc["Average", "NOTA Selection"] == table.loc["vlm-a", "NOTA Selection"] == "50.00 → 75.00"


def test_table7_puts_people_and_models_on_the_same_questions(answered, tmp_path):
    from blindspot.humblebench.tables import read_human_answers, table7

    (tmp_path / "humans.csv").write_text(
        "annotator,question_id,setting,answer\n"
        "ann1,q1,original,A\nann1,q2,original,B\nann1,q2,noise,E\n"
        "ann2,q3,original,B\nann2,q4,original,C\nann2,q2,original,E\n"
    )
    humans = read_human_answers(tmp_path / "humans.csv")
    table = table7(answered, humans, "text", stress="noise").set_index("Model")
    # ann1: q1 right, q2 (NOTA) missed -> 50; ann2: all 3 right -> 100; mean 75
    assert table.loc["Human (mean of 2)", "Overall"] == 75.0
    assert table.loc["Human (mean of 2)", "NOTA hit (stress)"] == 100.0  # only ann1 has stress answers
    # vlm-a, text, on ann1's {q1, q2}: both right; on ann2's {q3, q4, q2}: q2 only -> (100 + 33.33) / 2
    assert table.loc["vlm-a", "Overall"] == pytest.approx(66.67)
    assert table.loc["vlm-a", "NOTA hit (stress)"] == 0.0  # it said A on q2's noise image
    (tmp_path / "bad.csv").write_text("annotator,question_id,setting,answer\nann1,q1,original,a\n")
    with pytest.raises(ValueError, match="row 2 answers 'a'"):
        read_human_answers(tmp_path / "bad.csv")
    (tmp_path / "unknown.csv").write_text("annotator,question_id,setting,answer\nann1,q9,original,A\n")
    with pytest.raises(ValueError, match="question q9 in setting original, which no model was asked"):
        table7(answered, read_human_answers(tmp_path / "unknown.csv"), "text")


def test_the_nota_plot_is_a_png_of_the_settings_whose_labels_the_image_supports(answered, tmp_path):
    from blindspot.humblebench.tables import metrics_table, plot_nota_tradeoff, tradeoff_points

    # The noise setting has both rates (its labels stay the questions'), but it is read by NOTA selection.
    assert not metrics_table(answered).query("setting == 'noise'")[["nota_hit", "false_nota"]].isna().any(axis=None)
    assert set(tradeoff_points(metrics_table(answered), "text", SETTINGS)["setting"]) == {"original"}
    plot_nota_tradeoff(metrics_table(answered), "text", SETTINGS, tmp_path / "nota.png")
    assert (tmp_path / "nota.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # more settings than marker shapes: the shapes repeat
    original = answered[answered["setting"] == "original"]
    many = {f"s{i}": {"label": f"Setting {i}", "headline": "overall"} for i in range(9)}
    plot_nota_tradeoff(
        metrics_table(pd.concat([original.assign(setting=name) for name in many])), "text", many, tmp_path / "many.png"
    )
    assert (tmp_path / "many.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_answers_is_an_error_not_an_empty_table(answered):
    from blindspot.humblebench.tables import metrics_table

    with pytest.raises(ValueError, match="no HumbleBench answers"):
        metrics_table(answered.iloc[:0])


@pytest.mark.slow
def test_answers_read_a_batch_at_a_time_are_those_of_the_images_in_memory(built_config, tmp_path):
    from blindspot.models.spec import model_spec
    from blindspot.models.vlm_scoring import TransformersVLMScorer
    from blindspot.prompts import PromptTemplate

    scorer = TransformersVLMScorer(model_spec(built_config, "tiny-qwen2.5-vl"), batch_size=2)
    template = PromptTemplate.load(REPO / "config" / "prompts" / "humble_original_v4.yaml")
    asked = Asked.load({"original": template, "noise": template}, letter_protocol(4), 3)
    questions = []
    for i, colour in enumerate(["red", "green", "blue"]):
        path = tmp_path / f"{i}.png"
        Image.new("RGB", (40 + 8 * i, 32), colour).save(path)
        question = Question(f"q{i}", "What colour is the car?", OPTIONS, label="ABC"[i], type="Attribute")
        noise = {"noise_image": True, "noise_per_question": True}
        setting, transforms = ("noise", noise) if i == 1 else ("original", {})
        questions.append((present(question, setting, transforms, seed=3), str(path)))
    rows, computed = answer_in_batches(questions, scorer, asked, journal_path=tmp_path / "j")
    assert computed == 3
    # The second question is shown noise of its image's size, not its image.
    pictures = [
        Image.open(questions[0][1]).convert("RGB"),
        noise_image("q1", 3, (48, 32)),
        Image.open(questions[2][1]).convert("RGB"),
    ]
    shown = [presented for presented, _ in questions]
    assert rows == answer_questions(list(zip(shown, pictures, strict=True)), scorer, asked)
    assert [row["question_id"] for row in rows] == ["q0", "q1", "q2"]
    assert [row["noise_image"] for row in rows] == [False, True, False]


def test_nota_is_read_as_the_release_writes_it():
    """Most release questions say "None of the above"; some say "None of above" (official NOTA-only results,
    questions 44-50). Both are NOTA; an option that only mentions none is not."""
    assert all(map(is_nota, ["None of the above", "None of above", "none of the above.", " None  of above "]))
    assert not any(map(is_nota, ["None", "None of them are red", "All of the above"]))


def test_each_letter_s_share_is_a_metric_as_the_official_proportions():
    """The official scorer's Proportions (a position-bias check): the share of each letter read; NOTA's
    share is `nota_selection` and the unreadable share `unparseable`. NOTA-only re-lettered shows four
    letters: an "E" there is no letter of it, so it counts as unreadable, not as E."""
    found = humility_metrics(
        answers(
            [("A", "E", "A", "Object"), ("B", "E", "A", "Object"), ("E", "E", "E", "Object"), ("C", "E", "", "Object")]
        )
    )
    assert [found[f"share_{letter}"] for letter in "abcde"] == [0.5, 0.0, 0.0, 0.0, 0.25]
    assert (found["nota_selection"], found["unparseable"]) == (0.25, 0.25)
    four = humility_metrics(answers([("A", "D", "E", "Object"), ("D", "D", "D", "Object")], FOUR_SHOWN))
    assert (four["share_d"], four["share_e"], four["unparseable"]) == (0.5, 0.0, 0.5)
