"""VLM-as-judge M(T, I) through any OpenAI-compatible chat-completions endpoint (GPT-5 in the paper).

The judge sees the prompt T and the image (a base64 PNG data URL) and rates semantic correctness
only, 1 to 10, with the rubric of a versioned template (config/prompts/judge_semantic_v1.yaml).

The score: when the endpoint returns `logprobs` with `top_logprobs` for the answer, the expected
value over "1".."10" at the first answer token, renormalised over the answers among the returned
candidates (tokens that differ only by surrounding spaces count as one answer). "10" is one token
in OpenAI's tokenizers and is read directly. Where a tokenizer writes it "1" + "0" (Qwen-style, as
vLLM may serve), P("1") is split into "1" and "10" with P("0" | "1") from the second position, as
in blindspot.models.vlm_scoring (the two spellings of "10" add up); that conditional is only known when
the answer began with "1", so when it did not, the (then small) mass on "1" stays on 1. Without
logprobs the score is the first integer 1..10 written in the answer; an answer with neither is NaN
(a failure), never a guess. The answer text is kept as the Score's detail. The message content may be
text or a list of parts (their text is joined); logprob entries that cannot be read are skipped.

A reply that holds no answer is not one: empty text, a reply the provider's content filter withheld,
or one cut at the token budget (`finish_reason` "length") before a score was written (a reasoning
model can spend the whole budget thinking). It is asked again, with the client's back-off, up to
`client.max_reply_attempts` times; then the item is an `Unanswered` score (NaN, with the reason),
which neither this module's cache nor the score cache keeps, so the next run asks again. A reply
cut after its score (`max_tokens: 1` read through logprobs) is an answer. A complete answer
without a score ("I cannot tell") is the judge's answer: it is kept, and scores NaN. A reply that
is not a chat completion (a body that is not JSON, or fields of the wrong type) is "malformed" and
asked again the same way: only replies that hold an answer are cached, and a cached file that cannot
be read (cut short, or written unchecked by an older version) is asked again and overwritten.

Registry entry (a dict, or any object with these attributes):
    id           the endpoint's model name (e.g. gpt-5)
    endpoint     base URL of the API (e.g. https://api.openai.com/v1); /chat/completions is added
    api_key_env  the NAME of the environment variable that holds the key; empty key -> MetricSkipped
    revision     optional: a pinned snapshot, recorded and part of the cache key
    request      optional: fields merged into every request body (max_completion_tokens,
                 temperature, seed, logprobs, top_logprobs, reasoning_effort, logit_bias, ...);
                 a reasoning model needs reasoning_effort and a max_completion_tokens that holds
                 its reasoning and the answer (the config schema asks for both together)
    client       optional: concurrency, max_concurrency, timeout_s, max_attempts, backoff_base_s,
                 backoff_cap_s, retry_after_cap_s, max_reply_attempts

Answers are cached on disk (blindspot.models.api.cache), one JSON file per (model, revision,
template version, request settings, image sha256, prompt), written atomically, so a rerun or a
resumed shard asks the endpoint only for what it has not answered yet; before asking, a job removes
what a killed run left half-written for those entries (only those: the metric's other jobs write
theirs in the same folder).

The requests, their retries and their concurrency are blindspot.models.api.client's (as many in
flight as the endpoint answers well: blindspot.models.api.limiter), and so is the
key: it lives in memory only and is never logged, cached or put into an error message or a Score;
every string of a reply is scrubbed of it as the reply arrives, and so is every message this module
logs. A key that cannot be an HTTP header value is refused before any request, without showing it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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
from blindspot.models.api.reply import failure_detail as reply_failure_detail
from blindspot.models.vlm_scoring import SCORES, ScoreTokens, score_distribution, summarise, text_score
from blindspot.paths import PROMPTS_DIR
from blindspot.plugins import MetricSkipped, Score
from blindspot.prompts import PromptTemplate

SCORE_VERSION = 1  # bumped when a change alters its scores (`plugin_code`)

log = logging.getLogger(__name__)

TEMPLATE = PROMPTS_DIR / "judge_semantic_v1.yaml"


@dataclass(frozen=True)
class Unanswered(Score):
    """An item the judge gave no answer for after every try: NaN, never cached, asked again next run."""

    failure: str = ""  # why, one of FAILURES


def logprob_score(logprobs: Mapping[str, Any] | None) -> float | None:
    """Expected score over "1".."10" from a chat completion's `logprobs` (see the module doc),
    or None when they are absent or put no mass on any answer."""
    content, start = answer_positions(logprobs), 0  # the first answer token
    if not content:
        return None
    first = answer_logprobs(content[start])
    # A pseudo-vocabulary: ids 1..10 are the answers "1".."10", id 0 is "0" after "1".
    first_array = np.full(len(SCORES) + 1, -np.inf)
    for score in SCORES:
        first_array[score] = first.get(str(score), -np.inf)
    after_one, ten_after_one = np.full(len(SCORES) + 1, -np.inf), None
    if content[start]["token"].strip() == "1" and start + 1 < len(content):
        after_one[0] = answer_logprobs(content[start + 1]).get("0", -np.inf)
        ten_after_one = 0
    # "10" as one token and "1" + "0" are different sequences: their probabilities add up.
    tokens = ScoreTokens(single={s: s for s in SCORES}, ten_after_one=ten_after_one)
    probabilities, mass = score_distribution(first_array, after_one, tokens)
    return summarise(probabilities)[0] if mass > 0 else None


def read_score(response: Any) -> Score:
    """A Score from one chat-completion response: logprobs first, else the text, else NaN. Never
    raises: a malformed response (see response_problem) reads as an empty one."""
    choice, text = choice_text(response)
    from_logprobs = logprob_score(choice.get("logprobs"))
    if from_logprobs is not None:
        return Score(from_logprobs, text)
    from_text = text_score(text)
    return Score(float(from_text) if from_text is not None else math.nan, text)


# Why a reply holds no answer (the job's counters count each), and what to do about it.
FAILURES = {
    "malformed": "the reply is not a chat completion",
    "content_filter": "the provider's content filter withheld the reply",
    "length": "the reply was cut at the token budget before a score "
    "(raise request.max_completion_tokens or lower request.reasoning_effort)",
    "empty": "the reply was empty",
}


def reply_failure(response: Any) -> str | None:
    """Why a chat-completion response holds no answer (a key of FAILURES), or None when it holds one."""
    failure = no_answer(response)
    if failure in ("malformed", "content_filter"):
        return failure
    if not stopped(response) and math.isnan(read_score(response).raw):
        return "length"
    return failure  # "empty", or None: an answer


def failure_detail(response: Any, failure: str) -> str:
    """The failure in words, with what the response tells about it (its token use, text or refusal)."""
    return reply_failure_detail(response, failure, FAILURES)


def key_not_set(name: str, key_env: str) -> MetricSkipped:
    """Why a judge without its key is skipped (the variable's name, never a value)."""
    return MetricSkipped(f"{name}: the API key variable {key_env} is not set or empty; skipping this metric")


def _field(entry: Any, key: str, default: Any = None) -> Any:
    value = entry.get(key, default) if isinstance(entry, Mapping) else getattr(entry, key, default)
    return default if value is None else value


class APIJudgeMetric:
    """M(T, I) from a VLM judge behind an OpenAI-compatible endpoint; see the module doc."""

    bounds = (1.0, 10.0)

    def __init__(
        self,
        entry: Mapping[str, Any] | Any,
        cache_dir: str | Path,
        name: str | None = None,
        template: PromptTemplate | str | Path = TEMPLATE,
    ):
        self.model_id = _field(entry, "id") or _field(entry, "path")
        self.endpoint = _field(entry, "endpoint")
        key_env = _field(entry, "api_key_env")
        if not self.model_id or not self.endpoint or not key_env:
            raise ValueError("an API judge's registry entry needs 'id', 'endpoint' and 'api_key_env'")
        self.name = name or _field(entry, "name") or self.model_id
        self.revision = _field(entry, "revision", "")
        self.request_settings = dict(_field(entry, "request", {}))
        settings = ClientSettings(**_field(entry, "client", {}))
        self.template = template if isinstance(template, PromptTemplate) else PromptTemplate.load(template)
        key = os.environ.get(key_env, "").strip()
        if not key:
            raise key_not_set(self.name, key_env)
        self.client = ChatCompletionsClient(self.name, self.endpoint, self.model_id, key, key_env, settings)
        self.batch_size = settings.batch  # images a call scores: rounds of requests in flight, not the config's
        self.cache = ReplyCache(cache_dir, self.client.clean)
        self.replies = AnsweredReplies(self.client, self.cache, reply_failure, FAILURES)
        self.cache_hits = 0

    def __repr__(self) -> str:
        return f"APIJudgeMetric(name={self.name!r}, model_id={self.model_id!r}, endpoint={self.endpoint!r})"

    def cache_key(self, prompt: str, image_sha256: str) -> str:
        return stable_id(
            "api_judge/v1",
            self.model_id,
            self.revision,
            self.template.version,
            self.request_settings,
            image_sha256,
            prompt,
        )

    def body(self, prompt: str, png: bytes) -> dict[str, Any]:
        """The chat-completions request for one (prompt, image) pair."""
        *system, user = self.template.render(prompt=prompt)
        messages = [
            *system,
            {
                "role": "user",
                "content": [
                    image_part(png),
                    {"type": "text", "text": user["content"]},
                ],
            },
        ]
        return {**self.request_settings, "model": self.model_id, "messages": messages}

    def _judge(self, prompt: str, png: bytes, key: str) -> Score:
        """Ask until a reply holds an answer, which is cached; after the last try, an Unanswered score."""
        record = {
            "model_id": self.model_id,
            "revision": self.revision,
            "template_version": self.template.version,
            "request": self.request_settings,
            "image_sha256": hashlib.sha256(png).hexdigest(),
            "prompt": prompt,
        }
        asked = self.replies.ask(self.body(prompt, png), record, key)
        if asked.response is None:
            return Unanswered(math.nan, asked.detail, asked.failure or "")
        return read_score(asked.response)

    def _cached(self, key: str) -> Score | None:
        """The answer cached under `key`, or None (none, or one that cannot be used: asked again)."""
        response = self.replies.cached(key)
        return None if response is None else read_score(response)

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        """One score per (prompt, image) pair, in order; cached answers are not asked again."""
        if len(prompts) != len(images):
            raise ValueError(f"{len(prompts)} prompts but {len(images)} images")
        scores: list[Score | None] = [None] * len(prompts)
        todo = []
        for i, (prompt, image) in enumerate(zip(prompts, images, strict=True)):
            png = image_png(image)
            key = self.cache_key(prompt, hashlib.sha256(png).hexdigest())
            cached = self._cached(key)
            if cached is not None:
                scores[i] = cached
                self.cache_hits += 1
            else:
                todo.append((i, prompt, png, key))
        if todo:
            stale = self.cache.remove_stale_temps(key for *_, key in todo)
            if stale:
                log.info("%s: removed %d temporary file(s) a killed run left in the cache", self.name, len(stale))
            # Each answer is cached as it arrives, so after a failure those received are kept.
            tasks = [(prompt, png, key) for _, prompt, png, key in todo]
            answers = self.client.run_all(
                self._judge, tasks, desc=f"judge {self.name}", unit="image", thread_name_prefix="api-judge"
            )
            for (i, *_), answer in zip(todo, answers, strict=True):
                scores[i] = answer
        unanswered = sum(isinstance(score, Unanswered) for score in scores)
        log.info(
            "%s: %d scored, %d from the cache, %d without an answer, %d HTTP requests",
            self.name,
            len(scores) - unanswered,
            self.cache_hits,
            unanswered,
            self.client.requests_sent,
        )
        return scores  # type: ignore[return-value]


def api_judge_plugin(
    spec: Any, batch_size: int, cache_dir: str | Path, template: str | Path = TEMPLATE
) -> APIJudgeMetric:
    """The `api_judge` plug-in: the registry entry (backend openai_api) is the endpoint; its raw
    responses are kept under the metric's cache folder."""
    del batch_size  # requests run concurrently, as the entry's `client.concurrency` says
    return APIJudgeMetric(spec, Path(cache_dir) / "responses", name=spec.name, template=template)
