"""CLIP-family similarity: CLIPScore (Hessel et al.: 2.5 x max(cos, 0) with CLIP ViT-B/32) and
PickScore (its CLIP-H's logit scale x cos). Cosine per (prompt, image) pair, never a batch mean."""

from __future__ import annotations

from typing import Any

from blindspot.models.spec import ModelSpec
from blindspot.plugins import HubFiles, Score, batches

SCORE_VERSION = 1  # bumped when a change alters its scores (`plugin_code`)
# PickScore's processor, read from its own repository for its configs (`hub.repos`).
HUB_FILES = HubFiles(repo_args={"processor": False})


class ClipSimilarity:
    def __init__(
        self,
        spec: ModelSpec,
        batch_size: int,
        weight: float | None = None,
        floor_at_zero: bool = False,
        processor: str | None = None,
    ):
        """`weight` multiplies the cosine; without one, the model's own logit scale does (PickScore).
        `processor` names another repository for the tokenizer and image processor (PickScore's
        checkpoint uses those of LAION's CLIP-H)."""
        import torch
        from transformers import CLIPModel, CLIPProcessor

        self.name, self.model_id, self.revision = spec.name, spec.model_id, spec.revision or ""
        self.batch_size = batch_size
        device_map = spec.device_map  # first: a job without the GPUs its model asks for stops before reading weights
        self.processor = CLIPProcessor.from_pretrained(
            processor or spec.path, revision=None if processor else spec.revision
        )
        self.model = CLIPModel.from_pretrained(
            spec.path, revision=spec.revision, dtype=getattr(torch, spec.dtype), device_map=device_map
        )
        self.model.eval()
        self.weight = float(self.model.logit_scale.detach().exp()) if weight is None else float(weight)
        self.floor_at_zero = floor_at_zero
        self.bounds = (0.0 if floor_at_zero else -self.weight, self.weight)

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        import torch

        cosines: list[float] = []
        for batch_prompts, batch_images in batches(self.name, prompts, images, self.batch_size):
            inputs = self.processor(
                text=batch_prompts, images=batch_images, return_tensors="pt", padding=True, truncation=True
            ).to(self.model.device)
            with torch.inference_mode():
                output = self.model(**inputs)
            text = torch.nn.functional.normalize(output.text_embeds.float(), dim=-1)
            image = torch.nn.functional.normalize(output.image_embeds.float(), dim=-1)
            cosines.extend((text * image).sum(dim=-1).tolist())
        return [Score(self.weight * (max(c, 0.0) if self.floor_at_zero else c)) for c in cosines]
