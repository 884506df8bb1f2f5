"""HumbleBench's intervals resample images, each with all of its questions (`humility_intervals`)."""

import json

import numpy as np
import pandas as pd
import pytest

from blindspot.humblebench.humility import INTERVAL_METRICS, _counts, _statistics, humility_intervals, humility_metrics

SHOWN = json.dumps(dict(zip("ABCDE", "ABCDE", strict=True)))


def _answers(labels, predictions, types) -> pd.DataFrame:
    return pd.DataFrame({"label": labels, "nota": "E", "prediction": predictions, "type": types, "letter_map": SHOWN})


def _random_answers(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    labels = rng.choice(list("ABCDE"), n)
    predictions = np.where(rng.random(n) < 0.6, labels, rng.choice([*"ABCDE", "", "F"], n))
    return _answers(labels, predictions, rng.choice(["Object", "Attribute", "Relation"], n))


def test_the_resampled_statistics_are_the_metrics_themselves_on_the_whole():
    answers = _random_answers(500, 0)
    counts, at = _counts(answers)
    whole = _statistics(counts.sum(axis=0)[None, :], at)
    metrics = humility_metrics(answers)
    for metric in INTERVAL_METRICS:
        assert whole[metric][0] == pytest.approx(metrics[metric], nan_ok=True), metric


def test_questions_that_share_an_image_and_its_outcome_widen_the_interval():
    """400 images of 5 questions each, every question of an image right or wrong alike: resampling images gives
    intervals about sqrt(5) = 2.2 times as wide as resampling questions."""
    rng = np.random.default_rng(1)
    right = np.repeat(rng.random(400) < 0.6, 5)
    labels = np.repeat(rng.choice(list("ABCDE"), 400), 5)
    predictions = np.where(right, labels, np.where(labels == "A", "B", "A"))
    answers = _answers(labels, predictions, np.repeat(rng.choice(["Object", "Relation"], 400), 5))
    images = np.repeat([f"coco_{i}.jpg" for i in range(400)], 5)
    by_question = humility_intervals(answers, np.arange(2000), 2000, 3)
    by_image = humility_intervals(answers, images, 2000, 3)
    widths = {
        metric: (by_image[f"{metric}_high"] - by_image[f"{metric}_low"])
        / (by_question[f"{metric}_high"] - by_question[f"{metric}_low"])
        for metric in ("overall", "nota_hit", "humility")
    }
    assert all(1.8 < ratio < 2.7 for ratio in widths.values()), widths
    overall = humility_metrics(answers)["overall"]
    assert by_image["overall_low"] < overall < by_image["overall_high"]


def test_a_metric_undefined_on_the_answers_has_no_interval():
    answers = _answers(["A", "B"], ["A", "C"], ["Object", "Object"])  # no NOTA question
    found = humility_intervals(answers, ["i1", "i2"], 100, 0)
    assert np.isnan([found["nota_hit_low"], found["d_prime_high"], found["relation_low"]]).all()
    assert found["overall_low"] <= 0.5 <= found["overall_high"]
    # both questions of one image: one cluster shows no spread, so no interval
    assert np.isnan(list(humility_intervals(answers, ["i1", "i1"], 100, 0).values())).all()


def test_two_vlms_are_compared_per_setting_on_the_questions_both_answered(tmp_path):
    from helpers.humble import answers, make_tables, write_answers

    from blindspot.humblebench.comparisons import vlm_comparisons
    from blindspot.humblebench.humility import answer_outcomes

    frame = answers()
    compared = vlm_comparisons(frame, "text", None, 200, 0).set_index("setting")
    assert list(compared.index) == list(dict.fromkeys(frame["setting"]))
    for setting, part in frame.groupby("setting"):
        right = answer_outcomes(part.assign(prediction=part["prediction_text"]))["correct"]
        by_vlm = {vlm: right[part["vlm"] == vlm].to_numpy() for vlm in ("vlm-a", "vlm-b")}
        row = compared.loc[setting]
        assert (row["a"], row["b"], row["n"]) == ("vlm-a", "vlm-b", len(by_vlm["vlm-a"]))
        assert row["a_only"] == int((by_vlm["vlm-a"] & ~by_vlm["vlm-b"]).sum())
        assert row["b_only"] == int((~by_vlm["vlm-a"] & by_vlm["vlm-b"]).sum())
    # one question vlm-b did not answer: that comparison is on the others
    fewer = frame.drop(index=frame.index[(frame["vlm"] == "vlm-b")][:1])
    assert vlm_comparisons(fewer, "text", None, 200, 0)["n"].tolist()[0] == compared["n"].iloc[0] - 1
    make_tables(tmp_path, write_answers(tmp_path, frame), humans=False)
    written = pd.read_csv(tmp_path / "comparisons.csv")
    pd.testing.assert_frame_equal(written, vlm_comparisons(frame, "text", None, 200, 0), check_dtype=False)
    assert (tmp_path / "comparisons.md").read_text().startswith("Every two VLMs per setting")


def test_the_draws_follow_which_questions_share_an_image_not_where_it_lies():
    from helpers.humble import answers

    from blindspot.humblebench.humility import image_clusters
    from blindspot.humblebench.tables import metrics_table

    questions = ["q3", "q1", "q2", "q4"]
    here = {"q1": "/a/coco_9.jpg", "q2": "/a/coco_1.jpg", "q3": "/a/coco_9.jpg"}
    moved = {question: path.replace("/a/", "/elsewhere/x_") for question, path in here.items()}
    assert image_clusters(questions, here).tolist() == ["q1", "q1", "q2", "q4"]
    assert image_clusters(questions, moved).tolist() == image_clusters(questions, here).tolist()
    frame = answers()
    ids = sorted(set(frame["question_id"]))
    shared = {question: f"/run1/img{i // 2}.png" for i, question in enumerate(ids)}
    elsewhere = {question: f"/run2/{chr(122 - i // 2)}.png" for i, question in enumerate(ids)}  # names sort otherwise
    pd.testing.assert_frame_equal(
        metrics_table(frame, images=shared, n_boot=300), metrics_table(frame, images=elsewhere, n_boot=300)
    )
