"""How many requests one endpoint is sent at once, and how fast: as many as it answers well, found while the
run goes.

An account's rate limit is not known in advance and differs by provider, model and tier, so a fixed
number of requests in flight either leaves most of it unused or runs into a storm of 429s. Until the endpoint
first refuses (a 429 or 503), the requests in flight grow by one per good reply, doubling each round as TCP's
slow start, while replies come back well and fast (within twice the quickest reply seen: a server that queues
requests instead of refusing them slows down first). From the first refusal on, requests are paced instead:
sent no faster than `RATE_BACKOFF` of the rate the endpoint let through in the second before the refusal
(what was sent less what it refused: refusals come back at once, answers only after the reply time), a pace
that grows by `RATE_GROWTH` of itself per second of good replies and is cut so again at each later refusal
(additive increase, multiplicative decrease, on the rate). A limit of requests per second is then held just
under, whatever the reply time: at 10 s replies a limit of requests in flight, grown one request per round
trip as TCP grows its window, needs minutes to come back from a cut, while the pace needs seconds (and the
requests in flight follow from it: the pace times the reply time, up to the cap). The start and the cap are
set per model in the registry (`client: {concurrency, max_concurrency}`; the two equal: a fixed number, as
before, never paced, each request waiting out its own retries). A Retry-After, or rate-limit headers that say
nothing is left until a reset, pause every request to the endpoint until then. All threads of a job, and
every client of the same endpoint in the process, share one limiter (`limiter_for`), which also counts what
it did for the job's log.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

# What a reply says of the endpoint's load.
OK, THROTTLED, FAILED = "ok", "throttled", "failed"
# Statuses that mean "slower", not "broken".
THROTTLE_STATUSES = frozenset({429, 503})
SLOW_START_STEP = 1.0  # requests in flight added per good reply before the first refusal: x2 a round
RATE_GROWTH = 0.03  # the pace grows by this share of itself a second of good replies
RATE_BACKOFF = 0.9  # the share of the sending rate kept after a refusal: a gentle cut, held a while
RATE_WINDOW_S = 1.0  # the window the sending rate is measured over at a refusal


@dataclass
class Slot:
    """One request's place in flight; the caller says how its reply went before it leaves."""

    opened_at_decrease: int  # how many decreases had happened when it was sent
    sent_at: float
    outcome: str = FAILED
    retry_after_s: float | None = None
    wait_until_reset_s: float | None = None  # the endpoint said nothing is left until then


class AdaptiveLimit:
    """Requests in flight to one endpoint, between 1 and `cap`, starting at `start` (see the module)."""

    def __init__(self, start: int, cap: int, clock: Callable[[], float] = time.monotonic):
        if not 1 <= start <= cap:
            raise ValueError(f"concurrency must be at least 1 and at most max_concurrency, not {start} and {cap}")
        self.start, self.cap, self.clock = start, cap, clock
        self.limit = float(start)
        self.in_flight = 0
        self.paused_until = 0.0
        self.decreases = 0
        self.requests = 0
        self.throttled = 0
        self.lowest = self.highest = start
        self.quickest_s = math.inf  # the quickest good reply so far
        self.fixed = start == cap
        self.rate = math.inf  # requests a second it may send: none known until the endpoint first refuses
        self.next_send = 0.0  # when the pace lets the next request go
        self.sent: deque[float] = deque()  # when each request of the last RATE_WINDOW_S was sent
        self.refused: deque[float] = deque()  # and when each of those the endpoint refused was
        self.grown_at: float | None = None  # the last good reply: growth is per second of good replies
        self.cut_at = -math.inf  # requests sent before this may still be refused for what came before the cut
        self._ready = threading.Condition()

    @property
    def allowed(self) -> int:
        """Requests that may be in flight now."""
        return max(1, math.floor(self.limit))

    @contextmanager
    def slot(self) -> Iterator[Slot]:
        """Wait for a place in flight (and for any pause to end), hold it for one request, and take the
        reply's outcome into the limit when the request leaves."""
        with self._ready:
            while True:
                now = self.clock()
                wait = max(self.paused_until, self.next_send) - now
                if wait <= 0 and self.in_flight < self.allowed:
                    break
                self._ready.wait(timeout=wait if wait > 0 else None)
            self.in_flight += 1
            self.requests += 1
            if math.isfinite(self.rate):
                self.next_send = max(now, self.next_send) + 1 / self.rate
            self.sent.append(now)
            for times in (self.sent, self.refused):
                while times and times[0] < now - RATE_WINDOW_S:
                    times.popleft()
            slot = Slot(self.decreases, now)
        try:
            yield slot
        finally:
            with self._ready:
                self.in_flight -= 1
                self._settle(slot)
                self._ready.notify_all()

    def _settle(self, slot: Slot) -> None:
        now = self.clock()
        self.throttled += slot.outcome == THROTTLED
        if self.fixed:
            return
        if slot.outcome == OK:
            took = now - slot.sent_at
            self.quickest_s = min(self.quickest_s, took)
            since = min(1.0, now - self.grown_at) if self.grown_at is not None else 0.0
            self.grown_at = now
            if took <= 2 * self.quickest_s:
                if self.decreases == 0:
                    self.limit = min(float(self.cap), self.limit + SLOW_START_STEP)
                else:
                    self.rate *= 1 + RATE_GROWTH * since
        # Replies to requests sent before the last cut, or within a window after it (the endpoint still counts
        # what was sent before it), say nothing new: one burst cuts it once.
        elif slot.outcome == THROTTLED:
            self.refused.append(slot.sent_at)
            if slot.opened_at_decrease == self.decreases and slot.sent_at >= self.cut_at:
                self.decreases += 1
                self.cut_at = now + RATE_WINDOW_S
                if math.isinf(self.rate):  # the first: what the endpoint let through in the last window, the
                    # sent less the refused (its refusals come back at once, its answers after the reply time)
                    let_through = len(self.sent) - sum(at >= now - RATE_WINDOW_S for at in self.refused)
                    self.rate = max(1.0, let_through) / RATE_WINDOW_S
                # later windows hold pauses and retries: the pace itself is cut
                self.rate = max(1 / RATE_WINDOW_S, RATE_BACKOFF * self.rate)
            self.limit = float(self.cap)  # the pace holds the endpoint now: in flight = pace x reply time
        for wait in (slot.retry_after_s, slot.wait_until_reset_s):
            if wait is not None:
                self.paused_until = max(self.paused_until, now + wait)
        self.lowest, self.highest = min(self.lowest, self.allowed), max(self.highest, self.allowed)

    def summary(self) -> str:
        """What it did, for the job's log."""
        paced = f", sent at most {self.rate:.1f} a second" if math.isfinite(self.rate) else ""
        return (
            f"{self.requests} requests, {self.throttled} throttled (429/503); requests in flight settled at "
            f"{self.allowed} (started at {self.start}, ranged {self.lowest}-{self.highest}, cap {self.cap}){paced}"
        )


def reset_wait(headers: Mapping[str, str]) -> float | None:
    """Seconds until an endpoint that says no requests are left (`x-ratelimit-remaining-requests: 0`)
    resets them (`x-ratelimit-reset-requests`: "1s", "6m0s", "20ms" or plain seconds); None otherwise."""
    if headers.get("x-ratelimit-remaining-requests", "").strip() != "0":
        return None
    return duration_seconds(headers.get("x-ratelimit-reset-requests", ""))


def duration_seconds(text: str) -> float | None:
    """A duration as OpenAI's rate-limit headers write it ("1m30s", "250ms", "2.5s") or plain seconds."""
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    total, number = 0.0, ""
    index = 0
    while index < len(text):
        char = text[index]
        if char.isdigit() or char == ".":
            number += char
            index += 1
            continue
        unit = "ms" if text.startswith("ms", index) else char
        if unit not in units or not number:
            return None
        total += float(number) * units[unit]
        number, index = "", index + len(unit)
    return None if number else total


_LIMITS: dict[str, AdaptiveLimit] = {}
_LIMITS_LOCK = threading.Lock()


def limiter_for(endpoint: str, start: int, cap: int) -> AdaptiveLimit:
    """The process's one limiter of `endpoint` (its first caller's start and cap)."""
    with _LIMITS_LOCK:
        if endpoint not in _LIMITS:
            _LIMITS[endpoint] = AdaptiveLimit(start, cap)
        return _LIMITS[endpoint]
