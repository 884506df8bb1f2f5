"""A local VLM as judge: semantic correctness of the image for T, 1-10, from the next-token
distribution over "1".."10" (expected value), through vLLM or transformers by the model's backend."""

from __future__ import annotations

from typing import Any

from blindspot.models.spec import ModelSpec
from blindspot.models.vlm_scoring import image_conversation, load_vlm_scorer
from blindspot.plugins import Score
from blindspot.prompts import PromptTemplate

SCORE_VERSION = 1  # bumped when a change alters its scores (`plugin_code`)
# The models it hands images, each with the library that loads it (None: the model's backend): `models.roles`.
VLMS = {"model": None}


class VLMJudge:
    bounds = (1.0, 10.0)

    def __init__(self, spec: ModelSpec, batch_size: int, template: str):
        self.name, self.model_id, self.revision = spec.name, spec.model_id, spec.revision or ""
        self.template = PromptTemplate.load(template)
        self.scorer = load_vlm_scorer(spec, batch_size)

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        conversations = [image_conversation(self.template, prompt=prompt) for prompt in prompts]
        return [Score(r["expected_score"], r["text"]) for r in self.scorer.score(conversations, images)]
