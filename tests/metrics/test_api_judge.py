"""The API judge metric: score reading and back-off as pure functions, and the client for real
against an OpenAI-compatible server (`transformers serve`) serving the tiny random Qwen2.5-VL.
Replies that server cannot give (a content filter, reasoning tokens, a good reply after a bad one
at temperature 0) come from a small OpenAI-format server on 127.0.0.1."""

import dataclasses
import functools
import hashlib
import json
import math
import threading
import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
from helpers.api_server import free_port, served_posts, serving, start_server, stop
from helpers.outputs import half_written_temps
from helpers.workflow import REPO
from PIL import Image

from blindspot.checks import validate_config
from blindspot.config import ConfigError
from blindspot.io import is_temp_of
from blindspot.metrics.api_judge import (
    APIJudgeMetric,
    Unanswered,
    failure_detail,
    image_png,
    logprob_score,
    read_score,
    reply_failure,
)
from blindspot.models.api import client as api_client
from blindspot.models.api.client import APIError, backoff_delay, retry_after_seconds
from blindspot.models.spec import model_spec
from blindspot.models.vlm_scoring import text_score
from blindspot.plugins import MetricSkipped, Score
from blindspot.prompts import PromptTemplate
from blindspot.protobias.metric_scores import NoAnswers, ScoreCache, score_pairs

KEY_ENV = "BLINDSPOT_TEST_JUDGE_KEY"
KEY = "sk-blindspot-c0ffee-9d41-NEVER-LEAK"
FAST_CLIENT = {"concurrency": 2, "timeout_s": 60, "max_attempts": 4, "backoff_base_s": 0.05, "backoff_cap_s": 0.2}


# ----- reading a score ------------------------------------------------------------------------


def _position(token: str, candidates: dict[str, float]) -> dict:
    return {
        "token": token,
        "logprob": math.log(candidates.get(token, 1e-9)),
        "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in candidates.items()],
    }


def _response(text: str | None, *positions: dict, finish_reason: str = "stop") -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
    if positions:
        choice["logprobs"] = {"content": list(positions)}
    return {"choices": [choice]}


def test_expected_score_over_the_digits_present_renormalised():
    response = _response("7", _position("7", {"7": 0.6, "8": 0.3, "Hello": 0.1}))
    assert read_score(response) == Score(pytest.approx((7 * 0.6 + 8 * 0.3) / 0.9), "7")


def test_answers_differing_by_spaces_are_one_answer_and_leading_whitespace_is_skipped():
    response = _response(" 4", _position(" ", {" ": 0.9, "\n": 0.1}), _position("4", {"4": 0.25, " 4": 0.25, "6": 0.5}))
    assert read_score(response).raw == pytest.approx(5.0)


def test_ten_as_one_token():
    assert logprob_score(_response("10", _position("10", {"10": 0.5, "9": 0.5}))["choices"][0]["logprobs"]) == 9.5


def test_ten_as_one_then_zero_splits_the_mass_on_one():
    # P("1") = 0.8 of which P("0" | "1") = 0.75 goes to 10: P(1) = 0.2, P(2) = 0.2, P(10) = 0.6.
    logprobs = {"content": [_position("1", {"1": 0.8, "2": 0.2}), _position("0", {"0": 0.75, ".": 0.25})]}
    assert logprob_score(logprobs) == pytest.approx(0.2 * 1 + 0.2 * 2 + 0.6 * 10)
    # Both spellings of "10" add up.
    logprobs = {"content": [_position("1", {"1": 0.5, "10": 0.5}), _position("0", {"0": 0.5, ".": 0.5})]}
    assert logprob_score(logprobs) == pytest.approx(0.25 * 1 + 0.75 * 10)


def test_without_digit_logprobs_the_text_decides_and_no_answer_is_nan():
    no_digit_candidates = _response("Score: 6/10", _position("Score", {"Score": 0.7, "The": 0.3}))
    assert read_score(no_digit_candidates) == Score(6.0, "Score: 6/10")
    assert read_score(_response("8 out of 10")) == Score(8.0, "8 out of 10")
    for text in ["I cannot tell.", "", "3333", "0"]:
        score = read_score(_response(text))
        assert math.isnan(score.raw)
        assert score.detail == text
    assert math.isnan(read_score({"choices": [{"message": {"content": None}}]}).raw)


def test_a_reply_without_an_answer_is_a_failure_with_its_reason():
    for empty in [_response(""), _response("  \n"), _response(None), {"choices": []}, {}]:
        assert reply_failure(empty) == "empty"
    assert reply_failure(_response("", finish_reason="length")) == "length"
    assert reply_failure(_response("Score:", finish_reason="length")) == "length"
    assert reply_failure(_response("7", finish_reason="content_filter")) == "content_filter"
    # Answers: a score written before the cut (max_tokens 1), and a whole reply, even one without a score.
    assert reply_failure(_response("7", finish_reason="length")) is None
    assert reply_failure(_response("x", _position("7", {"7": 0.9, "x": 0.1}), finish_reason="length")) is None
    assert reply_failure(_response("8")) is None
    assert reply_failure(_response("I cannot tell.")) is None


def test_a_failure_says_what_the_reply_spent_and_what_to_change():
    cut = _response("", finish_reason="length") | {
        "usage": {"completion_tokens": 64, "completion_tokens_details": {"reasoning_tokens": 64}}
    }
    assert failure_detail(cut, "length") == (
        "length: the reply was cut at the token budget before a score (raise request.max_completion_tokens or "
        "lower request.reasoning_effort) (finish_reason 'length', 64 completion tokens, 64 of them reasoning)"
    )
    refused = {"choices": [{"message": {"content": None, "refusal": "I can't help with that."}}]}
    assert failure_detail(refused, "empty") == (
        'empty: the reply was empty (finish_reason None, refusal "I can\'t help with that.")'
    )


# ----- back-off ---------------------------------------------------------------------------------


def test_backoff_grows_exponentially_with_jitter_up_to_the_cap():
    lowest = [backoff_delay(n, 1.0, 10.0, rng=lambda: 0.0) for n in range(6)]
    highest = [backoff_delay(n, 1.0, 10.0, rng=lambda: 1.0) for n in range(6)]
    assert lowest == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert highest == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    for n in range(6):
        assert lowest[n] <= backoff_delay(n, 1.0, 10.0) <= highest[n]


def test_retry_after_in_seconds_or_as_a_date():
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=30), usegmt=True), now.timestamp()) == 30.0


# ----- construction -----------------------------------------------------------------------------


def _entry(port: int = 9, model: str = "judge", **extra) -> dict:
    return {"id": model, "endpoint": f"http://127.0.0.1:{port}/v1", "api_key_env": KEY_ENV, **extra}


@pytest.mark.parametrize("value", [None, "", "   "])
def test_a_missing_or_empty_key_skips_the_metric_naming_the_variable(monkeypatch, tmp_path, value):
    if value is None:
        monkeypatch.delenv(KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(KEY_ENV, value)
    with pytest.raises(MetricSkipped, match=KEY_ENV):
        APIJudgeMetric(_entry(), tmp_path)


def test_the_registry_entry_may_be_an_object_and_needs_its_endpoint(monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)

    class Spec:
        name, path, endpoint, api_key_env, revision = "gpt-5-judge", "gpt-5", "http://x/v1", KEY_ENV, "2025-08-07"

    metric = APIJudgeMetric(Spec(), tmp_path)
    assert (metric.name, metric.model_id, metric.revision, metric.bounds) == (
        "gpt-5-judge",
        "gpt-5",
        "2025-08-07",
        (1, 10),
    )
    assert metric.template.version.startswith("judge_semantic/v1+")
    assert KEY not in repr(metric)
    with pytest.raises(ValueError, match="endpoint"):
        APIJudgeMetric({"id": "gpt-5", "api_key_env": KEY_ENV}, tmp_path)


def test_the_paper_judge_reasons_within_a_budget_the_schema_asks_for(paper_config):
    request = paper_config["models"]["gpt-5"]["request"]
    assert request["reasoning_effort"] in {"minimal", "low"}
    assert request["max_completion_tokens"] >= 1024  # reasoning and the answer: 64 came back empty
    del request["max_completion_tokens"]
    with pytest.raises(ConfigError) as without_budget:
        validate_config(paper_config)
    assert str(without_budget.value) == (
        "config key 'models.gpt-5.request': 'max_completion_tokens' is a dependency of 'reasoning_effort'"
    )
    request |= {"max_completion_tokens": 4096, "reasoning_effort": "lots"}
    with pytest.raises(ConfigError) as unknown_effort:
        validate_config(paper_config)
    assert str(unknown_effort.value).startswith(
        "config key 'models.gpt-5.request.reasoning_effort': 'lots' is not one of"
    )


def test_the_template_renders_the_prompt_with_the_image_first(monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    metric = APIJudgeMetric(_entry(request={"max_completion_tokens": 16}), tmp_path)
    body = metric.body("a penguin on a beach", b"\x89PNG")
    assert body["model"] == "judge"
    assert body["max_completion_tokens"] == 16
    system, user = body["messages"]
    assert "semantic correctness" in system["content"]
    assert user["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert "Prompt: a penguin on a beach" in user["content"][1]["text"]
    assert PromptTemplate.load(REPO / "config" / "prompts" / "judge_semantic_v1.yaml").name == "judge_semantic"


# ----- against a real OpenAI-compatible server --------------------------------------------------


@pytest.fixture(scope="module")
def tiny_vlm(built_config) -> str:
    return model_spec(built_config, "tiny-qwen2.5-vl").path


@pytest.fixture(scope="module")
def server(tiny_vlm, tmp_path_factory):
    with serving(tiny_vlm, tmp_path_factory.mktemp("serve")) as served:
        yield served


def _pairs() -> tuple[list[str], list[Image.Image]]:
    prompts = ["a red square", "two blue circles", "a green bird on the left", "a red square"]
    colours = [(200, 30, 30), (30, 30, 200), (30, 160, 30), (30, 160, 30)]
    return prompts, [Image.new("RGB", (56, 56), colour) for colour in colours]


def _logit_bias(model_dir: str, characters: str | None = "123456789") -> dict[str, float]:
    """logit_bias towards these characters, or towards the end of the text when None: a random-weight
    model then writes one of them (noise, but real; "1".."9" is an answer) or nothing at all."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if characters is None:
        return {str(tokenizer.eos_token_id): 30.0}
    return {str(tokenizer.encode(c, add_special_tokens=False)[0]): 30.0 for c in characters}


def _pairs_on_disk(folder: Path) -> pd.DataFrame:
    """Two benchmark pairs of _pairs()'s first two prompts: four (prompt, image) items."""
    prompts, _ = _pairs()
    paths = [folder / f"image{index}.png" for index in range(4)]
    for index, path in enumerate(paths):
        Image.new("RGB", (56, 56), (60 * index, 100, 200 - 60 * index)).save(path)
    return pd.DataFrame(
        [
            {
                "pair_id": f"p{n}",
                "domain": "objects",
                "neutral_prompt": prompts[n],
                "corr_path": str(paths[2 * n]),
                "adv_path": str(paths[2 * n + 1]),
            }
            for n in range(2)
        ]
    )


def _assert_no_key(*texts: str, folders: tuple[Path, ...] = ()) -> None:
    for text in texts:
        assert KEY not in text
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.slow
@pytest.mark.integration
def test_scores_from_a_served_vlm_then_from_the_cache(server, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    caplog.set_level("DEBUG")
    prompts, images = _pairs()
    # One token, a digit: cut at the budget (finish_reason "length") after its score, so an answer.
    digits = {"max_tokens": 1, "temperature": 0, "logit_bias": _logit_bias(server["model"])}
    metric = APIJudgeMetric(_entry(server["port"], server["model"], request=digits, client=FAST_CLIENT), tmp_path)
    scores = metric.score(prompts, images)
    assert metric.client.requests_sent == len(prompts)
    assert metric.cache_hits == 0
    assert len(scores) == len(prompts)
    assert all(1 <= s.raw <= 9 and s.detail.isdigit() and s.raw == text_score(s.detail) for s in scores)

    # A second run over the same inputs, by a new instance, asks the server nothing.
    posts = served_posts(server["log"])
    again = APIJudgeMetric(_entry(server["port"], server["model"], request=digits, client=FAST_CLIENT), tmp_path)
    assert again.score(prompts, images) == scores
    assert again.client.requests_sent == 0
    assert again.cache_hits == len(prompts)
    assert served_posts(server["log"]) == posts
    cached = [json.loads(p.read_text()) for p in tmp_path.rglob("*.json")]
    assert len(cached) == len(prompts)
    assert {c["prompt"] for c in cached} == set(prompts)
    assert all(c["response"]["choices"] for c in cached)
    assert not list(tmp_path.rglob("*.tmp"))
    _assert_no_key(caplog.text, folders=(tmp_path, server["log"].parent))


@pytest.mark.slow
@pytest.mark.integration
def test_a_client_error_fails_fast_with_the_endpoints_message(server, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    metric = APIJudgeMetric(_entry(server["port"], "no-such-model", client=FAST_CLIENT), tmp_path)
    prompts, images = _pairs()
    with pytest.raises(APIError, match="HTTP 400") as error:
        metric.score(prompts[:1], images[:1])
    assert "no-such-model" in str(error.value)
    assert "pinned" in str(error.value)
    assert metric.client.requests_sent == 1
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert not list(tmp_path.rglob("*.json"))
    formatted = "".join(traceback.format_exception(error.value))
    _assert_no_key(str(error.value), repr(error.value), formatted, caplog.text, folders=(tmp_path,))


@pytest.mark.slow
@pytest.mark.integration
def test_the_client_retries_until_a_starting_server_answers(tiny_vlm, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    port, log_path = free_port(), tmp_path / "serve" / "serve.log"
    log_path.parent.mkdir()
    client = FAST_CLIENT | {"max_attempts": 200, "backoff_base_s": 0.2, "backoff_cap_s": 1.0}
    request = {"max_tokens": 1, "logit_bias": _logit_bias(tiny_vlm)}  # an answer, or the client would ask again
    metric = APIJudgeMetric(_entry(port, tiny_vlm, request=request, client=client), tmp_path / "cache")
    prompts, images = _pairs()
    process = start_server(tiny_vlm, port, log_path)  # not listening for seconds yet: connections are refused
    try:
        scores = metric.score(prompts[:2], images[:2])
    finally:
        stop(process)
    assert len(scores) == 2
    assert served_posts(log_path) == 2
    retries = [r for r in caplog.records if r.levelname == "WARNING" and "ConnectionError" in r.getMessage()]
    assert retries
    assert metric.client.requests_sent == 2 + len(retries)
    _assert_no_key(caplog.text, folders=(tmp_path,))


def _identity(model: str) -> dict[str, str]:
    return {"model_id": model, "revision": "", "version": "test"}


@pytest.mark.slow
@pytest.mark.integration
def test_empty_replies_are_asked_again_then_fail_the_shard_and_nothing_is_cached(server, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    request = {"max_tokens": 4, "temperature": 0, "logit_bias": _logit_bias(server["model"], None)}
    entry = _entry(server["port"], server["model"], request=request, client=FAST_CLIENT | {"max_reply_attempts": 2})
    posts = served_posts(server["log"])
    with pytest.raises(NoAnswers) as error:
        score_pairs(
            _pairs_on_disk(tmp_path),
            "api-judge",
            _identity(server["model"]),
            lambda: APIJudgeMetric(entry, tmp_path / "responses"),
            ScoreCache(tmp_path / "scores"),
        )
    assert str(error.value).startswith(
        f"api-judge: model '{server['model']}' answered none of the 4 items of this shard (empty: 4); nothing was "
        "cached, a rerun asks again; the last: empty: the reply was empty (finish_reason 'stop'"
    )
    assert "\n" not in str(error.value)
    assert served_posts(server["log"]) - posts == 4 * 2
    retries = [r.getMessage() for r in caplog.records if "no answer (empty" in r.getMessage()]
    assert len(retries) == 4
    assert not list(tmp_path.rglob("*.json"))  # neither the responses nor the scores
    _assert_no_key(str(error.value), caplog.text, folders=(tmp_path,))


@pytest.mark.slow
@pytest.mark.integration
def test_a_reply_cut_at_its_budget_before_a_score_is_a_length_failure(server, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    request = {
        "reasoning_effort": "low",
        "max_completion_tokens": 3,
        "temperature": 0,
        "logit_bias": _logit_bias(server["model"], "a"),
    }
    entry = _entry(server["port"], server["model"], request=request, client=FAST_CLIENT | {"max_reply_attempts": 1})
    metric = APIJudgeMetric(entry, tmp_path)
    prompts, images = _pairs()
    posts = served_posts(server["log"])
    (score,) = metric.score(prompts[:1], images[:1])
    assert isinstance(score, Unanswered)
    assert (score.failure, math.isnan(score.raw)) == ("length", True)
    # The budget reached the server (it stopped there) and so did the effort, which it ignores.
    assert score.detail.startswith("length: the reply was cut at the token budget before a score")
    assert "finish_reason 'length', 3 completion tokens, text 'aaa'" in score.detail
    assert "Ignoring unsupported fields in the request: {'reasoning_effort'}" in server["log"].read_text()
    assert served_posts(server["log"]) - posts == metric.client.requests_sent == 1
    assert not list(tmp_path.rglob("*.json"))


# ----- replies the tiny server cannot give, from a small OpenAI-format server -------------------


@dataclasses.dataclass
class _Stub:
    port: int
    reply: Callable[[str], dict | bytes]  # the response to a request (JSON, or bytes as they are), from its prompt
    bodies: list[dict] = dataclasses.field(default_factory=list)
    keys: list[str] = dataclasses.field(default_factory=list)  # the key each request carried
    # replies to give first, in order, as (status, headers, JSON or bytes); then `reply`'s, with 200
    script: list[tuple[int, dict[str, str], dict | bytes]] = dataclasses.field(default_factory=list)


def _prompt_of(body: dict) -> str:
    return body["messages"][1]["content"][1]["text"].split("\n")[0].removeprefix("Prompt: ")


@pytest.fixture
def stub():
    """A chat-completions endpoint on 127.0.0.1 that answers with `stub.script`'s replies while it
    holds any, then with `stub.reply`'s, and keeps the request bodies and keys."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                state.bodies.append(body)
                state.keys.append(self.headers["Authorization"].removeprefix("Bearer "))
                if state.script:
                    status, headers, reply = state.script.pop(0)
                else:
                    status, headers, reply = 200, {}, state.reply(_prompt_of(body))
                payload = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass  # the tests read the bodies, not an access log

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = _Stub(http.server_address[1], lambda prompt: _response("5"))
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        http.shutdown()
        http.server_close()
        thread.join()


def test_429_and_5xx_are_retried_honouring_retry_after(stub, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    # The jitter pinned to its top, so a back-off wait is the whole capped step min(cap, base * 2**retry).
    monkeypatch.setattr(api_client, "backoff_delay", functools.partial(backoff_delay, rng=lambda: 1.0))
    base, cap = 0.1, 1.0
    metric = APIJudgeMetric(
        _entry(stub.port, client={"max_attempts": 3, "backoff_base_s": base, "backoff_cap_s": cap}), tmp_path
    )
    prompts, images = _pairs()
    body = metric.body(prompts[0], image_png(images[0]))
    stub.script = [
        (429, {"Retry-After": "7"}, {"error": {"message": "rate limited"}}),
        (503, {}, {"error": {"message": "overloaded"}}),
        (200, {}, _response("9")),
    ]
    waits = []  # post() sleeps through the `sleep` it is given
    assert metric.client.post(body, sleep=waits.append) == _response("9")
    assert metric.client.requests_sent == len(stub.bodies) == 3
    assert stub.bodies == [body] * 3
    # the 429 waits its Retry-After (under retry_after_cap_s), up to a tenth more so that requests refused together
    # do not return together, and no back-off step; the 503, with none, waits the second back-off step
    assert 7.0 <= waits[0] <= 7.7
    assert waits[1] == min(cap, base * 2) == 0.2
    assert "rate limited" in caplog.text
    assert "overloaded" in caplog.text

    stub.script = [(500, {}, {"error": {"message": f"bad key {KEY}"}})] * 3
    with pytest.raises(APIError, match="failed 3 times") as error:
        metric.client.post(body, sleep=waits.append)
    assert len(stub.bodies) == 6
    stub.script = [(401, {}, {"error": {"message": f"Incorrect API key provided: {KEY}"}})]
    with pytest.raises(APIError, match="HTTP 401: Incorrect API key provided") as refused:
        metric.client.post(body, sleep=waits.append)
    assert len(stub.bodies) == 7  # a refusal is not retried
    assert waits[2:] == [min(cap, base), min(cap, base * 2)]
    _assert_no_key(str(error.value), str(refused.value), caplog.text)


def test_the_paper_judge_sends_its_reasoning_effort_and_budget(paper_config, stub, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    spec = dataclasses.replace(
        model_spec(paper_config, "gpt-5"), endpoint=_entry(stub.port)["endpoint"], api_key_env=KEY_ENV
    )
    prompts, images = _pairs()
    assert APIJudgeMetric(spec, tmp_path).score(prompts[:1], images[:1]) == [Score(5.0, "5")]
    (body,) = stub.bodies
    assert {"reasoning_effort", "max_completion_tokens"} <= body.keys()
    assert body | paper_config["models"]["gpt-5"]["request"] == body
    assert body["model"] == "gpt-5"


def test_a_good_reply_after_an_empty_and_a_cut_one_is_used_and_cached(stub, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    thought_through = _response("", finish_reason="length") | {
        "usage": {"completion_tokens": 64, "completion_tokens_details": {"reasoning_tokens": 64}}
    }
    replies = iter([_response(""), thought_through, _response("7")])
    stub.reply = lambda prompt: next(replies)
    prompts, images = _pairs()
    metric = APIJudgeMetric(_entry(stub.port, client=FAST_CLIENT), tmp_path)
    assert metric.score(prompts[:1], images[:1]) == [Score(7.0, "7")]
    assert metric.client.requests_sent == len(stub.bodies) == 3
    retries = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(retries) == 2
    assert "no answer (empty: the reply was empty" in retries[0]
    assert "no answer (length: " in retries[1]
    assert "64 of them reasoning" in retries[1]
    # The answer is cached: a new instance asks nothing.
    again = APIJudgeMetric(_entry(stub.port, client=FAST_CLIENT), tmp_path)
    assert again.score(prompts[:1], images[:1]) == [Score(7.0, "7")]
    assert again.client.requests_sent == 0
    assert len(stub.bodies) == 3


def test_an_unanswered_item_is_counted_kept_out_of_both_caches_and_asked_again(stub, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    pairs = _pairs_on_disk(tmp_path)
    filtered = pairs["neutral_prompt"][1]
    stub.reply = lambda p: _response("", finish_reason="content_filter") if p == filtered else _response("8")
    entry = _entry(stub.port, client=FAST_CLIENT | {"max_reply_attempts": 2})
    responses, cache = tmp_path / "responses", ScoreCache(tmp_path / "scores")

    def run() -> tuple[pd.DataFrame, dict]:
        return score_pairs(pairs, "api-judge", _identity("judge"), lambda: APIJudgeMetric(entry, responses), cache)

    frame, counters = run()
    assert (counters["failed"], counters["images_scored"], counters["cache_hits"]) == ({"content_filter": 2}, 2, 0)
    assert len(stub.bodies) == 2 + 2 * 2
    assert frame["corr_raw"][0] == frame["adv_raw"][0] == 8
    assert frame[["corr_raw", "adv_raw"]].iloc[1].isna().all()
    assert frame["corr_detail"][1].startswith("content_filter: the provider's content filter withheld the reply")
    assert len(list(responses.rglob("*.json"))) == len(list(cache.folder.rglob("*.json"))) == 2

    # The next run asks only for what has no answer yet.
    stub.bodies.clear()
    stub.reply = lambda p: _response("6")
    frame, counters = run()
    assert {_prompt_of(body) for body in stub.bodies} == {filtered}
    assert len(stub.bodies) == 2
    assert (counters["failed"], counters["images_scored"], counters["cache_hits"]) == ({}, 2, 2)
    assert frame[["corr_raw", "adv_raw"]].to_numpy().tolist() == [[8, 8], [6, 6]]


def test_a_job_removes_what_a_killed_run_left_of_the_entries_it_asks_for_and_nothing_else(stub, monkeypatch, tmp_path):
    """The metric's other jobs share the cache folder, each asking for its own shard's items."""
    monkeypatch.setenv(KEY_ENV, KEY)
    prompts, images = _pairs()
    metric = APIJudgeMetric(_entry(stub.port), tmp_path)
    key = metric.cache_key(prompts[0], hashlib.sha256(image_png(images[0])).hexdigest())
    entry = metric.cache.path(key)
    left, others = half_written_temps(entry, key, '{"response": {"choi')
    assert is_temp_of(left, entry)
    assert metric.score(prompts[:1], images[:1]) == [Score(5.0, "5")]
    assert sorted(entry.parent.iterdir()) == sorted([others, entry])


# ----- replies of any shape: read without raising, checked before caching ---------------------


def test_content_as_parts_and_unreadable_logprobs_are_read_without_raising():
    parts = {"choices": [{"message": {"content": [{"type": "text", "text": " 7"}, {"type": "image_url"}]}}]}
    assert read_score(parts) == Score(7.0, "7")
    # Positions without a log-probability, or with one that is not a number <= 0, are skipped: the text decides.
    unreadable = [
        {"token": "9"},
        {"token": "9", "logprob": "x"},
        {"token": "9", "logprob": float("nan")},
        {"token": "9", "top_logprobs": [7, {"token": 9}], "logprob": 1.5},
        {"token": ["9"]},
        "9",
    ]
    for position in unreadable:
        assert read_score(_response("6", position)) == Score(6.0, "6"), position
    for logprobs in [{"content": "9"}, {"content": None}, {"content": [None, {"token": "9"}]}, {}]:
        assert read_score({"choices": [{"message": {"content": "4"}, "logprobs": logprobs}]}).raw == 4.0
    malformed = {"choices": [{"message": {"content": "4"}, "logprobs": ["9"]}]}
    assert (math.isnan(read_score(malformed).raw), reply_failure(malformed)) == (True, "malformed")


@pytest.mark.parametrize(
    ("response", "problem"),
    [
        ([1, 2], "the response is of type list, not an object"),
        ({"choices": {"0": {}}}, "choices is of type dict, not a list"),
        ({"choices": ["7"]}, "choices[0] is of type str, not an object"),
        ({"choices": [{"message": "7"}]}, "choices[0].message is of type str, not an object"),
        ({"choices": [{"message": {"content": {"text": "7"}}}]}, "choices[0].message.content is of type dict"),
        ({"choices": [{"message": {"content": ["7"]}}]}, "choices[0].message.content is a list with items that"),
        ({"choices": [{"message": {"content": "7"}, "finish_reason": 1}]}, "choices[0].finish_reason is of type int"),
        ({"choices": [{"message": {"content": "7", "refusal": ["no"]}}]}, "choices[0].message.refusal is of type"),
        ({"choices": [{"message": {"content": "7"}}], "usage": 12}, "usage is of type int"),
    ],
)
def test_a_reply_that_is_not_a_chat_completion_is_malformed_and_says_where(response, problem):
    assert reply_failure(response) == "malformed"
    assert failure_detail(response, "malformed").startswith(f"malformed: the reply is not a chat completion ({problem}")
    assert math.isnan(read_score(response).raw)


def test_malformed_replies_are_asked_again_never_cached_then_unanswered(stub, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    replies = iter(
        [
            b"<html>502 Bad Gateway</html>",
            {"choices": [{"message": {"content": {"score": 7}}}]},
            b"[" * 5000 + b"]" * 5000,
            b'{"choices": [{"message": {"content": "' + b"9" * 5000 + b'"}}], "n": ' + b"1" * 5000 + b"}",
        ]
    )
    stub.reply = lambda prompt: next(replies)
    prompts, images = _pairs()
    metric = APIJudgeMetric(_entry(stub.port, client=FAST_CLIENT | {"max_reply_attempts": 4}), tmp_path)
    (score,) = metric.score(prompts[:1], images[:1])
    assert isinstance(score, Unanswered)
    assert score.failure == "malformed"
    assert "not readable JSON (Exceeds the limit (4300 digits)" in score.detail
    assert metric.client.requests_sent == len(stub.bodies) == 4
    retries = [r.getMessage() for r in caplog.records if "no answer (malformed" in r.getMessage()]
    assert "502 Bad Gateway" in retries[0]
    assert "choices[0].message.content is of type dict" in retries[1]
    assert "not readable JSON (maximum recursion depth exceeded" in retries[2]
    assert not list(tmp_path.rglob("*.json"))
    # The next run asks again, and a reply in content parts is an answer.
    stub.reply = lambda prompt: {"choices": [{"message": {"content": [{"type": "text", "text": "8"}]}}]}
    assert metric.score(prompts[:1], images[:1]) == [Score(8.0, "8")]
    assert len(list(tmp_path.rglob("*.json"))) == 1


@pytest.mark.parametrize(
    "cached",
    [
        '{"response": {"choices": [{"message": {"content": "7"',  # cut short
        '{"response": {"choices": [{"message": {"content": [7, 8]}}]}}',  # an older version cached it unchecked
        '{"response": {"choices": [{"message": {"content": ""}}]}}',  # no answer
        '{"prompt": "a red square"}',
        "[]",
        "[" * 5000 + "]" * 5000,
    ],
)
def test_a_cached_reply_that_cannot_be_used_is_asked_again_and_overwritten(stub, monkeypatch, tmp_path, caplog, cached):
    monkeypatch.setenv(KEY_ENV, KEY)
    prompts, images = _pairs()
    assert APIJudgeMetric(_entry(stub.port), tmp_path).score(prompts[:1], images[:1]) == [Score(5.0, "5")]
    (path,) = tmp_path.rglob("*.json")
    path.write_text(cached)
    stub.reply = lambda prompt: _response("6")
    again = APIJudgeMetric(_entry(stub.port), tmp_path)
    assert again.score(prompts[:1], images[:1]) == [Score(6.0, "6")]
    assert (again.cache_hits, again.client.requests_sent) == (0, 1)
    assert "cannot be used" in caplog.text
    assert json.loads(path.read_text())["response"]["choices"][0]["message"]["content"] == "6"


# ----- the key: refused when it cannot be a header, scrubbed in every form from what is stored ------


def _key_forms(key: str) -> set[str]:
    """The forms a server can echo a key in: raw, JSON-escaped, URL-encoded."""
    from urllib.parse import quote, quote_plus

    return {
        key,
        json.dumps(key)[1:-1],
        json.dumps(key, ensure_ascii=False)[1:-1],
        quote(key, safe=""),
        quote_plus(key, safe=""),
        quote(key, safe="", encoding="latin-1"),
    }


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("sk-abc\ndef-NEVER-LEAK", "a control character or line break (U+000A) at position 6"),
        ("sk-abc\r\nX-Evil: 1", "a control character or line break (U+000D) at position 6"),
        ("sk-abc\x1bdef", "a control character or line break (U+001B) at position 6"),
        ("sk-abc\u2019def-NEVER-LEAK", "a character outside Latin-1 (U+2019) at position 6"),
    ],
)
def test_a_key_that_cannot_be_a_header_is_refused_before_any_request(stub, monkeypatch, tmp_path, key, problem):
    monkeypatch.setenv(KEY_ENV, key)
    with pytest.raises(ValueError, match="cannot be sent as an HTTP header") as error:
        APIJudgeMetric(_entry(stub.port), tmp_path)
    assert str(error.value) == (
        f"judge: the API key in {KEY_ENV} cannot be sent as an HTTP header: it holds {problem}; "
        "set the variable to the key alone"
    )
    formatted = "".join(traceback.format_exception(error.value))
    assert "abc" not in formatted
    assert not stub.bodies


def test_a_key_echoed_back_in_any_form_is_never_stored(stub, monkeypatch, tmp_path, caplog):
    from urllib.parse import quote, quote_plus

    key = 'sk-"quoted"\\back/slash é+%&=x y'
    monkeypatch.setenv(KEY_ENV, key)

    def echo(prompt):
        sent = stub.keys[-1]
        text = f"7. You sent {sent}; in JSON {json.dumps(sent)}; in a URL {quote(sent, safe='')}"
        return _response(text) | {sent: {"url": f"https://x/?k={quote_plus(sent)}", "json": json.dumps({"k": sent})}}

    stub.reply = echo
    pairs = _pairs_on_disk(tmp_path)
    responses, cache = tmp_path / "responses", ScoreCache(tmp_path / "scores")
    frame, counters = score_pairs(
        pairs, "api-judge", _identity("judge"), lambda: APIJudgeMetric(_entry(stub.port), responses), cache
    )
    assert stub.keys == [key] * 4  # the server got the key and sent it back in every form
    assert counters["images_scored"] == 4
    assert frame["corr_detail"][0] == '7. You sent <redacted>; in JSON "<redacted>"; in a URL <redacted>'
    stored = [p.read_text() for p in tmp_path.rglob("*.json")]
    assert len(stored) == 8  # four replies and four scores
    frame.to_parquet(tmp_path / "scores.parquet")
    texts = [*stored, caplog.text, *map(str, pd.read_parquet(tmp_path / "scores.parquet").to_numpy().ravel())]
    for form in _key_forms(key):
        assert not [text for text in texts if form in text], form
