"""Reading an OpenAI-compatible chat-completions reply, shared by every model asked through
`models.api.client`: whether the reply is a chat completion at all, its first choice's text, why it
holds no answer in words, the candidates and their log-probabilities at one position of its
`logprobs`, and an image as the PNG data URL the request carries.

Nothing here raises on a reply: a malformed one (`response_problem` says why) reads as an empty one.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping
from typing import Any


def kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def response_problem(response: Any) -> str:
    """Why a response is not a chat completion that can be read (the field and what it holds), or ""
    when it is one. Checked before anything is cached; no choices at all is an empty reply, not this."""
    if not isinstance(response, Mapping):
        return f"the response is of type {kind(response)}, not an object"
    choices = response.get("choices")
    if not choices:
        return ""
    if not isinstance(choices, list):
        return f"choices is of type {kind(choices)}, not a list"
    choice = choices[0]
    if not isinstance(choice, Mapping):
        return f"choices[0] is of type {kind(choice)}, not an object"
    message = choice.get("message")
    if message is not None and not isinstance(message, Mapping):
        return f"choices[0].message is of type {kind(message)}, not an object"
    fields = {
        "message.content": (message or {}).get("content"),
        "message.refusal": (message or {}).get("refusal"),
        "finish_reason": choice.get("finish_reason"),
        "logprobs": choice.get("logprobs"),
        "usage": response.get("usage"),
    }
    allowed = {"message.content": (str, list), "logprobs": Mapping, "usage": Mapping}
    for name, value in fields.items():
        if value is not None and not isinstance(value, allowed.get(name, str)):
            return f"{'' if name == 'usage' else 'choices[0].'}{name} is of type {kind(value)}"
    parts = fields["message.content"]
    if isinstance(parts, list) and not all(isinstance(part, Mapping) for part in parts):
        return "choices[0].message.content is a list with items that are not content parts"
    return ""


def choice_text(response: Any) -> tuple[Mapping[str, Any], str]:
    """The first choice and its text (a list of content parts: their text joined); empty when absent
    or when the response is malformed (response_problem says why)."""
    if response_problem(response) or not response.get("choices"):
        return {}, ""
    choice = response["choices"][0]
    content = (choice.get("message") or {}).get("content") or ""
    if isinstance(content, list):
        content = "".join(part["text"] for part in content if isinstance(part.get("text"), str))
    return choice, content.strip()


def no_answer(response: Any) -> str | None:
    """Why a reply holds no answer at all ("malformed", "content_filter" or "empty"), or None: what every
    model asked through the API client checks first."""
    if response_problem(response):
        return "malformed"
    choice, text = choice_text(response)
    if choice.get("finish_reason") == "content_filter":
        return "content_filter"
    return None if text else "empty"


def stopped(response: Any) -> bool:
    """Whether a reply ended on its own, not cut off at its token budget (`finish_reason` "length")."""
    return choice_text(response)[0].get("finish_reason") != "length"


def failure_detail(response: Any, failure: str, failures: Mapping[str, str]) -> str:
    """Why a reply holds no answer in words: the failure (a key of the caller's `failures`, which says it
    in words) with what the reply tells about it (its token use, text or refusal; or why it is malformed)."""
    problem = response_problem(response)
    if problem:
        return f"{failure}: {failures[failure]} ({problem})"
    choice, text = choice_text(response)
    usage = response.get("usage") or {}
    details = usage.get("completion_tokens_details")
    facts = [f"finish_reason {choice.get('finish_reason')!r}"]
    if isinstance(usage.get("completion_tokens"), int):
        facts.append(f"{usage['completion_tokens']} completion tokens")
    reasoning = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    if isinstance(reasoning, int) and reasoning:
        facts.append(f"{reasoning} of them reasoning")
    refusal = (choice.get("message") or {}).get("refusal")
    facts += [f"{what} {value[:100]!r}" for what, value in (("text", text), ("refusal", refusal)) if value]
    return f"{failure}: {failures[failure]} ({', '.join(facts)})"


def logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values)) if top > -math.inf else -math.inf


def is_logprob(value: Any) -> bool:
    """A log-probability as a reply may hold one: a number <= 0, -inf included (NaN and bools are not)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value <= 0


def answer_logprobs(position: Mapping[str, Any]) -> dict[str, float]:
    """{answer text: log-probability} at one position, candidates with the same stripped text merged;
    candidates without a string token and a log-probability (<= 0) are skipped."""
    candidates = position.get("top_logprobs")
    if not isinstance(candidates, list) or not candidates:
        candidates = [position]
    grouped: dict[str, list[float]] = {}
    for candidate in candidates:
        token = candidate.get("token") if isinstance(candidate, Mapping) else None
        logprob = candidate.get("logprob") if isinstance(candidate, Mapping) else None
        if isinstance(token, str) and is_logprob(logprob):
            grouped.setdefault(token.strip(), []).append(float(logprob))
    return {token: logsumexp(values) for token, values in grouped.items()}


def answer_positions(logprobs: Any) -> list[Mapping[str, Any]]:
    """The positions of a choice's `logprobs` from the first answer token on (leading whitespace-only
    tokens are not the answer yet); empty when there are none that can be read."""
    positions = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not isinstance(positions, list):
        return []
    content = [p for p in positions if isinstance(p, Mapping) and isinstance(p.get("token"), str)]
    start = next((i for i, p in enumerate(content) if p["token"].strip()), None)
    return [] if start is None else content[start:]


def image_png(image: Any) -> bytes:
    """The image (PIL or a path) as PNG bytes, in RGB: what a request is sent and a cache hashes."""
    from PIL import Image

    if not isinstance(image, Image.Image):
        with Image.open(image) as opened:
            image = opened.convert("RGB")
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def image_part(png: bytes) -> dict[str, Any]:
    """A chat message's content part that shows the PNG (a base64 data URL)."""
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode("ascii")}}
