"""Every reader of model or API output, fed a few hundred seeded, generated inputs each: damaged
documents (fields of every JSON type, removed, added, repeated, too long; nesting past the recursion
limit; integers past Python's digit limit; lone surrogates; cut short; noise). None may raise: each
input is a row with a status and a short reason, a row a parquet file can hold."""

import json
import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from blindspot.humblebench import questions as humble_questions
from blindspot.metrics.api_judge import FAILURES, APIJudgeMetric, read_score, reply_failure
from blindspot.models.api.client import MalformedReply
from blindspot.plugins import Score
from blindspot.protobias.judging import parse_verdict
from blindspot.protobias.triplets import FAILURE_REASONS, validate_triplet

SEED = 17
INPUTS = 300
SEED_ROW = {
    "label": "bird",
    "correct_instance": "penguin",
    "adversarial_instance": "robin",
    "correct_value": "exactly one",
    "adversarial_value": "exactly three",
}
TRIPLET = {
    "neutral_prompt": "A bird on a rock with exactly one branch behind it.",
    "correct_description": "A penguin on a rock with exactly one branch behind it.",
    "adversarial_description": "A robin on a rock with exactly three branches behind it.",
}
VERDICT = {"decision": "accept", "reason": "ok", "explanation": "fine"}
SCENE = {
    "questions": [
        {
            "type": "Attribute",
            "question": "What colour is the car?",
            "options": ["red", "blue", "green", "white"],
            "answer": "A",
        }
    ]
}
REPLY = {
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "7"},
            "finish_reason": "stop",
            "logprobs": {
                "content": [{"token": "7", "logprob": -0.1, "top_logprobs": [{"token": "7", "logprob": -0.1}]}]
            },
        }
    ],
    "usage": {"completion_tokens": 1},
}

DEEP = "[" * 5000 + "]" * 5000
HUGE_INT = "9" * 4400


def _value(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value of any type."""
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 7, 10**30, 2**63])
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e308, -0.0])
    if kind == 4:
        return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x3000)])) for _ in range(8))
    if kind == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": _value(rng, depth + 1) for i in range(rng.randrange(4))}


# A placeholder value, replaced in the JSON text by something json.dumps cannot write.
_RAW = {"deep": DEEP, "huge_int": HUGE_INT, "nan": "NaN", "surrogate": '"\\udc80 x"'}


def _paths(document: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    if isinstance(document, dict):
        for key, value in document.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from _paths(value, (*prefix, index))


def _damaged(rng: random.Random, document: Any) -> Any:
    """One input: the valid document with one damage at a random place, or not a document at all."""
    choice = rng.randrange(12)
    if choice == 0:
        return rng.choice([None, 5, b'{"a": 1}', ["x"], ""])  # not text
    if choice == 1:
        return "".join(chr(rng.randrange(0, 0x11000)) for _ in range(rng.randrange(1, 200)))  # noise
    text = json.dumps(document)
    if choice == 2:
        return text[: rng.randrange(len(text))]  # cut short
    if choice == 3:
        return text
    copy = json.loads(text)
    path = rng.choice(list(_paths(copy))[1:])
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if choice == 4 and isinstance(parent, dict):
        del parent[last]
        return json.dumps(copy)
    if choice == 5 and isinstance(parent, dict):  # a key repeated with another value
        return json.dumps(copy).replace(f'"{last}": ', f'"{last}": {json.dumps(_value(rng))}, "{last}": ', 1)
    if choice == 6:
        parent[last] = rng.choice(["x" * rng.choice([301, 10**4, 10**5]), " ", "None of the above", "A"])
    elif choice == 7:
        marker = rng.choice(list(_RAW))
        parent[last] = f"@@{marker}@@"
        return json.dumps(copy).replace(f'"@@{marker}@@"', _RAW[marker])
    elif choice == 8 and isinstance(parent, dict):
        parent[f"extra{rng.randrange(3)}"] = _value(rng)
    elif choice == 9:
        copy = {f"field{i}": i for i in range(rng.choice([10, 10**4]))} | (copy if isinstance(copy, dict) else {})
    else:
        parent[last] = _value(rng)
    return json.dumps(copy)


def _inputs(document: Any) -> list[Any]:
    rng = random.Random(SEED)
    return [_damaged(rng, document) for _ in range(INPUTS)]


def _crashes(parse: Callable[[Any], Any], inputs: list[Any]) -> tuple[list[Any], list[str]]:
    results, crashes = [], []
    for text in inputs:
        try:
            results.append(parse(text))
        except Exception as error:  # the test counts them: every one is a shard that would have failed
            crashes.append(f"{type(error).__name__}: {str(error)[:100]} on {str(text)[:100]!r}")
    return results, crashes


def _storable(*values: Any) -> None:
    """What goes into a row survives a parquet column (no lone surrogates) and stays one short line."""
    for value in values:
        assert isinstance(value, str)
        pa.array([value])


def test_validate_triplet_never_raises():
    results, crashes = _crashes(lambda text: validate_triplet(text, SEED_ROW), _inputs(TRIPLET))
    assert crashes == []
    for checked in results:
        assert checked.status in {"ok", *FAILURE_REASONS}
        assert bool(checked.reason) == (checked.status != "ok")
        assert len(checked.reason) < 300
        _storable(checked.reason, *checked.fields.values())
    statuses = {checked.status for checked in results}
    assert {"ok", "invalid_json", "missing_field", "schema_violation"} <= statuses


def test_parse_verdict_never_raises():
    results, crashes = _crashes(parse_verdict, _inputs(VERDICT))
    assert crashes == []
    for verdict in results:
        assert verdict["accept"] == (verdict["status"] == "ok" and verdict["verdict_reason"] == "ok")
        assert len(verdict["reason"]) < 300
        assert len(verdict["explanation"]) <= 160
        _storable(verdict["reason"], verdict["explanation"], verdict["verdict_reason"])
    statuses = {verdict["status"] for verdict in results}
    assert {"ok", "invalid_json", "missing_field", "invalid_value", "schema_violation"} <= statuses


def test_parse_scene_questions_never_raises():
    graph = {"image_id": "street", "file_name": "street.png"}
    results, crashes = _crashes(lambda text: humble_questions.parse_scene_questions(text, graph), _inputs(SCENE))
    assert crashes == []
    for rows, status in results:
        assert status in {"ok", "malformed"}
        assert (status == "malformed") <= (rows == [])
        for row in rows:
            options = json.loads(row["options"])
            assert len(options) == 5
            assert len(row["question"]) <= 200
            assert all(len(option) <= 80 for option in options)
            _storable(row["question"], *options, row["label"], row["type"])
    assert {status for _, status in results} == {"ok", "malformed"}
    assert any(humble_questions.problem(row) for rows, _ in results for row in rows)


@pytest.fixture
def judge(monkeypatch, tmp_path) -> APIJudgeMetric:
    monkeypatch.setenv("BLINDSPOT_FUZZ_KEY", "sk-fuzz")
    return APIJudgeMetric(
        {"id": "judge", "endpoint": "http://127.0.0.1:9/v1", "api_key_env": "BLINDSPOT_FUZZ_KEY"}, tmp_path
    )


def test_api_replies_are_read_or_refused_never_raised(judge):
    def read(body: Any) -> tuple[str | None, Score | None]:
        try:
            response = judge.client._reply(body if isinstance(body, str) else json.dumps(body, default=str))
        except MalformedReply:
            return "malformed", None
        failure = reply_failure(response)
        return failure, read_score(response) if failure is None else None

    results, crashes = _crashes(read, _inputs(REPLY))
    assert crashes == []
    for failure, score in results:
        assert failure is None or failure in FAILURES
        if score is not None:
            assert math.isnan(score.raw) or 1 <= score.raw <= 10
            _storable(score.detail)
    failures = {failure for failure, _ in results}
    assert {None, "malformed", "empty"} <= failures
