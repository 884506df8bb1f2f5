"""ProtoScore as a metric plug-in: the trained pairwise scorer's s(T, I), a real number (a logit),
normalised with the logistic function for reporting. `trained` is the folder `train_protoscore` wrote
(the workflow passes it); its settings (image size, token budget, precision) are the training's. The model
is `models.protoscore_model`'s: a change there that alters its scores bumps SCORE_VERSION here."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from blindspot.models.protoscore_model import TrainSettings, base_model, load_scorer
from blindspot.models.spec import ModelSpec
from blindspot.plugins import Score, TrainedBy, batches

SCORE_VERSION = 2  # bumped when a change alters its scores (`plugin_code`); 2: the head in float32 under bf16
# The models it hands images, each with the library that loads it: `models.roles`.
VLMS = {"model": "transformers"}
# It scores with what `train_protoscore` writes, trained on `protoscore.model`: `plugins.trained_by`.
TRAINED_BY = TrainedBy(step="train_protoscore", output="protoscore", model_key="protoscore.model")


class ProtoScore:
    bounds = (-math.inf, math.inf)

    def __init__(self, spec: ModelSpec, batch_size: int, trained: str):
        self.name, self.model_id, self.revision = spec.name, spec.model_id, spec.revision or ""
        self.batch_size = batch_size
        saved = json.loads((Path(trained) / "settings.json").read_text())
        trained_on = saved.pop("base_model")
        if trained_on != base_model(spec):
            raise ValueError(f"{trained} was trained on {trained_on}, not on {spec.name} ({base_model(spec)})")
        settings = TrainSettings(**saved | {"target_modules": tuple(saved["target_modules"])})
        self.scorer = load_scorer(spec, settings, trained=trained)
        self.scorer.model.eval()

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        import torch

        scores = []
        with torch.inference_mode():
            for batch_prompts, batch_images in batches(self.name, prompts, images, self.batch_size):
                scores.extend(Score(value) for value in self.scorer.scores(batch_prompts, batch_images).tolist())
        return scores
