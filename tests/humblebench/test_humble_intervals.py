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
    found = humility_intervals(answers, ["i1", "i1"], 100, 0)
    assert np.isnan([found["nota_hit_low"], found["d_prime_high"], found["relation_low"]]).all()
    assert found["overall_low"] <= 0.5 <= found["overall_high"]
