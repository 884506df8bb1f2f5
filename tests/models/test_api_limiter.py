"""The adaptive limit of requests in flight (`blindspot.models.api.limiter`), and the client through it
against a local endpoint that enforces a rate limit (bench/peers/api_rate.py's server)."""

import itertools
import math
import sys
import threading
import time

import pytest
from helpers.workflow import REPO

from blindspot.models.api.client import ClientSettings
from blindspot.models.api.limiter import (
    OK,
    RATE_BACKOFF,
    RATE_GROWTH,
    THROTTLED,
    AdaptiveLimit,
    duration_seconds,
    reset_wait,
)

sys.path.insert(0, str(REPO / "bench"))
from peers.api_rate import RateLimitedServer, run_arm


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reply(limit: AdaptiveLimit, outcome: str, clock: Clock, took: float = 0.1, **said: float) -> None:
    clock.now = max(clock.now, limit.next_send)  # as a thread waits for the pace
    with limit.slot() as slot:
        clock.now += took
        slot.outcome = outcome
        for name, value in said.items():
            setattr(slot, name, value)


def test_it_doubles_each_round_until_the_first_refusal_then_paces_just_under_what_was_refused():
    clock = Clock()
    limit = AdaptiveLimit(4, 64, clock)
    for _ in range(4):  # one round of 4 good replies
        reply(limit, OK, clock)
    assert limit.allowed == 8
    assert limit.rate == math.inf  # not paced before a refusal
    sent_in_the_last_second = len(limit.sent)
    reply(limit, THROTTLED, clock)
    # what the endpoint let through in the last second: the sent, the refused one too, less the refused
    assert limit.rate == pytest.approx(RATE_BACKOFF * (sent_in_the_last_second + 1 - 1))
    assert limit.allowed == 64  # the pace holds the endpoint now; in flight up to the cap
    paced = limit.rate
    for _ in range(10):  # ten good replies, each sent when the pace lets it go, 1 / pace s apart
        reply(limit, OK, clock)
    grown = paced
    for at in range(10):  # growth per second of good replies: the first since the last good one, 0.2 s before
        grown *= 1 + RATE_GROWTH * (0.2 if at == 0 else 1 / grown)
    assert limit.rate == pytest.approx(grown, rel=1e-3)


def test_requests_are_sent_no_faster_than_the_pace():
    clock = Clock()
    limit = AdaptiveLimit(4, 64, clock)
    reply(limit, THROTTLED, clock, took=0.0)
    pace = limit.rate
    sent = []
    for _ in range(3):
        with limit.slot() as slot:
            sent.append(slot.sent_at)
            slot.outcome = OK
        clock.now = limit.next_send  # what the waiting thread's timeout would do
    gaps = [later - earlier for earlier, later in itertools.pairwise(sent)]
    assert gaps == pytest.approx([1 / pace] * 2, rel=0.01)  # the pace grows a little per good reply


def test_a_burst_of_refusals_cuts_once_and_the_floor_holds():
    clock = Clock()
    limit = AdaptiveLimit(8, 10, clock)
    slots = [limit.slot() for _ in range(8)]
    opened = [context.__enter__() for context in slots]  # eight sent before any reply
    for context, slot in zip(slots, opened, strict=True):
        slot.outcome = THROTTLED
        context.__exit__(None, None, None)
    # one cut, at the first refusal, of what was sent less what was refused by then (the rest come after it)
    assert limit.rate == pytest.approx(RATE_BACKOFF * (8 - 1))
    assert (limit.throttled, limit.decreases) == (8, 1)
    reply(limit, THROTTLED, clock, took=0.5)  # sent within a second of the cut: still the old burst's
    assert limit.decreases == 1
    for _ in range(60):  # refused again and again, each a second after the last cut
        clock.now = max(limit.cut_at, limit.next_send) + 0.01
        with limit.slot() as slot:
            slot.outcome = THROTTLED
    assert limit.rate == pytest.approx(1.0)  # never below one request a second


def test_slow_replies_do_not_grow_it():
    clock = Clock()
    limit = AdaptiveLimit(4, 64, clock)
    reply(limit, OK, clock, took=0.1)
    grown = limit.limit
    for _ in range(10):
        reply(limit, OK, clock, took=0.5)  # the endpoint queues: five times the quickest reply
    assert limit.limit == grown


def test_fixed_concurrency_neither_grows_nor_shrinks_nor_pauses():
    clock = Clock()
    limit = AdaptiveLimit(4, 4, clock)
    reply(limit, THROTTLED, clock, retry_after_s=30.0)
    reply(limit, OK, clock)
    assert (limit.allowed, limit.paused_until, limit.throttled) == (4, 0.0, 1)


def test_a_retry_after_pauses_every_request_to_the_endpoint():
    limit = AdaptiveLimit(2, 8)
    with limit.slot() as slot:
        slot.outcome, slot.retry_after_s = THROTTLED, 0.3
    started = time.monotonic()
    waited = []
    threads = [threading.Thread(target=lambda: waited.append(_enter(limit) - started)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert len(waited) == 2
    assert min(waited) >= 0.25


def _enter(limit: AdaptiveLimit) -> float:
    with limit.slot() as slot:
        slot.outcome = OK
        return time.monotonic()


def test_threads_never_hold_more_slots_than_allowed():
    limit = AdaptiveLimit(3, 3)
    most, held, lock = [0], [0], threading.Lock()

    def work():
        with limit.slot() as slot:
            with lock:
                held[0] += 1
                most[0] = max(most[0], held[0])
            time.sleep(0.01)
            with lock:
                held[0] -= 1
            slot.outcome = OK

    threads = [threading.Thread(target=work) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert most[0] == 3
    assert limit.requests == 20


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1m30.5s", 90.5), ("2.5", 2.5), ("soon", None), ("5", 5.0)],
)
def test_reset_durations_as_providers_write_them(text, seconds):
    assert duration_seconds(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_only_an_exhausted_budget_pauses():
    assert reset_wait({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s"}) == 1.5
    assert reset_wait({"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "1.5s"}) is None
    assert reset_wait({}) is None


def test_settings_refuse_a_cap_below_the_start():
    with pytest.raises(ValueError, match="max_concurrency must be at least concurrency"):
        ClientSettings(concurrency=8, max_concurrency=4)
    assert ClientSettings(concurrency=100).cap == 100  # no cap given: 64, or the start if more


def test_the_client_answers_every_item_through_a_rate_limited_endpoint():
    """Every request answered, the refusals counted alike by the server and the limiter, and the sending paced
    after them (speed is bench/peers/api_rate.py's to measure)."""
    settings = ClientSettings(concurrency=2, max_concurrency=32, backoff_base_s=0.02, backoff_cap_s=0.2)
    with RateLimitedServer(rate=30, in_flight=6, delay_s=0.05) as server:
        arm = run_arm(settings, requests=60, server=server)
        assert (arm.failed, server.answered) == (0, 60)
        assert arm.client_throttled == server.refused > 0


def test_a_job_sends_no_more_than_its_planned_requests_times_its_attempts_then_stops_in_one_line():
    from blindspot.models.api.client import ChatCompletionsClient, RequestsExhausted

    settings = ClientSettings(concurrency=4, max_attempts=2, planned_requests=3)
    with RateLimitedServer(rate=1000, in_flight=100, delay_s=0.0) as server:
        client = ChatCompletionsClient("judge", server.endpoint, "m", "key", "BENCH_KEY", settings)
        body = {"model": "m", "messages": [{"role": "user", "content": "1"}]}
        with pytest.raises(RequestsExhausted) as stopped:
            client.run_all(lambda _: client.post(body), [(i,) for i in range(10)], "test", "request", "test")
        assert server.answered == client.requests_sent == 6  # 3 planned x 2 attempts, none past them
    message = str(stopped.value)
    assert "\n" not in message
    assert message == (
        "judge: stopped before request 7: the plan allows this job 3 requests x client.max_attempts 2 = 6, retries "
        "included (raise models.judge.client.max_attempts to allow more, after reading in this log why so many "
        "were retried)"
    )


def test_a_jobs_planned_requests_join_its_entrys_client_settings_or_the_defaults():
    """Both API rules' steps (score_api_metric, answer_api_humble) hand their entry through this: an entry
    without `client` is the defaults', as `ClientSettings` reads it, not a KeyError."""
    from blindspot.models.api.client import with_planned_requests

    entry = {"backend": "openai_api", "client": {"max_attempts": 2}}
    assert with_planned_requests(entry, None) is entry
    assert ClientSettings(**with_planned_requests(entry, 3)["client"]).allowance == 6
    assert entry == {"backend": "openai_api", "client": {"max_attempts": 2}}  # not changed in place
    assert with_planned_requests({"backend": "openai_api"}, 3) == {
        "backend": "openai_api",
        "client": {"planned_requests": 3},
    }


def test_retries_count_against_the_allowance():
    from blindspot.models.api.client import ChatCompletionsClient, RequestsExhausted

    # One request in flight at a time on the server and two sent at once: refusals are retried, and counted.
    settings = ClientSettings(
        concurrency=2,
        max_concurrency=2,
        max_attempts=3,
        planned_requests=1,
        backoff_base_s=0.01,
        backoff_cap_s=0.02,
        retry_after_cap_s=0.05,
    )
    with RateLimitedServer(rate=1000, in_flight=1, delay_s=0.2) as server:
        client = ChatCompletionsClient("judge", server.endpoint, "m", "key", "BENCH_KEY", settings)
        body = {"model": "m", "messages": [{"role": "user", "content": "1"}]}
        with pytest.raises(RequestsExhausted):
            client.run_all(lambda _: client.post(body), [(i,) for i in range(4)], "test", "request", "test")
        assert client.requests_sent == 3
        assert server.answered + server.refused == 3
