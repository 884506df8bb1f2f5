"""Each metric plug-in of the tiny preset batched (the config's evaluation.batch_size) against the same
plug-in called with one pair at a time, on the same pairs, in this process. The goal is a 3x speed-up.
The outputs agree when every pair's batched score equals its one-at-a-time score within a tolerance:
padding a batch changes float sums slightly.

The API judge is left out (it needs a server; tests/metrics/test_api_judge.py runs one), and so is ProtoScore
(it needs a scorer trained on a benchmark). A metric's helper models (`models:`) are built and passed."""

from __future__ import annotations

import numpy as np
from PIL import Image
from timing import Row, timed_arms
from tiny_preset import build_models

from blindspot.models.spec import model_spec
from blindspot.plugins import load_metric

PAIRS = 32
RELATIVE_TOLERANCE = 1e-4
ABSOLUTE_TOLERANCE = 1e-5
SPEEDUP_GOAL = 3.0
LEFT_OUT = {"api_judge", "protoscore"}


def pairs() -> tuple[list[str], list[Image.Image]]:
    rng = np.random.default_rng(0)
    prompts = [f"a penguin on a rock with exactly {i % 4 + 1} stones" for i in range(PAIRS)]
    images = [Image.fromarray(rng.integers(0, 255, (96, 96, 3), dtype=np.uint8)) for _ in prompts]
    return prompts, images


def agreement(single: list[float], batched: list[float]) -> tuple[bool, str]:
    """Whether the two arms' raw scores agree per pair, and the largest difference. A NaN (a pair the metric
    could not score) agrees only with a NaN."""
    single_scores, batched_scores = np.array(single, dtype=float), np.array(batched, dtype=float)
    close = np.isclose(batched_scores, single_scores, rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE, equal_nan=True)
    both_scored = ~np.isnan(single_scores) & ~np.isnan(batched_scores)
    differences = np.abs(batched_scores - single_scores)[both_scored]
    difference = f"max |batched - one at a time| {differences.max():.2g}" if differences.size else "no pair scored"
    unscored = np.isnan(single_scores) != np.isnan(batched_scores)
    if unscored.any():
        difference += f", {unscored.sum()} pairs scored by one arm only"
    if not close.all():
        difference += f", {(~close).sum()} of {len(close)} pairs outside tolerance"
    return bool(close.all()), difference


def compare(config: dict, repeats: int) -> list[Row]:
    resources, batch_size = config["resources_dir"], config["evaluation"]["batch_size"]
    metrics = {
        name: entry for name, entry in config["evaluation"]["metrics"].items() if entry["plugin"] not in LEFT_OUT
    }
    build_models(
        config, {model for entry in metrics.values() for model in [entry["model"], *entry.get("models", {}).values()]}
    )
    prompts, images = pairs()
    rows = []
    for name, entry in metrics.items():
        spec = model_spec(config, entry["model"])
        helpers = {arg: model_spec(config, model) for arg, model in entry.get("models", {}).items()}
        # one model: scoring one pair per call is the one-at-a-time arm
        metric = load_metric(entry["plugin"], spec, batch_size, resources, **entry.get("args", {}), **helpers)
        (single_seconds, single_scores, _), (batched_seconds, batched_scores, _) = timed_arms(
            [
                lambda metric=metric: [
                    metric.score([prompt], [image])[0] for prompt, image in zip(prompts, images, strict=True)
                ],
                lambda metric=metric: metric.score(prompts, images),
            ],
            repeats,
        )
        single_raw, batched_raw = [score.raw for score in single_scores], [score.raw for score in batched_scores]
        agree, difference = agreement(single_raw, batched_raw)
        met = single_seconds / batched_seconds >= SPEEDUP_GOAL
        goal = f"{SPEEDUP_GOAL:g}x goal met" if met else f"under the {SPEEDUP_GOAL:g}x goal"
        rows.append(
            Row(
                what=f"batching: {entry.get('label', name)}",
                peer="one pair at a time",
                peer_seconds=single_seconds,
                ours_seconds=batched_seconds,
                agree=agree,
                detail=f"{PAIRS} pairs, batch {batch_size}; {difference} (tolerance relative {RELATIVE_TOLERANCE:g} "
                f"plus absolute {ABSOLUTE_TOLERANCE:g}); one-at-a-time scores {np.nanmin(single_raw):.3g} to "
                f"{np.nanmax(single_raw):.3g}; {goal}",
            )
        )
    return rows
