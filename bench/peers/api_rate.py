"""The API client against an endpoint that enforces a rate limit the way providers do: the adaptive
limit (`blindspot.models.api.limiter`) beside fixed concurrency 4 and 32, the same requests each.

The endpoint is a local OpenAI-compatible server on 127.0.0.1 (`RateLimitedServer`): it allows
`RATE` requests per second and `IN_FLIGHT` at once, answers a request beyond either with a 429 and a
Retry-After of the time until it would be allowed, and answers the others like a model, after
`DELAY_S`. Each arm reports the requests per second it sustained (allowed by the server between the
end of its first second and the start of its last, so that neither the ramp nor the drain counts) as a
share of the limit, the 429s
it received and the items that failed after all retries. The goals (issue 35): the adaptive arm
sustains at least 0.9 of the limit with no item failed, takes fewer 429s than fixed 32, and is
faster than fixed 4.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from timing import Row

from blindspot.models.api.client import APIError, ChatCompletionsClient, ClientSettings

RATE = 40.0  # requests per second
IN_FLIGHT = 16
DELAY_S = 0.25  # a reply's time once allowed: fixed 4 can reach 16 requests per second at most
REQUESTS = 400
GOAL_SHARE = 0.9
REPLY = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "7"}, "finish_reason": "stop"}]}


class RateLimitedServer(ThreadingHTTPServer):
    """An OpenAI-compatible /chat/completions on 127.0.0.1 that allows `rate` requests per second
    (over a sliding second) and `in_flight` at once; it counts what it answered."""

    daemon_threads = True

    def __init__(self, rate: float, in_flight: int, delay_s: float):
        self.rate, self.in_flight_limit, self.delay_s = rate, in_flight, delay_s
        self.lock = threading.Lock()
        self.admitted: deque[float] = deque()  # when the requests of the last second were allowed
        self.allowed_at: list[float] = []  # when every request was allowed
        self.in_flight = 0
        self.answered = self.refused = 0
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def admit(self) -> float | None:
        """None if the request may go on, else the seconds until it would be allowed."""
        with self.lock:
            now = time.monotonic()
            while self.admitted and now - self.admitted[0] >= 1.0:
                self.admitted.popleft()
            if len(self.admitted) >= self.rate:
                self.refused += 1
                return 1.0 - (now - self.admitted[0])
            if self.in_flight >= self.in_flight_limit:
                self.refused += 1
                return self.delay_s
            self.admitted.append(now)
            self.allowed_at.append(now)
            self.in_flight += 1
            return None

    def sustained_share(self) -> float:
        """Requests allowed per second, a second in from either end of the run, over the limit."""
        first, last = self.allowed_at[0] + 1.0, self.allowed_at[-1] - 1.0
        inside = sum(first <= at < last for at in self.allowed_at)
        return inside / (last - first) / self.rate

    def done(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.answered += 1

    def __enter__(self) -> RateLimitedServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: RateLimitedServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        wait = self.server.admit()
        if wait is not None:
            body = json.dumps({"error": {"message": "Rate limit reached", "type": "requests"}}).encode()
            self.send_response(429)
            self.send_header("Retry-After", f"{wait:.3f}")
        else:
            time.sleep(self.server.delay_s)
            self.server.done()
            body = json.dumps(REPLY).encode()
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # quiet
        pass


@dataclass(frozen=True)
class Arm:
    seconds: float
    share: float  # requests allowed per second, sustained, as a share of the limit
    throttled: int  # 429s the server sent
    client_throttled: int  # and the client's limiter counted
    failed: int
    settled: int  # requests in flight at the end


def run_arm(settings: ClientSettings, requests: int = REQUESTS, server: RateLimitedServer | None = None) -> Arm:
    """`requests` items through a client with `settings` against `server` (running), or a fresh one."""
    with nullcontext(server) if server else RateLimitedServer(RATE, IN_FLIGHT, DELAY_S) as server:
        client = ChatCompletionsClient("bench", server.endpoint, "m", "key", "BENCH_KEY", settings)

        def ask(index: int) -> bool:
            try:
                client.post({"model": "m", "messages": [{"role": "user", "content": str(index)}]})
            except APIError:
                return False
            return True

        started = time.monotonic()
        answered = client.run_all(ask, [(i,) for i in range(requests)], "bench", "request", "bench")
        seconds = time.monotonic() - started
        return Arm(
            seconds,
            server.sustained_share(),
            server.refused,
            client.limit.throttled,
            answered.count(False),
            client.limit.allowed,
        )


def fast_retries(concurrency: int, max_concurrency: int) -> ClientSettings:
    return ClientSettings(
        concurrency=concurrency, max_concurrency=max_concurrency, backoff_base_s=0.05, backoff_cap_s=1.0
    )


# Issue 45: a limit of 20 requests a second and 64 in flight answered after 0.25 s and 2 s, and of 5 a second
# answered after 10 s (a reasoning model's time), 1,000 requests each, with the client's default settings.
LATENCIES = ((0.25, 20.0), (2.0, 20.0), (10.0, 5.0))
LATENCY_REQUESTS, LATENCY_IN_FLIGHT = 1000, 64


def latency_rows() -> list[Row]:
    """The adaptive client at each of LATENCIES: its time beside the limit's bound (requests / rate), the share of
    the limit it sustained (the goal: 0.9, no item failed)."""
    rows = []
    for delay, rate in LATENCIES:
        with RateLimitedServer(rate, LATENCY_IN_FLIGHT, delay) as server:
            arm = run_arm(ClientSettings(concurrency=8), LATENCY_REQUESTS, server)
        rows.append(
            Row(
                f"API requests, {delay:g} s replies",
                f"the limit's bound ({LATENCY_REQUESTS} / {rate:g} a s)",
                LATENCY_REQUESTS / rate,
                arm.seconds,
                arm.share >= GOAL_SHARE and arm.failed == 0,
                f"{rate:g} requests a second and {LATENCY_IN_FLIGHT} in flight allowed, replies after {delay:g} s; "
                f"share of the limit sustained {arm.share:.2f}, 429s {arm.throttled}, items failed {arm.failed}; "
                "'agree' is the goal (0.9, none failed) met",
            )
        )
    return rows


def compare(config: dict, repeats: int) -> list[Row]:
    del config, repeats  # one run an arm: each is seconds long and its counts are the result
    adaptive = run_arm(fast_retries(4, 64))
    rows = []
    for fixed in (4, 32):
        peer = run_arm(fast_retries(fixed, fixed))
        met = (
            adaptive.share >= GOAL_SHARE
            and adaptive.failed == 0
            and (adaptive.throttled < peer.throttled if fixed == 32 else adaptive.seconds < peer.seconds)
        )
        rows.append(
            Row(
                "API requests, adaptive concurrency",
                f"fixed concurrency {fixed}",
                peer.seconds,
                adaptive.seconds,
                met,
                f"limit {RATE:g}/s and {IN_FLIGHT} in flight, {REQUESTS} requests; share of the limit sustained "
                f"{adaptive.share:.2f} (fixed {fixed}: {peer.share:.2f}), 429s {adaptive.throttled} "
                f"({peer.throttled}), items failed {adaptive.failed} ({peer.failed}), in flight at the end "
                f"{adaptive.settled}; 'agree' is the issue's goal met",
            )
        )
    return rows + latency_rows()
