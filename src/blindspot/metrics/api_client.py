"""An OpenAI-compatible endpoint's client settings, and how its errors and retries are read: the
back-off between tries, a Retry-After header, the endpoint's own error message."""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import requests

RETRY_STATUSES = frozenset({429}) | frozenset(range(500, 600))


class APIJudgeError(RuntimeError):
    """The endpoint refused a request (a 4xx other than 429) or stayed unreachable after all retries."""


class MalformedReply(ValueError):
    """A 200 reply whose body cannot be read as JSON: an item without an answer, not a failed job."""


@dataclass(frozen=True)
class ClientSettings:
    concurrency: int = 4  # requests in flight at once
    timeout_s: float = 120.0  # per request (connect and read)
    max_attempts: int = 6  # the first try included
    backoff_base_s: float = 1.0  # the first retry waits about this long, doubling after
    backoff_cap_s: float = 60.0  # no back-off wait is longer
    retry_after_cap_s: float = 300.0  # the longest Retry-After honoured
    # Tries per item while replies hold no answer; fewer than max_attempts, since a budget too small
    # for the reasoning fails the same way each time and every try is billed.
    max_reply_attempts: int = 3

    def __post_init__(self) -> None:
        if min(self.concurrency, self.max_attempts, self.max_reply_attempts) < 1:
            raise ValueError(f"concurrency, max_attempts and max_reply_attempts must be at least 1, not {self}")


def backoff_delay(retry: int, base_s: float, cap_s: float, rng: Callable[[], float] = random.random) -> float:
    """Seconds to wait before retry number `retry` (0 for the first): "equal jitter", half of the
    capped exponential step fixed and half random, so waits grow and spread but never vanish."""
    step = min(cap_s, base_s * 2.0**retry)
    return step / 2 + rng() * step / 2


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """The wait a Retry-After header asks for (seconds or an HTTP date), None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    except (TypeError, ValueError, OverflowError, IndexError):
        return None


def error_message(response: requests.Response) -> str:
    """The endpoint's own error message (OpenAI's error.message, FastAPI's detail) or the body's start."""
    try:
        payload = response.json()
    except (ValueError, RecursionError):  # not JSON, or nested past the recursion limit
        return response.text[:300].strip() or response.reason
    if isinstance(payload, Mapping):
        error = payload.get("error")
        if isinstance(error, Mapping) and error.get("message"):
            return _start(error["message"])
        for key in ("detail", "message", "error"):
            if payload.get(key):
                return _start(payload[key])
    return _start(payload)


def _start(value: object) -> str:
    """The first 300 characters of a value from an error body, whatever its depth or size."""
    if isinstance(value, str):
        return value[:300]
    try:
        return json.dumps(value)[:300]
    except RecursionError:
        return f"(a {type(value).__name__} nested too deeply to show)"
