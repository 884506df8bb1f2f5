"""BLIPv2Score: BLIP-2's image-text retrieval model (`Salesforce/blip2-itm-vit-g`, loaded as
transformers' `Blip2ForImageTextRetrieval`) scoring each (prompt, image) pair.

Two heads share the Q-Former, chosen by `head`:

- `itm` (default): the image-text matching head. The prompt's tokens and the learned queries attend
  to each other inside the Q-Former while the queries cross-attend to the image; a linear head on
  each query gives two logits (no match, match), averaged over the queries. The score is
  softmax(logits)[match], in (0, 1). This is BLIP-2's own fine-grained verdict on one pair, the head
  LAVIS's `blip2_image_text_matching` and the Hugging Face model card use for "is T a caption of I",
  so it is the default.
- `itc`: the image-text contrastive score, the cosine between the prompt's projected [CLS]
  embedding and each query's projected embedding, maximised over the queries (as BLIP-2 does in
  pre-training and retrieval), in [-1, 1]. Text and image are encoded apart, so it is a
  CLIP-like embedding similarity, coarser than ITM; kept for comparison.

Scores are per pair: ITM runs image i with prompt i; ITC takes the diagonal of the batch's
image-prompt matrix, never a batch statistic.
"""

from __future__ import annotations

from typing import Any

from blindspot.models.spec import ModelSpec
from blindspot.plugins import Score, batches

SCORE_VERSION = 1  # bumped when a change alters its scores (`plugin_code`)

HEADS = {"itm": (0.0, 1.0), "itc": (-1.0, 1.0)}
MATCH = 1  # the ITM head's logits are (no match, match)


class Blip2Score:
    def __init__(self, spec: ModelSpec, batch_size: int, head: str = "itm"):
        if head not in HEADS:
            raise ValueError(f"{spec.name}: head '{head}' is not one of {', '.join(HEADS)}")
        import torch
        from transformers import AutoProcessor, Blip2ForImageTextRetrieval

        self.name, self.model_id, self.revision = spec.name, spec.model_id, spec.revision or ""
        self.batch_size, self.head, self.bounds = batch_size, head, HEADS[head]
        self.dtype = getattr(torch, spec.dtype)
        device_map = spec.device_map  # first: a job without the GPUs its model asks for stops before reading weights
        self.processor = AutoProcessor.from_pretrained(spec.path, revision=spec.revision)
        # transformers keeps the Q-Former and query tokens in float32 under float16, and casts between.
        self.model = Blip2ForImageTextRetrieval.from_pretrained(
            spec.path, revision=spec.revision, dtype=self.dtype, device_map=device_map
        )
        self.model.eval()

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        import torch

        scores: list[float] = []
        for batch_prompts, batch_images in batches(self.name, prompts, images, self.batch_size):
            inputs = self.processor(
                images=batch_images, text=batch_prompts, return_tensors="pt", padding=True, truncation=True
            ).to(self.model.device, dtype=self.dtype)  # the dtype only reaches pixel_values
            with torch.inference_mode():
                output = self.model(**inputs, use_image_text_matching_head=self.head == "itm")
            logits = output.logits_per_image.float()
            if self.head == "itm":  # (batch, 2): image i with prompt i
                scores.extend(torch.softmax(logits, dim=-1)[:, MATCH].tolist())
            else:  # (images, prompts), already maximised over the queries: pair i is the diagonal
                scores.extend(logits.diagonal().tolist())
        return [Score(s) for s in scores]
