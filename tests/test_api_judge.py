"""The API judge metric: score reading and back-off as pure functions, and the client for real
against an OpenAI-compatible server (`transformers serve`) serving the tiny random Qwen2.5-VL."""

import json
import math
import os
import socket
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest
import requests
from conftest import REPO
from PIL import Image

from blindspot.config import model_spec
from blindspot.metrics import MetricSkipped, Score
from blindspot.metrics.api_judge import (
    APIJudgeError,
    APIJudgeMetric,
    backoff_delay,
    logprob_score,
    read_score,
    retry_after_seconds,
)
from blindspot.prompts import PromptTemplate
from blindspot.vlm_scoring import text_score

KEY_ENV = "BLINDSPOT_TEST_JUDGE_KEY"
KEY = "sk-blindspot-c0ffee-9d41-NEVER-LEAK"
FAST_CLIENT = {"concurrency": 2, "timeout_s": 60, "max_attempts": 4, "backoff_base_s": 0.05, "backoff_cap_s": 0.2}


# ----- reading a score ------------------------------------------------------------------------


def _position(token: str, candidates: dict[str, float]) -> dict:
    return {
        "token": token, "logprob": math.log(candidates.get(token, 1e-9)),
        "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in candidates.items()],
    }  # fmt: skip


def _response(text: str, *positions: dict) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(model_dir: str, port: int, log_path: Path) -> subprocess.Popen:
    """`transformers serve` (FastAPI + uvicorn, OpenAI chat completions) pinned to one model."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    command = [str(Path(sys.executable).parent / "transformers"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    with log_path.open("w") as log:
        return subprocess.Popen(
            [*command, "--device", "cpu", model_dir], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=log_path.parent
        )


def _wait_ready(process: subprocess.Popen, port: int, log_path: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"transformers serve exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.5)
    pytest.fail(f"transformers serve not ready after {timeout_s} s:\n{log_path.read_text()[-3000:]}")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _posts(log_path: Path) -> int:
    """Chat-completion requests the server received, from its access log."""
    return log_path.read_text().count('"POST /v1/chat/completions')


@pytest.fixture(scope="module")
def tiny_vlm(built_config) -> str:
    return model_spec(built_config, "tiny-qwen2.5-vl").path


@pytest.fixture(scope="module")
def server(tiny_vlm, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    port = _free_port()
    process = _start_server(tiny_vlm, port, log_path)
    try:
        _wait_ready(process, port, log_path)
        yield {"port": port, "log": log_path, "model": tiny_vlm}
    finally:
        _stop(process)


def _pairs() -> tuple[list[str], list[Image.Image]]:
    prompts = ["a red square", "two blue circles", "a green bird on the left", "a red square"]
    colours = [(200, 30, 30), (30, 30, 200), (30, 160, 30), (30, 160, 30)]
    return prompts, [Image.new("RGB", (56, 56), colour) for colour in colours]


def _digit_bias(model_dir: str) -> dict[str, float]:
    """logit_bias towards "1".."9": a random-weight model then answers with a digit (noise, but real)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return {str(tokenizer.encode(str(d), add_special_tokens=False)[0]): 30.0 for d in range(1, 10)}


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
    digits = {"max_tokens": 1, "temperature": 0, "logit_bias": _digit_bias(server["model"])}
    free_text = {"max_tokens": 4, "temperature": 0}
    results = {}
    for label, request in [("digits", digits), ("free", free_text)]:
        metric = APIJudgeMetric(_entry(server["port"], server["model"], request=request, client=FAST_CLIENT), tmp_path)
        results[label] = metric.score(prompts, images)
        assert metric.requests_sent == len(prompts)
        assert metric.cache_hits == 0
    for scores in results.values():
        assert len(scores) == len(prompts)
        for score in scores:
            if text_score(score.detail) is None:
                assert math.isnan(score.raw)
            else:
                assert 1 <= score.raw <= 10
                assert score.raw == text_score(score.detail)
    assert all(1 <= s.raw <= 9 and s.detail.isdigit() for s in results["digits"])

    # A second run over the same inputs, by a new instance, asks the server nothing.
    posts = _posts(server["log"])
    again = APIJudgeMetric(_entry(server["port"], server["model"], request=digits, client=FAST_CLIENT), tmp_path)
    assert again.score(prompts, images) == results["digits"]
    assert again.requests_sent == 0
    assert again.cache_hits == len(prompts)
    assert _posts(server["log"]) == posts
    cached = [json.loads(p.read_text()) for p in tmp_path.rglob("*.json")]
    assert len(cached) == 2 * len(prompts)  # two request settings x four (prompt, image) pairs
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
    with pytest.raises(APIJudgeError, match="HTTP 400") as error:
        metric.score(prompts[:1], images[:1])
    assert "no-such-model" in str(error.value)
    assert "pinned" in str(error.value)
    assert metric.requests_sent == 1
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert not list(tmp_path.rglob("*.json"))
    formatted = "".join(traceback.format_exception(error.value))
    _assert_no_key(str(error.value), repr(error.value), formatted, caplog.text, folders=(tmp_path,))


@pytest.mark.slow
@pytest.mark.integration
def test_the_client_retries_until_a_starting_server_answers(tiny_vlm, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    port, log_path = _free_port(), tmp_path / "serve" / "serve.log"
    log_path.parent.mkdir()
    client = FAST_CLIENT | {"max_attempts": 200, "backoff_base_s": 0.2, "backoff_cap_s": 1.0}
    metric = APIJudgeMetric(_entry(port, tiny_vlm, request={"max_tokens": 2}, client=client), tmp_path / "cache")
    prompts, images = _pairs()
    process = _start_server(tiny_vlm, port, log_path)  # not listening for seconds yet: connections are refused
    try:
        scores = metric.score(prompts[:2], images[:2])
    finally:
        _stop(process)
    assert len(scores) == 2
    assert _posts(log_path) == 2
    retries = [r for r in caplog.records if r.levelname == "WARNING" and "ConnectionError" in r.getMessage()]
    assert retries
    assert metric.requests_sent == 2 + len(retries)
    _assert_no_key(caplog.text, folders=(tmp_path,))


# ----- retry statuses (the tiny server cannot be made to answer 429 or 503) -------------------


class _Replies:
    """Stands in for the HTTP session only: hands out prepared responses in order."""

    def __init__(self, *replies: tuple[int, dict, dict]):
        self.replies = list(replies)

    def post(self, url, **kwargs):
        status, headers, body = self.replies.pop(0)
        response = requests.Response()
        response.status_code, response.url = status, url
        response.headers.update(headers)
        response._content = json.dumps(body).encode()
        return response


def test_429_and_5xx_are_retried_honouring_retry_after(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    metric = APIJudgeMetric(_entry(client={"max_attempts": 3, "backoff_base_s": 0.1, "backoff_cap_s": 1}), tmp_path)
    replies = _Replies(
        (429, {"Retry-After": "7"}, {"error": {"message": "rate limited"}}),
        (503, {}, {"error": {"message": "overloaded"}}),
        (200, {}, _response("9")),
    )
    monkeypatch.setattr(metric, "_session", lambda: replies)
    waits = []
    assert read_score(metric.post({"model": "judge"}, sleep=waits.append)).raw == 9
    assert waits[0] == 7
    assert 0.1 <= waits[1] <= 0.2
    assert "rate limited" in caplog.text
    assert "overloaded" in caplog.text

    replies.replies = [(500, {}, {"error": {"message": f"bad key {KEY}"}})] * 3
    with pytest.raises(APIJudgeError, match="failed 3 times") as error:
        metric.post({"model": "judge"}, sleep=waits.append)
    replies.replies = [(401, {}, {"error": {"message": f"Incorrect API key provided: {KEY}"}})]
    with pytest.raises(APIJudgeError, match="HTTP 401: Incorrect API key provided") as refused:
        metric.post({"model": "judge"}, sleep=waits.append)
    _assert_no_key(str(error.value), str(refused.value), caplog.text)
