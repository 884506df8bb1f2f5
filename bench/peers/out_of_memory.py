"""Out-of-memory back-off (issue 45): the tiny CLIPScore plug-in scored through the project's `score_batches`
at the config's batch size, as it fits (the peer), against the same plug-in behind a wrapper whose calls of
more than `FITS` pairs raise torch's `OutOfMemoryError` before scoring, as a smaller GPU would
(`images.Backoff` then halves the batch and goes on at the size that ran). Only the error is simulated; the
model is real. Agreement: the same scores, pair by pair, within the batching comparison's tolerance (a
smaller batch pads differently). The time is what the back-off costs: the failed first call, then batches
of `FITS`."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from timing import Row, timed_arms
from tiny_preset import build_models

from blindspot.models.spec import model_spec
from blindspot.plugins import load_metric, score_batches
from peers.batching import agreement, pairs

METRIC = "clipscore"
FITS = 2


class SmallGPU:
    """A metric whose calls of more than `FITS` pairs run out of memory (torch's own error)."""

    def __init__(self, metric: Any):
        self.metric = metric

    def score(self, prompts: list[str], images: list[Any]) -> list[Any]:
        if len(prompts) > FITS:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {len(prompts)} GiB (simulated)")
        return self.metric.score(prompts, images)


def compare(config: dict[str, Any], repeats: int) -> list[Row]:
    entry = config["evaluation"]["metrics"][METRIC]
    batch_size = config["evaluation"]["batch_size"]
    build_models(config, {entry["model"]})
    metric = load_metric(
        entry["plugin"], model_spec(config, entry["model"]), batch_size, config["resources_dir"], **entry["args"]
    )
    prompts, images = pairs()
    with tempfile.TemporaryDirectory() as scratch:
        paths = []
        for index, image in enumerate(images):
            paths.append(str(Path(scratch) / f"{index}.png"))
            image.save(paths[-1])

        def scored(scorer: Any) -> list[float]:
            return [score.raw for batch in score_batches(scorer, METRIC, prompts, paths, batch_size) for score in batch]

        fits, backs_off = timed_arms([lambda: scored(metric), lambda: scored(SmallGPU(metric))], repeats)
    agree, difference = agreement(fits.result, backs_off.result)
    return [
        Row(
            what=f"out of memory: CLIPScore, {len(prompts)} pairs",
            peer=f"batch {batch_size} that fits",
            peer_seconds=fits.seconds,
            ours_seconds=backs_off.seconds,
            agree=agree,
            detail=(
                f"batches over {FITS} pairs raise torch.OutOfMemoryError: the job halves its batch of {batch_size} "
                f"down to {FITS} and goes on at that size, each job anew (a journaled step keeps it for its retry); "
                f"{difference}; 'speed-up' under 1 is the back-off's cost"
            ),
        )
    ]
