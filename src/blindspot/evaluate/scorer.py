"""Scoring prompts and images in memory from Python (`blindspot.api.Scorer`), with any metric plug-in: a metric
of the config by name, or a plug-in as `blindspot evaluate`'s `--metric` takes it (`module:Class@MODEL`,
`@none`, or `module:Class` alone when its class says `registry_model = False`). It is built once, through
the `metric_loader` and `load_metric` a `score_metric` job uses, on its registry entry's device and dtype,
and then scores as often as it is called, as t2v_metrics' `score = VQAScore(model=...); score(...)` does."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import targets
from blindspot.checks import absolute_paths, validate_config
from blindspot.config import ConfigError
from blindspot.dag import checkout_config
from blindspot.evaluate.config import DEFAULT_CONFIG, metric_entries
from blindspot.images import read_rgb
from blindspot.models.spec import model_spec
from blindspot.paths import CHECKOUT
from blindspot.plugins import Metric, batches, normalise, trained_by, trained_metric_input
from blindspot.protobias.metric_scores import metric_loader

COLUMNS = ["prompt", "raw", "score", "detail"]


def _loaded(config: dict[str, Any], name: str, batch_size: int) -> Metric:
    """The metric's plug-in as its job builds it: its model's spec (None without one) and its helpers', its
    cache folder (where an API judge keeps its replies, shared with the workflow's jobs, so neither pays
    twice), and a trained scorer's folder (ProtoScore's), which only the workflow makes."""
    entry = config["evaluation"]["metrics"][name]
    spec = model_spec(config, entry["model"]) if "model" in entry else None
    helpers = {arg: model_spec(config, model) for arg, model in entry.get("models", {}).items()}
    trained = next(iter(trained_metric_input(config, name)), None)
    if trained is not None and not Path(trained).is_dir():
        step = trained_by(entry["plugin"]).step
        raise ConfigError(
            f"metric {name}: scores with the output of the workflow's {step}, {trained}, which is "
            f"not there: run the workflow's {step} first"
        )
    key = spec.api_key_env if spec else None
    if key and not os.environ.get(key):  # a job would skip the metric; here there is nothing to go on with
        raise ConfigError(f"metric {name}: its model '{spec.name}' reads its API key from ${key}, which is not set")
    cache = targets.path(config, "metric_cache", metric=name)
    return metric_loader(entry, spec, helpers, batch_size, cache, trained, api_key_is_set=True)()


def _rgb(image: Any, name: str) -> Any:
    """A PIL image as RGB, or the image file at a path (from the current folder)."""
    if isinstance(image, str | os.PathLike):
        return read_rgb(image)
    if not hasattr(image, "convert"):
        raise TypeError(f"{name}: an image is a {type(image).__name__}, not a PIL image or a path")
    return image.convert("RGB")


class Scorer:
    """A metric plug-in loaded once: `Scorer(metric)(prompts, images)` scores each (prompt, image) pair."""

    def __init__(self, metric: str, *, configfile: str | None = None, batch_size: int | None = None):
        """`metric` is a metric of the config (`configfile`, named from the current folder; default the
        checkout's config/tiny.yaml) or a plug-in `module:Class@MODEL` (MODEL a registry name, or `none`);
        `batch_size` the pairs handed to the plug-in at a time (default `evaluation.batch_size`). A bad name
        or model stops here, in one line (ConfigError), before any model loads."""
        config = checkout_config(configfile, DEFAULT_CONFIG)
        [(self.name, entry)] = metric_entries(config, [metric]).items()
        config["evaluation"]["metrics"] |= {self.name: entry}
        # the config's relative paths (built models, templates, the cache) are the checkout's, from any folder
        config = absolute_paths(config, CHECKOUT)
        validate_config(config)
        self.batch_size = batch_size or config["evaluation"]["batch_size"]
        self.metric = _loaded(config, self.name, self.batch_size)

    def __call__(self, prompts: Sequence[str], images: Sequence[Any]) -> pd.DataFrame:
        """One row per (prompt, image) pair, in order: `prompt`, `raw` (the plug-in's own number; NaN where it
        could not score), `score` (`raw` normalised to [0, 1] within the plug-in's bounds) and `detail` (what
        else it said, such as a judge's text). Images are PIL images or paths, read a batch at a time; a
        progress bar shows the batches when there are several."""
        rows = []
        for batch_prompts, batch_images in batches(self.name, prompts, images, self.batch_size):
            scores = self.metric.score(batch_prompts, [_rgb(image, self.name) for image in batch_images])
            rows += [
                {
                    "prompt": prompt,
                    "raw": score.raw,
                    "score": normalise(score.raw, self.metric.bounds),
                    "detail": score.detail,
                }
                for prompt, score in zip(batch_prompts, scores, strict=True)
            ]
        return pd.DataFrame(rows, columns=COLUMNS)
