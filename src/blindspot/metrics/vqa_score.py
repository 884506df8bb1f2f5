"""VQAScore (Lin et al.): P("Yes") for 'Does this figure show "{T}"? Please answer Yes or No.',
read from a VLM's next-token distribution over the whole vocabulary."""

from __future__ import annotations

from typing import Any

from blindspot.models.spec import ModelSpec
from blindspot.models.vlm_scoring import TransformersVLMScorer, image_question
from blindspot.plugins import Score, batches

SCORE_VERSION = 1  # bumped when a change alters its scores (`plugin_code`)
# The models it hands images, each with the library that loads it: `models.roles`.
VLMS = {"model": "transformers"}

QUESTION = 'Does this figure show "{prompt}"? Please answer Yes or No.'


class VQAScore:
    bounds = (0.0, 1.0)

    def __init__(self, spec: ModelSpec, batch_size: int, question: str = QUESTION, answer: str = "Yes"):
        self.name, self.model_id, self.revision = spec.name, spec.model_id, spec.revision or ""
        self.vlm = TransformersVLMScorer(spec, batch_size)
        self.question = question
        ids = self.vlm.processor.tokenizer.encode(answer, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"{spec.name}: the answer '{answer}' is {len(ids)} tokens; VQAScore needs one")
        self.answer = ids[0]

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        import torch

        conversations = [image_question(self.question.format(prompt=p)) for p in prompts]
        scores = []
        for batch_conversations, batch_images in batches(self.name, conversations, images, self.vlm.batch_size):
            inputs = self.vlm.inputs(batch_conversations, batch_images)
            with torch.inference_mode():
                logits = self.vlm.model(**inputs, logits_to_keep=1).logits[:, -1].float()  # the answer position only
            scores.extend(Score(p) for p in torch.softmax(logits, dim=-1)[:, self.answer].tolist())
        return scores
