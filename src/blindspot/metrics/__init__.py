"""T2I metric plug-ins: each scores M(T, I) for a prompt T and an image I.

A plug-in is one module in this package with a class that follows `Metric`, registered in
`PLUGINS` under the name a registry entry gives as `metric:` (backend `metric`). Scores keep their
raw value; `normalise` maps it to [0, 1] with the plug-in's `bounds` for reporting.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tqdm import tqdm


@dataclass(frozen=True)
class Score:
    raw: float  # the metric's own number; NaN when the metric could not score (counted as a failure)
    detail: str = ""  # what else the metric said (a judge's text), kept for inspection


class Metric(Protocol):
    name: str  # the registry name
    model_id: str
    revision: str
    bounds: tuple[float, float]  # the raw score's range, for normalisation

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        """One score per (prompt, PIL image) pair, in order."""


# plug-in name (`evaluation.metrics.*.plugin` in config) -> "module:class", imported when used.
PLUGINS = {
    "clip_similarity": "blindspot.metrics.clip_similarity:ClipSimilarity",
    "vqa_score": "blindspot.metrics.vqa_score:VQAScore",
    "vlm_judge": "blindspot.metrics.vlm_judge:VLMJudge",
    "api_judge": "blindspot.metrics.api_judge:api_judge_plugin",
    "blip2_score": "blindspot.metrics.blip2_score:Blip2Score",
    "hpsv2": "blindspot.metrics.hpsv2:HPSv2",
    "image_reward": "blindspot.metrics.image_reward:ImageReward",
}


def load_metric(plugin: str, spec: Any, batch_size: int, cache_dir: str, **args: Any) -> Metric:
    """Build a plug-in once per job: the model from its registry entry, the rest from `args`. A
    plug-in that keeps files of its own (an API judge's responses) gets the metric's cache folder."""
    import importlib
    import inspect

    module, name = PLUGINS[plugin].split(":")
    build = getattr(importlib.import_module(module), name)
    if "cache_dir" in inspect.signature(build).parameters:
        args = args | {"cache_dir": cache_dir}
    return build(spec, batch_size, **args)


class MetricSkipped(RuntimeError):
    """A metric that cannot run here (an API judge without its key); the run goes on without it."""


def normalise(raw: float, bounds: tuple[float, float]) -> float:
    """Map a raw score to [0, 1] within its bounds (clipped; NaN stays NaN)."""
    low, high = bounds
    return min(1.0, max(0.0, (raw - low) / (high - low))) if raw == raw else raw


def batches(name: str, prompts: Sequence[Any], images: Sequence[Any], size: int) -> Iterator[tuple[list, list]]:
    """(prompts, images) in batches of `size`, with a progress bar; the two lists must pair up."""
    if len(prompts) != len(images):
        raise ValueError(f"{name}: {len(prompts)} prompts for {len(images)} images")
    for start in tqdm(range(0, len(images), size), desc=f"score {name}", unit="batch"):
        yield list(prompts[start : start + size]), list(images[start : start + size])
