"""AlignScore (Zha et al., 2023) on images, through a caption.

AlignScore is a text-to-text alignment function: a RoBERTa encoder whose 3-way head (aligned,
contradiction, neutral) was trained to say whether a context supports a claim. ProtoBias lists it
among the embedding-based text-image metrics without saying how an image enters it. Here an image
enters as its caption: a chat VLM from the registry (the metric entry's `models.captioner`, run
through transformers) describes the image in one sentence, and AlignScore scores how well that
description, as the context, supports the neutral prompt T, as the claim. That direction asks the
metric's question, "does the image show T?"; the reverse would ask whether T implies every detail
of the caption. The caption is kept as the score's detail, for inspection.

The score is the official `nli_sp` mode: the context is cut into chunks of whole sentences (about
350 words each), the claim into sentences; each claim sentence takes its highest P(aligned) over the
chunks, and the score is their mean, in [0, 1]. Each (chunk, sentence) pair is tokenised as
RoBERTa's sentence pair, the context truncated first, at most 512 tokens.

Where this differs from the official code: it splits sentences with nltk's punkt model, whose data
is downloaded at run time; here a sentence ends at ".", "!" or "?" followed by a space and an
upper-case letter or digit. Prompts and captions are one sentence, where the two agree.

The checkpoint is the official release file (`AlignScore-large.ckpt` in the `yzha/AlignScore` hub
repository), a PyTorch Lightning checkpoint of `BERTAlignModel`: `base_model.*` is a transformers
RobertaModel with its pooler, `tri_layer` the 3-way head on the pooled output. It is loaded strictly
into the same transformers classes; the masked-LM, binary and regression heads it also holds are not
used by `nli_sp`. The official package is not on PyPI (GitHub only), so no test runs it beside this.
"""

from __future__ import annotations

import re
from typing import Any

from blindspot.models.checkpoints import find_checkpoint, load_strictly, read_state_dict
from blindspot.models.spec import ModelSpec
from blindspot.models.vlm_scoring import TransformersVLMScorer
from blindspot.plugins import HubFiles, Score, batches

SCORE_VERSION = 1  # bumped when a change alters its scores (`plugin_code`)
# The models it hands images, each with the library that loads it: `models.roles`.
VLMS = {"captioner": "transformers"}

HUB_CHECKPOINT = "AlignScore-large.ckpt"
# The release's checkpoint, and its base model's configs and tokenizer (`hub.repos`).
HUB_FILES = HubFiles(checkpoint=HUB_CHECKPOINT, repo_args={"base": False})
CAPTION_INSTRUCTION = "Describe this image in one sentence."
# Official `nli_sp` settings.
CHUNK_WORDS = 350
MAX_TOKENS = 512
ALIGNED = 0  # the tri-label head's "aligned" class
# BERTAlignModel's weights that `nli_sp` does not read, by prefix, and an old buffer.
UNUSED_PREFIXES = ("mlm_head.", "bin_layer.", "reg_layer.")
UNUSED_KEYS = ("base_model.embeddings.position_ids",)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")


def sentences(text: str) -> list[str]:
    """`text` cut after ".", "!" or "?" where a space and an upper-case letter or digit follow."""
    return [part for part in _SENTENCE_END.split(text.strip()) if part] or [""]


def context_chunks(context: str, chunk_words: int = CHUNK_WORDS) -> list[str]:
    """The official chunking: as many chunks as started blocks of `chunk_words` words, each of an equal
    number of whole sentences (the last chunk takes the rest)."""
    parts = sentences(context)
    n_chunks = len(context.split()) // chunk_words + 1
    per_chunk = max(len(parts) // n_chunks, 1)
    return [" ".join(parts[i : i + per_chunk]) for i in range(0, len(parts), per_chunk)]


def model_weights(state_dict: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """BERTAlignModel's state dict split into the RoBERTa encoder's and the tri-label head's weights;
    the weights `nli_sp` does not read are dropped, anything else unknown is kept (and refused on load)."""
    encoder, head = {}, {}
    for key, value in state_dict.items():
        if key.startswith(UNUSED_PREFIXES) or key in UNUSED_KEYS:
            continue
        if key.startswith("tri_layer."):
            head[key.removeprefix("tri_layer.")] = value
        else:
            encoder[key.removeprefix("base_model.") if key.startswith("base_model.") else key] = value
    return encoder, head


class AlignScore:
    bounds = (0.0, 1.0)

    def __init__(
        self,
        spec: ModelSpec,
        batch_size: int,
        captioner: ModelSpec,
        checkpoint: str = HUB_CHECKPOINT,
        base: str | None = None,
        instruction: str = CAPTION_INSTRUCTION,
        caption_tokens: int = 40,
    ):
        """`spec.path` is the checkpoint file, a folder holding exactly one (with the config and
        tokenizer of a tiny model), or the hub id `yzha/AlignScore`, whose `checkpoint` file must be
        in the local hub cache. `base` is the model the release was fine-tuned from (the metric entry's
        `args`), whose config and tokenizer are read when the checkpoint's folder has none of its own.
        `captioner` is the registry's VLM that writes the captions."""
        import torch
        from transformers import AutoConfig, AutoTokenizer, RobertaModel

        self.name, self.model_id, self.revision = spec.name, spec.model_id, spec.revision or ""
        self.batch_size = batch_size
        self.device, self.dtype = torch.device(spec.device), getattr(torch, spec.dtype)
        path = find_checkpoint("AlignScore", spec.path, spec.revision, checkpoint)
        source = path.parent if (path.parent / "config.json").is_file() else base
        if source is None:
            raise ValueError(f"{spec.name}: {path.parent} has no config.json; name the base model in the metric's args")
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        config = AutoConfig.from_pretrained(source)
        with self.device:  # built where it runs and in its dtype, then the weights are copied in
            self.encoder = RobertaModel(config, add_pooling_layer=True).to(self.dtype).eval()
            self.head = torch.nn.Linear(config.hidden_size, 3).to(self.dtype).eval()
        encoder_weights, head_weights = model_weights(read_state_dict(path))
        mismatch = f"checkpoint {path} does not fit AlignScore's RoBERTa ({source})"
        load_strictly(self.encoder, encoder_weights, mismatch)
        load_strictly(self.head, head_weights, mismatch + " tri-label head")
        self.max_tokens = min(MAX_TOKENS, config.max_position_embeddings - 2)
        self.captioner = TransformersVLMScorer(captioner, batch_size)
        self.instruction, self.caption_tokens = instruction, caption_tokens

    def align(self, contexts: list[str], claims: list[str]) -> list[float]:
        """AlignScore `nli_sp` of each (context, claim) pair."""
        import torch

        cells, owners = [], []  # every (chunk, claim sentence) pair, and the pair and sentence it belongs to
        for index, (context, claim) in enumerate(zip(contexts, claims, strict=True)):
            chunks = context_chunks(context)
            for s, sentence in enumerate(sentences(claim)):
                cells.extend((chunk, sentence) for chunk in chunks)
                owners.extend([(index, s)] * len(chunks))
        aligned = []
        for start in range(0, len(cells), self.batch_size):
            chunk = cells[start : start + self.batch_size]
            inputs = self.tokenizer(
                [c for c, _ in chunk],
                [s for _, s in chunk],
                truncation="only_first",
                max_length=self.max_tokens,
                padding=True,
                return_tensors="pt",
            ).to(self.device)
            with torch.inference_mode():
                pooled = self.encoder(**inputs).pooler_output
                aligned.extend(torch.softmax(self.head(pooled).float(), dim=-1)[:, ALIGNED].tolist())
        best: dict[tuple[int, int], float] = {}
        for owner, probability in zip(owners, aligned, strict=True):
            best[owner] = max(best.get(owner, 0.0), probability)
        per_pair: list[list[float]] = [[] for _ in contexts]
        for (index, _), probability in best.items():
            per_pair[index].append(probability)
        return [sum(values) / len(values) for values in per_pair]

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        scores = []
        for batch_prompts, batch_images in batches(self.name, prompts, images, self.batch_size):
            captions = self.captioner.describe(
                [self.instruction] * len(batch_images), batch_images, self.caption_tokens
            )
            scores.extend(
                Score(value, detail=caption)
                for value, caption in zip(self.align(captions, batch_prompts), captions, strict=True)
            )
        return scores
