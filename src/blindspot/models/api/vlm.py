"""A VLM behind an OpenAI-compatible chat-completions endpoint (backend `openai_api`: OpenAI's,
Gemini's, Anthropic's, a vLLM server's) answering HumbleBench's questions with the interface of the
local VLMs (`choose`, `tokenizer`, `batch_size`, `spec`), so `humblebench.answers` asks it as it asks them.

Two readings, as for a local model. The text: the reply's text, read by the same parser. The letters:
an API has no logits, but where the endpoint returns `logprobs` with `top_logprobs` (the entry's
`request` asks for them: `logprobs: true, top_logprobs: 20`), each option letter's probability at the
first answer token, from the returned candidates (tokens that differ only by surrounding spaces count as
one; a letter not among them has 0). Where the endpoint returns none, or no letter is among the
candidates, the answer has no letter distribution (NaN) and its letter reading is the text's
(`humblebench.answers`): the tables' `logits` reading of such a model is its text reading.

The request: the question's conversation with the image as a PNG data URL, the entry's `request` merged
in, and `max_tokens` the job's answer budget unless the request sets `max_tokens` or
`max_completion_tokens` (a reasoning model needs a budget for its reasoning).

Every reply that holds an answer is cached on disk (`models.api.cache`), one file per (model, revision,
request with the image's sha256 in place of the image), before the next is read, so a rerun or a killed
job asks only what it has no answer to; a request a batch holds twice (the Noise settings show every
question one image) is sent once. A reply without one (empty, withheld by a content filter, or not
a chat completion) is asked again up to `client.max_reply_attempts` times; then the question's answer is
empty text (it names no option), counted, and not cached: the next run asks it again.

Requests, retries, concurrency, the job's request allowance and the key are `models.api.client`'s: the
key is read from the variable the entry names, lives in memory only, and is never logged or cached.

A batch (the questions whose images are made together and whose answers are journaled together) is
`client.BATCH_ROUNDS` times as many questions as the client may have in flight, `client.max_concurrency`
(`ClientSettings.cap`): a batch waits for its slowest reply before the next is sent, so at 10 s replies a
batch of one round in flight would leave the endpoint idle for a reply time in every round, and the adaptive
limiter (`models.api.limiter`) is never capped by the batch; `humblebench.batch_size` is the local models'.
The batch is not part of what is asked: every reply is cached as it arrives, so a killed job pays for none
twice.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from blindspot.io import stable_id
from blindspot.models.api.cache import AnsweredReplies, ReplyCache
from blindspot.models.api.client import ChatCompletionsClient, ClientSettings
from blindspot.models.api.reply import (
    answer_logprobs,
    answer_positions,
    choice_text,
    image_part,
    image_png,
    no_answer,
    stopped,
)
from blindspot.models.spec import ModelSpec
from blindspot.models.vlm_scoring import SCORERS, load_vlm_scorer

log = logging.getLogger(__name__)

ANSWER_VERSION = 1  # in every cache key: bumped when a change alters what is asked

# Why a reply holds no answer (the job counts each).
FAILURES = {
    "malformed": "the reply is not a chat completion",
    "content_filter": "the provider's content filter withheld the reply",
    "empty": "the reply holds no text",
}


class LetterTokens:
    """An API's tokens are the text it returns: each option letter is its own candidate, by its text."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[str]:
        del add_special_tokens
        return [text]


def letter_probabilities(response: Any, candidates: list[str]) -> list[float]:
    """Each candidate letter's probability at the reply's first answer token, from its `top_logprobs`
    (0 for a letter not among them); all NaN when the reply has none, or none of the letters."""
    choice, _ = choice_text(response)
    positions = answer_positions(choice.get("logprobs"))
    found = answer_logprobs(positions[0]) if positions else {}
    probabilities = [math.exp(found[letter]) if letter in found else 0.0 for letter in candidates]
    return probabilities if sum(probabilities) > 0 else [math.nan] * len(candidates)


def reply_failure(response: Any) -> str | None:
    """Why a reply holds no answer (a key of FAILURES), or None when it holds one."""
    return no_answer(response)


class APIVLM:
    """HumbleBench's answers from a VLM at an endpoint; see the module doc."""

    def __init__(self, spec: ModelSpec, batch_size: int | None, cache_dir: str | Path):
        if not spec.endpoint or not spec.api_key_env:
            raise ValueError(f"{spec.name}: an API VLM's registry entry needs 'endpoint' and 'api_key_env'")
        key = os.environ.get(spec.api_key_env, "").strip()
        if not key:
            raise ValueError(
                f"{spec.name}: the API key variable {spec.api_key_env} is not set or empty; set it "
                "where the job runs (the submit host)"
            )
        del batch_size  # a local model's; an endpoint's is rounds of as many as its client may have in flight
        self.spec, self.tokenizer = spec, LetterTokens()
        self.request = dict(spec.request)
        settings = ClientSettings(**spec.client)
        self.client = ChatCompletionsClient(spec.name, spec.endpoint, spec.path, key, spec.api_key_env, settings)
        self.batch_size = settings.batch
        self.cache = ReplyCache(cache_dir, self.client.clean)
        self.replies = AnsweredReplies(self.client, self.cache, reply_failure, FAILURES)
        self.cache_hits, self.unanswered = 0, 0

    def __repr__(self) -> str:
        return f"APIVLM(name={self.spec.name!r}, model_id={self.spec.path!r}, endpoint={self.spec.endpoint!r})"

    def body(self, conversation: list[dict], image: Mapping[str, Any], max_new_tokens: int) -> dict[str, Any]:
        """The chat-completions request: the conversation with `image` (a content part) in its placeholder."""
        messages = [
            message | {"content": [image if part["type"] == "image" else part for part in message["content"]]}
            if isinstance(message["content"], list)
            else message
            for message in conversation
        ]
        budget = {} if {"max_tokens", "max_completion_tokens"} & set(self.request) else {"max_tokens": max_new_tokens}
        return {**budget, **self.request, "model": self.spec.path, "messages": messages}

    def cache_key(self, conversation: list[dict], image_sha256: str, max_new_tokens: int) -> str:
        """The request with the image's sha256 in place of the image, with the model's revision."""
        keyed = self.body(conversation, {"type": "image_sha256", "sha256": image_sha256}, max_new_tokens)
        return stable_id("api_vlm", ANSWER_VERSION, self.spec.revision or "", keyed)

    def choose(
        self,
        conversations: list[list[dict]],
        images: list[Any],
        candidates: list[str],
        max_new_tokens: int,
        decoding: Any = None,
        seeds: list[int] | None = None,
    ) -> list[tuple[list[float], str, bool]]:
        """As the local VLMs' `choose`: for each conversation, the candidate letters' probabilities at the
        first answer token (NaN without logprobs), the answer's text and whether it ended on its own (not
        cut at the token budget: `finish_reason` other than "length"). Cached replies are not asked again.
        An endpoint decodes as the entry's `request` says (its temperature), not as `decoding`."""
        del decoding, seeds
        replies: list[Any] = [None] * len(conversations)
        todo: dict[str, tuple[dict, dict, str]] = {}  # by cache key: a request the batch holds twice is sent once
        waiting: list[tuple[int, str]] = []
        for i, (conversation, image) in enumerate(zip(conversations, images, strict=True)):
            png = image_png(image)
            sha = hashlib.sha256(png).hexdigest()
            key = self.cache_key(conversation, sha, max_new_tokens)
            replies[i] = self.replies.cached(key)
            if replies[i] is not None:
                self.cache_hits += 1
                continue
            waiting.append((i, key))
            if key in todo:
                continue
            body = self.body(conversation, image_part(png), max_new_tokens)
            # What the reply answers, the image by its sha256 (a cached file holds no image).
            asked = self.body(conversation, {"type": "image_sha256", "sha256": sha}, max_new_tokens)
            record = {"model_id": self.spec.path, "revision": self.spec.revision or "", "request": asked}
            todo[key] = (body, record, key)
        if todo:
            stale = self.cache.remove_stale_temps(todo)
            if stale:
                log.info("%s: removed %d temporary file(s) a killed run left in the cache", self.spec.name, len(stale))
            answers = self.client.run_all(
                self.replies.ask,
                list(todo.values()),
                desc=f"ask {self.spec.name}",
                unit="question",
                thread_name_prefix="api-vlm",
            )
            by_key = dict(zip(todo, answers, strict=True))
            for i, key in waiting:
                replies[i] = by_key[key].response
        self.unanswered += sum(reply is None for reply in replies)
        log.info(
            "%s: %d asked, %d from the cache so far, %d without an answer so far, %d HTTP requests so far",
            self.spec.name,
            len(todo),
            self.cache_hits,
            self.unanswered,
            self.client.requests_sent,
        )
        return [
            (letter_probabilities(reply, candidates), choice_text(reply)[1], stopped(reply))
            if reply is not None
            else ([math.nan] * len(candidates), "", True)
            for reply in replies
        ]


def _local(spec: ModelSpec, batch_size: int | None, cache_dir: str | Path) -> Any:
    if batch_size is None:
        raise ValueError(f"{spec.name}: a local VLM needs a batch size (humblebench.batch_size)")
    del cache_dir  # local weights: the job's journal is their only record
    return load_vlm_scorer(spec, batch_size)


# The VLMs that answer HumbleBench, by backend: local weights (`vlm_scoring.SCORERS`) and endpoints.
ANSWERERS: dict[str, Callable[[ModelSpec, int | None, str | Path], Any]] = {
    **dict.fromkeys(SCORERS, _local),
    "openai_api": APIVLM,
}


def load_answerer(spec: ModelSpec, batch_size: int | None, cache_dir: str | Path) -> Any:
    """The VLM that answers HumbleBench, built once per job; its backend picks it (`ANSWERERS`).
    `batch_size` is a local model's (an endpoint's is its client's); `cache_dir` holds an endpoint's replies."""
    return ANSWERERS[spec.backend](spec, batch_size, cache_dir)
