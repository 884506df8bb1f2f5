"""A client for one model behind an OpenAI-compatible chat-completions endpoint: its settings, the
requests (timeouts, retries with back-off, Retry-After), the endpoint's error messages, the key kept
out of everything that leaves it, and a pool of worker threads that sends requests concurrently.

Connection errors, timeouts, 429 and 5xx are retried with back-off, honouring a Retry-After header
up to a cap; any other 4xx is refused at once, with the endpoint's own message. A 200 reply whose
body cannot be read as JSON is a MalformedReply, which the caller may ask again. A job planned to
send N requests (`ClientSettings.planned_requests`, from `blindspot plan`'s bill) sends no more than
N x max_attempts, retries and asks again included: the one after is not sent (RequestsExhausted).

The key lives in memory only: it is never logged, cached or put into an error message. Every string
of a reply is scrubbed of it as the reply arrives, in each form a server can echo it in (raw,
JSON-escaped, URL-encoded), and so is every message that leaves this module; callers scrub theirs
with `scrub` and what they store with `clean`. A key that cannot be an HTTP header value (a line
break, a control character, a character outside Latin-1) is refused before any request, without
showing it.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import re
import threading
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, quote_plus

import requests
from tqdm import tqdm

from blindspot.models.api.limiter import OK, THROTTLE_STATUSES, THROTTLED, limiter_for, reset_wait

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429}) | frozenset(range(500, 600))

_MAX_DEPTH = 64  # a chat completion nests about six levels; deeper is no reply to read

Result = TypeVar("Result")


class APIError(RuntimeError):
    """The endpoint refused a request (a 4xx other than 429) or stayed unreachable after all retries."""


class MalformedReply(ValueError):
    """A 200 reply whose body cannot be read as JSON: an item without an answer, not a failed job."""


class RequestsExhausted(ValueError):
    """The job has sent every request its plan allows (`ClientSettings.allowance`): it stops, in one line."""


# Rounds of requests in flight a caller hands over at once (`ClientSettings.batch`): a batch waits for its slowest
# reply, so its tail idles the endpoint once a batch, not once a round (at 10 s replies, a reply time a round).
BATCH_ROUNDS = 16


@dataclass(frozen=True)
class ClientSettings:
    concurrency: int = 4  # requests in flight at the start (`models.api.limiter`)
    # The most in flight however well the endpoint answers (None: 64, or `concurrency` if more); equal to
    # `concurrency`, a fixed number.
    max_concurrency: int | None = None
    timeout_s: float = 120.0  # per request (connect and read)
    max_attempts: int = 6  # the first try included
    backoff_base_s: float = 1.0  # the first retry waits about this long, doubling after
    backoff_cap_s: float = 60.0  # no back-off wait is longer
    retry_after_cap_s: float = 300.0  # the longest Retry-After honoured
    # Tries per item while replies hold no answer; fewer than max_attempts, since a budget too small
    # for the reasoning fails the same way each time and every try is billed.
    max_reply_attempts: int = 3
    # The requests the job is planned to send (`blindspot plan`'s bill), set by the workflow, not in the
    # config: it sends no more than `allowance`, retries included. None: no limit.
    planned_requests: int | None = None

    def __post_init__(self) -> None:
        if min(self.concurrency, self.max_attempts, self.max_reply_attempts) < 1:
            raise ValueError(f"concurrency, max_attempts and max_reply_attempts must be at least 1, not {self}")
        if self.cap < self.concurrency:
            raise ValueError(f"max_concurrency must be at least concurrency, not {self}")

    @property
    def cap(self) -> int:
        """The most requests in flight."""
        return max(64, self.concurrency) if self.max_concurrency is None else self.max_concurrency

    @property
    def batch(self) -> int:
        """The items a caller hands the client at once: BATCH_ROUNDS rounds of the most requests in flight."""
        return BATCH_ROUNDS * self.cap

    @property
    def allowance(self) -> int | None:
        """The most HTTP requests the client sends: every planned request tried `max_attempts` times."""
        return None if self.planned_requests is None else self.planned_requests * self.max_attempts


def with_planned_requests(model: dict[str, Any], planned_requests: int | None) -> dict[str, Any]:
    """A model's registry entry whose client sends no more than its job's `planned_requests` (set by the
    workflow, never in the config); an entry without `client` gets the defaults', as `ClientSettings` does."""
    if planned_requests is None:
        return model
    return model | {"client": model.get("client", {}) | {"planned_requests": planned_requests}}


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


def header_problem(key: str) -> str:
    """Why `key` cannot be sent in an HTTP header (which character, where; never the key), or ""."""
    for position, char in enumerate(key):
        if ord(char) > 0xFF:
            return f"a character outside Latin-1 (U+{ord(char):04X}) at position {position}"
        if unicodedata.category(char) == "Cc" and char != "\t":
            return f"a control character or line break (U+{ord(char):04X}) at position {position}"
    return ""


def key_pattern(key: str) -> re.Pattern[str]:
    """Every form in which a server can echo `key` back: raw, JSON-escaped (with or without
    ASCII-only escapes and an escaped "/") and URL-encoded (UTF-8 or Latin-1, with "+" for a
    space or not, upper- or lower-case hex)."""
    escaped = {json.dumps(key, ensure_ascii=ascii_only)[1:-1] for ascii_only in (True, False)}
    escaped |= {form.replace("/", "\\/") for form in escaped}
    encoded = {
        quote_form(key, safe=safe, encoding=encoding)
        for quote_form in (quote, quote_plus)
        for safe in ("", "/")
        for encoding in ("utf-8", "latin-1")
    }
    encoded |= {re.sub("%[0-9A-F]{2}", lambda hex_byte: hex_byte[0].lower(), form) for form in encoded}
    forms = sorted({key} | escaped | encoded, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, forms)))


class ChatCompletionsClient:
    """Requests to one model at an OpenAI-compatible endpoint's /chat/completions; see the module doc.
    `name` (who asks) opens its log lines and errors; `key_env` names the key's variable in them."""

    def __init__(self, name: str, endpoint: str, model_id: str, key: str, key_env: str, settings: ClientSettings):
        self.name, self.model_id, self.settings = name, model_id, settings
        self.url = endpoint.rstrip("/") + "/chat/completions"
        unsendable = header_problem(key)
        if unsendable:
            raise ValueError(
                f"{name}: the API key in {key_env} cannot be sent as an HTTP header: it holds "
                f"{unsendable}; set the variable to the key alone"
            )
        self._key = key
        self._key_forms = key_pattern(key)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._sessions: list[requests.Session] = []
        self.requests_sent = 0  # HTTP requests, retries included
        # shared by every client of this endpoint in the process
        self.limit = limiter_for(self.url, settings.concurrency, settings.cap)

    def scrub(self, text: str) -> str:
        """Text that leaves this client, with the key (should a server echo it) replaced in every form."""
        return self._key_forms.sub("<redacted>", text)

    def clean(self, value: Any, depth: int = 0) -> Any:
        """A reply's JSON with every string (keys too) scrubbed of the key, and lone surrogates (a
        "\\ud800" escape, which no parquet file can hold) replaced; ValueError past _MAX_DEPTH."""
        if depth > _MAX_DEPTH:
            raise ValueError(f"nested deeper than {_MAX_DEPTH} levels")
        if isinstance(value, str):
            return self.scrub(value.encode("utf-8", "replace").decode("utf-8"))
        if isinstance(value, list):
            return [self.clean(item, depth + 1) for item in value]
        if isinstance(value, dict):
            return {self.clean(key, depth + 1): self.clean(item, depth + 1) for key, item in value.items()}
        return value

    def _reply(self, body: str) -> Any:
        """A 200 reply's body as JSON, cleaned (see clean); MalformedReply when it cannot be read."""
        try:
            return self.clean(json.loads(body))
        except (ValueError, RecursionError) as error:  # not JSON, too deep, or an integer past the digit limit
            reason = f"HTTP 200 with a body that is not readable JSON ({str(error)[:100]}): {body[:200]!r}"
            raise MalformedReply(self.scrub(reason)) from None

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers["Authorization"] = f"Bearer {self._key}"
            with self._lock:
                self._sessions.append(session)
        return session

    def close(self) -> None:
        """Close the HTTP sessions (one per worker thread); later requests open new ones."""
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        self._local = threading.local()

    def post(self, body: dict[str, Any], sleep: Callable[[float], None] = time.sleep) -> Any:
        """POST one request, retrying connection errors, timeouts, 429 and 5xx with back-off; the reply's
        JSON, cleaned of the key, or MalformedReply."""
        settings = self.settings
        for attempt in range(1, settings.max_attempts + 1):
            retry_after = None
            with self._lock:
                if settings.allowance is not None and self.requests_sent >= settings.allowance:
                    raise RequestsExhausted(self._exhausted())
                self.requests_sent += 1
            with self.limit.slot() as slot:
                try:
                    response = self._session().post(self.url, json=body, timeout=settings.timeout_s)
                except (
                    requests.ConnectionError,
                    requests.Timeout,
                    requests.exceptions.ChunkedEncodingError,
                    requests.exceptions.ContentDecodingError,
                ) as error:
                    response, reason = None, f"{type(error).__name__}: {error}"
                else:
                    slot.wait_until_reset_s = reset_wait(response.headers)
                    if response.status_code == 200:
                        slot.outcome = OK
                    elif response.status_code in THROTTLE_STATUSES:
                        slot.outcome = THROTTLED
                        slot.retry_after_s = retry_after_seconds(response.headers.get("Retry-After"))
            if response is not None:
                if response.status_code == 200:
                    return self._reply(response.text)
                if response.status_code in RETRY_STATUSES:
                    reason = f"HTTP {response.status_code}: {error_message(response)}"
                    retry_after = retry_after_seconds(response.headers.get("Retry-After"))
                else:
                    raise APIError(
                        self.scrub(
                            f"{self.name}: {self.url} refused the request for model '{self.model_id}' with "
                            f"HTTP {response.status_code}: {error_message(response)}"
                        )
                    )
            if attempt == settings.max_attempts:
                break
            wait = backoff_delay(attempt - 1, settings.backoff_base_s, settings.backoff_cap_s)
            if retry_after is not None:  # the endpoint said when: that, not a back-off that grows per try
                wait = min(retry_after, settings.retry_after_cap_s) * (1 + random.random() / 10)
            log.warning(
                "%s: %s failed (%s); retry %d of %d in %.1f s",
                self.name,
                self.url,
                self.scrub(reason),
                attempt,
                settings.max_attempts - 1,
                wait,
            )
            sleep(wait)
        raise APIError(
            self.scrub(f"{self.name}: {self.url} failed {settings.max_attempts} times; the last error: {reason}")
        )

    def _exhausted(self) -> str:
        settings = self.settings
        return (
            f"{self.name}: stopped before request {settings.allowance + 1}: the plan allows this job "
            f"{settings.planned_requests} requests x client.max_attempts {settings.max_attempts} = "
            f"{settings.allowance}, retries included (raise models.{self.name}.client.max_attempts to allow "
            "more, after reading in this log why so many were retried)"
        )

    def run_all(
        self,
        work: Callable[..., Result],
        tasks: Sequence[tuple[Any, ...]],
        desc: str,
        unit: str,
        thread_name_prefix: str,
    ) -> list[Result]:
        """`work(*task)` for every task on worker threads that share this client, as many requests in
        flight as the endpoint's limiter allows, with a progress bar (`desc`, counting `unit`s); the
        results in the tasks' order. The first failure is raised once the running tasks end; the others
        are cancelled. What the limiter did goes to the log."""
        results = []
        with (
            ThreadPoolExecutor(self.settings.cap, thread_name_prefix=thread_name_prefix) as pool,
            tqdm(total=len(tasks), desc=desc, unit=unit) as progress,
        ):
            futures = [pool.submit(work, *task) for task in tasks]
            try:
                for future in futures:
                    results.append(future.result())
                    progress.update()
            finally:
                pool.shutdown(cancel_futures=True)  # after a failure, what has not started never starts
                self.close()
                log.info("%s: %s", self.name, self.limit.summary())
        return results
