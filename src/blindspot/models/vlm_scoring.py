"""Score an image against its own description with a VLM, 1 to 10, from the next-token distribution.

The score never depends on parsing luck: the model's probability of each answer "1".."10" is read
from its logits (expected value and argmax), and the generated text is kept beside it. Tokenizers
differ on "10": Qwen-style ones split digits ("1", "0"), others have one token. Both are handled:
a two-token "10" takes P("1") x P("0" | "1"), and then "1" alone takes P("1") x (1 - P("0" | "1")).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from blindspot.images import journaled_batches, read_rgb
from blindspot.models.spec import ModelSpec
from blindspot.prompts import PromptTemplate

log = logging.getLogger(__name__)
SCORES = tuple(range(1, 11))


@dataclass(frozen=True)
class ScoreTokens:
    """Token ids of the answers "1".."10" for one tokenizer."""

    single: dict[int, int]  # score -> its token, for every single-token answer
    ten_after_one: int | None  # the token that follows "1" to make "10", when "10" is two tokens

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> ScoreTokens:
        single, ten_after_one = {}, None
        one = tokenizer.encode("1", add_special_tokens=False)
        for score in SCORES:
            ids = tokenizer.encode(str(score), add_special_tokens=False)
            if len(ids) == 1:
                single[score] = ids[0]
            elif score == 10 and len(ids) == 2 and ids[:1] == one:
                ten_after_one = ids[1]
            else:
                raise ValueError(f"cannot score with this tokenizer: '{score}' is tokens {ids}")
        if 10 not in single and ten_after_one is None:
            raise ValueError("cannot score with this tokenizer: no way to read '10'")
        return cls(single, ten_after_one)


def score_distribution(first: np.ndarray, after_one: np.ndarray, tokens: ScoreTokens) -> tuple[np.ndarray, float]:
    """P(score) over 1..10 from log-probabilities of the first answer token (`first`) and of the
    token after "1" (`after_one`); also the probability mass the model put on valid answers."""
    p_first, p_after_one = np.exp(first), np.exp(after_one)
    mass = np.array([p_first[tokens.single[s]] if s in tokens.single else 0.0 for s in SCORES])
    if tokens.ten_after_one is not None:
        p_zero = p_after_one[tokens.ten_after_one]
        mass[9] += mass[0] * p_zero
        mass[0] *= 1.0 - p_zero
    total = float(mass.sum())
    if total <= 0 or not math.isfinite(total):
        return np.full(len(SCORES), 1.0 / len(SCORES)), 0.0
    return mass / total, total


def summarise(probabilities: np.ndarray) -> tuple[float, int]:
    """(expected score, most probable score)."""
    return float(np.dot(probabilities, SCORES)), int(SCORES[int(np.argmax(probabilities))])


_TEXT_SCORE = re.compile(r"(?<!\d)(10|[1-9])(?!\d)")


def scored(first: np.ndarray, after_one: np.ndarray, text: str, tokens: ScoreTokens) -> dict[str, Any]:
    """One image's row: the score distribution, its summaries and the generated text."""
    probabilities, mass = score_distribution(first, after_one, tokens)
    expected, best = summarise(probabilities)
    return {
        "expected_score": expected,
        "argmax_score": best,
        "valid_mass": mass,
        "probabilities": probabilities.tolist(),
        "text": text.strip(),
        "text_score": text_score(text),
    }


def text_score(text: str) -> int | None:
    """The first score 1..10 written in `text`, if any (kept for comparison, never relied on)."""
    match = _TEXT_SCORE.search(text)
    return int(match[1]) if match else None


def generation_cache(output: Any) -> tuple[str, Any]:
    """The key-value cache `generate` returned, and the keyword it takes one back by: `cache` where transformers
    names it so (5.2x), `past_key_values` in earlier 5.x (a GPU machine's 5.17)."""
    import dataclasses

    name = "cache" if "cache" in {field.name for field in dataclasses.fields(output)} else "past_key_values"
    return name, getattr(output, name)


class TransformersVLMScorer:
    """A VLM through transformers (AutoModelForImageTextToText), built once per job."""

    def __init__(self, spec: ModelSpec, batch_size: int, max_new_tokens: int = 8):
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.spec = spec
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.model = spec.pretrained(AutoModelForImageTextToText)  # first: a job without its GPUs stops at once
        self.processor = AutoProcessor.from_pretrained(spec.path, **spec.files)
        self.processor.tokenizer.padding_side = "left"
        self.device = self.model.device
        self.tokenizer = self.processor.tokenizer
        self.tokens = ScoreTokens.from_tokenizer(self.tokenizer)
        self.one = self.tokenizer.encode("1", add_special_tokens=False)[0]

    def batches(self, texts: list[Any], images: list[Any], what: str) -> Iterator[tuple[list[Any], list[Any]]]:
        """The texts (or conversations) and their images a batch of the model's at a time; a progress bar
        when there are several (callers that read images hand over one batch at a time, and show their own)."""
        starts = tqdm(
            range(0, len(images), self.batch_size),
            desc=f"{what} {self.spec.name}",
            unit="batch",
            disable=len(images) <= self.batch_size,
        )
        for start in starts:
            yield texts[start : start + self.batch_size], images[start : start + self.batch_size]

    def inputs(self, conversations: list[list[dict]], images: list[Any], suffix: str = "") -> Any:
        texts = [self.processor.apply_chat_template(c, add_generation_prompt=True) + suffix for c in conversations]
        return self.processor(text=texts, images=images, return_tensors="pt", padding=True).to(self.device)

    @property
    def generation_config(self) -> Any:
        """The checkpoint's generation config, as `generate` reads it when a caller passes no decoding."""
        return self.model.generation_config

    def choose(
        self,
        conversations: list[list[dict]],
        images: list[Any],
        candidates: list[int],
        max_new_tokens: int,
        decoding: Any = None,
        seeds: list[int] | None = None,
    ) -> list[tuple[list[float], str, bool]]:
        """For each conversation: the probability of each candidate token at the first answer position
        (normalised over the whole vocabulary), the answer's text and whether the answer ended on its own
        (an end-of-sequence token) rather than at `max_new_tokens`. One prefill per prompt: the first
        position's distribution is `generate`'s own first raw logits. The answer is greedy, or sampled
        as `decoding` says (its `sampled`, `temperature`, `top_p`, `top_k`); a sampled batch is seeded from
        its conversations' `seeds`, so the same batch samples the same answers on a re-run."""
        import torch

        ends = self.model.generation_config.eos_token_id
        ends = torch.tensor([ends] if isinstance(ends, int) else list(ends or []), device=self.device)
        sampling = _transformers_sampling(decoding)
        seeds = seeds or [0] * len(conversations)
        results = []
        for start, (batch_conv, batch_images) in zip(
            range(0, len(images), self.batch_size), self.batches(conversations, images, "answer"), strict=True
        ):
            prompt = self.inputs(batch_conv, batch_images)
            if sampling["do_sample"]:
                torch.manual_seed(sum(seeds[start : start + self.batch_size]) % 2**31)
            with torch.inference_mode():
                out = self.model.generate(
                    **prompt,
                    max_new_tokens=max_new_tokens,
                    **sampling,
                    output_logits=True,
                    return_dict_in_generate=True,
                )
                # raw logits (before any logits processor), so the probabilities are the model's own
                probabilities = torch.softmax(out.logits[0].float(), dim=-1)[:, candidates]
            new = out.sequences[:, prompt["input_ids"].shape[1] :]
            stopped = torch.isin(new, ends).any(dim=1).cpu().tolist()
            texts = self.processor.batch_decode(new, skip_special_tokens=True)
            results.extend(zip(probabilities.cpu().tolist(), (t.strip() for t in texts), stopped, strict=True))
        return results

    def describe(self, instructions: list[str], images: list[Any], max_new_tokens: int) -> list[str]:
        """Each image's greedy answer to its instruction (a caption request, say)."""
        import torch

        texts = []
        for batch_instructions, batch in self.batches(instructions, images, "describe"):
            prompt = self.inputs([image_question(text) for text in batch_instructions], batch)
            with torch.inference_mode():
                generated = self.model.generate(**prompt, max_new_tokens=max_new_tokens, do_sample=False)
            new_tokens = generated[:, prompt["input_ids"].shape[1] :]
            texts.extend(t.strip() for t in self.processor.batch_decode(new_tokens, skip_special_tokens=True))
        return texts

    def score(self, conversations: list[list[dict]], images: list[Any]) -> list[dict[str, Any]]:
        """Each conversation's score row, from one prefill per prompt (its image encoded once): the greedy
        answer's first raw logits are the first answer token's distribution, and the answer "1" then continues
        from the prompt's part of that generation's cache for one step, whose logits are what follows "1". Both
        go through `generate`, so the continuation's positions agree with the cache's on every model."""
        import torch

        results = []
        for batch_conv, batch_images in self.batches(conversations, images, "judge"):
            prompt = self.inputs(batch_conv, batch_images)
            ids, mask = prompt["input_ids"], prompt["attention_mask"]
            greedy = {"do_sample": False, "output_logits": True, "return_dict_in_generate": True}
            with torch.inference_mode():
                answer = self.model.generate(**prompt, max_new_tokens=self.max_new_tokens, **greedy)
                keyword, cache = generation_cache(answer)
                cache.crop(ids.shape[1] - cache.get_seq_length())  # back to the prompt
                then = self.model.generate(
                    input_ids=torch.cat([ids, torch.full_like(ids[:, :1], self.one)], dim=1),
                    attention_mask=torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1),
                    max_new_tokens=1,
                    **{keyword: cache},
                    **greedy,
                )
                # raw logits (before any logits processor), so the probabilities are the model's own
                logits = torch.stack([answer.logits[0], then.logits[0]], dim=1).float()
                logprobs = torch.log_softmax(logits, dim=-1).cpu().numpy()
            texts = self.processor.batch_decode(answer.sequences[:, ids.shape[1] :], skip_special_tokens=True)
            results.extend(scored(row[0], row[1], text, self.tokens) for row, text in zip(logprobs, texts, strict=True))
        return results


class VLLMVLMScorer:
    """A VLM served by vLLM, images passed inside the chat messages (vLLM turns them into its
    multimodal data). vLLM returns log-probabilities for exactly the token ids that spell "1".."10"
    (`logprob_token_ids`, normalised over the whole vocabulary): once at the first answer position
    of a greedy generation, whose text is kept, and once after the answer "1" (for a two-token "10")."""

    def __init__(self, spec: ModelSpec, batch_size: int, max_new_tokens: int = 8):
        from blindspot.models.textgen import lora_request, vllm_engine

        self.spec = spec
        self.max_new_tokens = max_new_tokens
        self.llm = vllm_engine(spec)
        self.lora = lora_request(spec)  # None, or the adapter every request carries
        # Callers hand over images this many at a time, as to the transformers backend: the config's batch
        # is the journal's unit and the images a job holds (its memory), whatever GPU vLLM finds. vLLM
        # schedules its own steps within a call, but a call waits for its longest answer: a batch of tens
        # suits one-token scores, and answers with long reasoning get several times max_num_seqs
        # (`humblebench.vllm_batch_size`).
        self.batch_size = batch_size
        self.tokenizer = self.llm.get_tokenizer()
        self.tokens = ScoreTokens.from_tokenizer(self.tokenizer)
        self.one = self.tokenizer.encode("1", add_special_tokens=False)[0]
        self.candidates = sorted({*self.tokens.single.values(), self.tokens.ten_after_one} - {None})

    def _dense(self, logprobs: dict[int, Any]) -> np.ndarray:
        """The returned candidates as a vocabulary-indexed array (-inf elsewhere)."""
        dense = np.full(max(self.candidates) + 1, -np.inf)
        for token in self.candidates:
            dense[token] = logprobs[token].logprob
        return dense

    def score(self, conversations: list[list[dict]], images: list[Any]) -> list[dict[str, Any]]:
        from vllm import SamplingParams

        messages = [with_image(c, image) for c, image in zip(conversations, images, strict=True)]
        greedy = {"temperature": 0.0, "logprob_token_ids": self.candidates}
        answers = self.llm.chat(
            messages, SamplingParams(max_tokens=self.max_new_tokens, **greedy), use_tqdm=True, lora_request=self.lora
        )
        after_one = self.llm.chat(
            [[*m, {"role": "assistant", "content": "1"}] for m in messages],
            SamplingParams(max_tokens=1, **greedy),
            add_generation_prompt=False,
            continue_final_message=True,
            use_tqdm=True,
            lora_request=self.lora,
        )
        results = []
        for answer, continued in zip(answers, after_one, strict=True):
            if continued.prompt_token_ids[-1] != self.one:
                raise ValueError(f"{self.spec.name}: the chat template's answer position does not tokenize '1' alone")
            first, then = answer.outputs[0], continued.outputs[0]
            first_logprobs, then_logprobs = self._dense(first.logprobs[0]), self._dense(then.logprobs[0])
            results.append(scored(first_logprobs, then_logprobs, first.text, self.tokens))
        return results

    @property
    def generation_config(self) -> Any:
        """The checkpoint's generation config (generation_config.json; transformers' defaults without one),
        as transformers' `generate` would read it."""
        from transformers import GenerationConfig

        try:
            return GenerationConfig.from_pretrained(self.spec.path, revision=self.spec.revision)
        except OSError:
            return GenerationConfig()

    def choose(
        self,
        conversations: list[list[dict]],
        images: list[Any],
        candidates: list[int],
        max_new_tokens: int,
        decoding: Any = None,
        seeds: list[int] | None = None,
    ) -> list[tuple[list[float], str, bool]]:
        """As `TransformersVLMScorer.choose`: vLLM returns the candidates' log-probabilities at the first
        answer position (`logprob_token_ids`, the model's raw distribution); an answer ended on its own
        unless its `finish_reason` is "length" (the token budget). A sampled answer is seeded by its own
        seed of `seeds`, whatever the batch."""
        from vllm import SamplingParams

        messages = [with_image(c, image) for c, image in zip(conversations, images, strict=True)]
        sampling = _vllm_sampling(decoding)
        seeds = seeds or [0] * len(conversations)
        params = [
            SamplingParams(
                max_tokens=max_new_tokens,
                logprob_token_ids=candidates,
                **sampling,
                **({"seed": seed} if sampling["temperature"] > 0 else {}),
            )
            for seed in seeds
        ]
        results = []
        for answer in self.llm.chat(messages, params, use_tqdm=True, lora_request=self.lora):
            first = answer.outputs[0]
            probabilities = [math.exp(first.logprobs[0][token].logprob) for token in candidates]
            results.append((probabilities, first.text.strip(), first.finish_reason != "length"))
        return results


def _transformers_sampling(decoding: Any) -> dict[str, Any]:
    """`generate`'s decoding arguments: greedy, or sampling with the parameters `decoding` gives."""
    if decoding is None or not decoding.sampled:
        return {"do_sample": False}
    given = {"temperature": decoding.temperature, "top_p": decoding.top_p, "top_k": decoding.top_k}
    return {"do_sample": True, **{key: value for key, value in given.items() if value is not None}}


def _vllm_sampling(decoding: Any) -> dict[str, Any]:
    """vLLM's `SamplingParams` decoding arguments: temperature 0 (greedy), or those `decoding` gives."""
    if decoding is None or not decoding.sampled:
        return {"temperature": 0.0}
    given = {"temperature": decoding.temperature, "top_p": decoding.top_p, "top_k": decoding.top_k}
    return {key: value for key, value in given.items() if value is not None}


def with_image(conversation: list[dict], image: Any) -> list[dict]:
    """The conversation with its image placeholder ({"type": "image"}) holding `image`, as vLLM
    takes it; a conversation without a placeholder must come with no image."""
    filled, placed = [], 0
    for message in conversation:
        content = message["content"]
        if isinstance(content, list):
            placed += sum(part["type"] == "image" for part in content)
            image_part = {"type": "image_pil", "image_pil": image}
            content = [image_part if part["type"] == "image" else part for part in content]
        filled.append(message | {"content": content})
    if placed != (image is not None):
        raise ValueError(f"a conversation with {placed} image placeholders cannot take {'an' if image else 'no'} image")
    return filled


SCORERS = {"transformers": TransformersVLMScorer, "vllm": VLLMVLMScorer}


def load_vlm_scorer(spec: ModelSpec, batch_size: int) -> TransformersVLMScorer | VLLMVLMScorer:
    """Build the VLM once per job; the registry entry's backend picks the implementation."""
    log.info("loading %s (%s) from %s with the %s backend", spec.name, spec.model_id, spec.path, spec.backend)
    return SCORERS[spec.backend](spec, batch_size)


def image_question(text: str) -> list[dict]:
    """One user message: an image, then `text`."""
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]


def image_conversation(template: PromptTemplate, **fields: str) -> list[dict]:
    """The template's system message, if it has one, then a user message of one image and the rendered text."""
    *system, user = template.render(**fields)
    return [*system, {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": user["content"]}]}]


def judge_images(
    renders: pd.DataFrame,
    scorer: TransformersVLMScorer | VLLMVLMScorer,
    template: PromptTemplate,
    journal_path: str | Path,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Score each image against its own description only (I_corr with D_c, I_adv with D_a), a batch of
    the scorer's at a time: the next batch decodes while the model scores this one. Each batch's scores
    go to the journal at `journal_path` (`images.journaled_batches`): a job killed midway scores only
    the batches it had not finished."""
    started = time.monotonic()
    records = renders.to_dict("records")
    spec = scorer.spec

    def score(batch: list[dict[str, Any]], images: list[Any]) -> list[dict[str, Any]]:
        conversations = [image_conversation(template, description=record["description"]) for record in batch]
        return scorer.score(conversations, images)

    # The images' sha256 (in the records) are in the key: a re-rendered image is scored again.
    key = ("image scores", spec.outputs, template.version)
    scores, computed = journaled_batches(
        records,
        scorer.batch_size,
        lambda record: read_rgb(record["path"]),
        score,
        journal_path,
        key,
        desc=f"judge {spec.name}",
    )
    frame = pd.DataFrame(
        [
            {
                "image_id": record["image_id"],
                "triplet_id": record["triplet_id"],
                "role": record["role"],
                "t2i": record["t2i"],
                "vlm": spec.name,
                "model_id": spec.model_id,
                "model_revision": spec.revision or "",
                "template_version": template.version,
                **score,
            }
            for record, score in zip(records, scores, strict=True)
        ]
    )
    parsed = frame["text_score"].notna() if len(frame) else pd.Series(dtype=bool)
    counters = {
        "images": len(frame),
        "mean_expected_score": round(float(frame["expected_score"].mean()), 4) if len(frame) else None,
        "text_unparsed": int((~parsed).sum()),
        "text_disagrees_with_argmax": int((parsed & (frame.get("text_score") != frame.get("argmax_score"))).sum()),
        "computed_items": computed,
        "seconds": round(time.monotonic() - started, 3),
    }
    return frame, counters
