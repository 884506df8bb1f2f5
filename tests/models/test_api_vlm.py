"""A VLM behind an OpenAI-compatible endpoint answering HumbleBench (`models.api.vlm`): the letters read
from logprobs where a reply has them, else from the text; and against a real server on 127.0.0.1
(`transformers serve` with the tiny random Qwen2.5-VL), every answer cached, nothing asked twice,
the key stored nowhere, and the plan's bill counting its requests."""

import copy
import json
import math

import pytest
import yaml
from helpers.api_server import KEY, KEY_ENV, _letter_bias, served_posts, serving
from helpers.humble import LETTER_PROMPT, TEMPLATE, letter_protocol, questions
from helpers.workflow import REPO

from blindspot import plan
from blindspot.humblebench.answers import answer_shard
from blindspot.models.api.vlm import APIVLM, letter_probabilities, load_answerer, reply_failure
from blindspot.models.spec import ModelSpec, model_spec
from blindspot.prompts import PromptTemplate

FAST_CLIENT = {"concurrency": 2, "timeout_s": 60, "max_attempts": 3, "backoff_base_s": 0.05, "backoff_cap_s": 0.2}


def _reply(text: str, *positions: dict) -> dict:
    choice = {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    if positions:
        choice["logprobs"] = {"content": list(positions)}
    return {"choices": [choice]}


def _position(token: str, candidates: dict[str, float]) -> dict:
    top = [{"token": t, "logprob": math.log(p)} for t, p in candidates.items()]
    return {"token": token, "logprob": top[0]["logprob"], "top_logprobs": top}


def test_letters_come_from_the_first_answer_tokens_candidates_merged_by_their_stripped_text():
    reply = _reply(" B", _position(" ", {" ": 0.9}), _position(" B", {" B": 0.5, "B": 0.2, "A": 0.1, "x": 0.2}))
    assert letter_probabilities(reply, list("ABCDE")) == pytest.approx([0.1, 0.7, 0, 0, 0])


@pytest.mark.parametrize("reply", [_reply("B"), _reply("B", _position("The", {"The": 0.9, "It": 0.1}))])
def test_without_letter_logprobs_there_is_no_letter_distribution(reply):
    assert all(math.isnan(p) for p in letter_probabilities(reply, list("ABCDE")))


def test_a_reply_without_text_or_withheld_is_no_answer():
    assert reply_failure(_reply("")) == "empty"
    assert reply_failure({"choices": [{"message": {"content": "A"}, "finish_reason": "content_filter"}]}) == (
        "content_filter"
    )
    assert reply_failure({"choices": "A"}) == "malformed"
    assert reply_failure(_reply("A")) is None


def _spec(model: str, port: int = 9, **extra) -> ModelSpec:
    return ModelSpec(
        name="api-vlm",
        backend="openai_api",
        gpus=0,
        dtype="none",
        path=model,
        endpoint=f"http://127.0.0.1:{port}/v1",
        api_key_env=KEY_ENV,
        **extra,
    )


def test_without_its_key_the_job_stops_in_one_line_naming_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ValueError, match=f"^api-vlm: the API key variable {KEY_ENV} is not set or empty") as error:
        load_answerer(_spec("m"), 4, tmp_path)
    assert "\n" not in str(error.value)


def test_the_request_carries_the_image_and_the_answer_budget_unless_the_entry_sets_one(monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    conversation = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which? A. x"}]}]
    vlm = APIVLM(_spec("m", request={"temperature": 0}), 4, tmp_path)
    body = vlm.body(conversation, {"type": "image_url", "image_url": {"url": "data:,"}}, 16)
    assert body == {
        "max_tokens": 16,
        "temperature": 0,
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:,"}},
                    {"type": "text", "text": "Which? A. x"},
                ],
            }
        ],
    }
    reasoning = APIVLM(_spec("m", request={"max_completion_tokens": 4096}), 4, tmp_path)
    assert "max_tokens" not in reasoning.body(conversation, {}, 16)
    assert vlm.cache_key(conversation, "a" * 64, 16) != vlm.cache_key(conversation, "b" * 64, 16)
    assert KEY not in repr(vlm)


def test_without_its_key_the_workflows_job_answers_nothing_and_the_tables_go_on(monkeypatch, tmp_path, caplog):
    """As an API metric without its key is skipped: the job writes an empty answer table, sends nothing
    (its endpoint is a closed port) and says why; the key set later changes its param, so it runs again."""
    import dataclasses

    from blindspot import schemas
    from blindspot.io import read_table, write_table
    from blindspot.steps.humble import answer_humble

    monkeypatch.delenv(KEY_ENV, raising=False)
    write_table(tmp_path / "questions.parquet", questions(tmp_path, 6), schemas.HUMBLE_QUESTIONS)
    model = dataclasses.asdict(_spec("m", port=1, client=FAST_CLIENT))
    with caplog.at_level("WARNING"):
        answer_humble(
            questions=str(tmp_path / "questions.parquet"),
            templates=[str(TEMPLATE)],
            prompt=str(LETTER_PROMPT),
            model=model,
            protocol=letter_protocol(8).params(),
            settings={"original": {}},
            answer_shards=1,
            batch_size=None,
            seed=0,
            journal=str(tmp_path / "journal"),
            vlm="api-vlm",
            shard="00000",
            out=str(tmp_path / "answers.parquet"),
            counters_out=str(tmp_path / "counters.json"),
            cache=str(tmp_path / "cache"),
            planned_requests=6,
            api_key_is_set=False,
        )
    assert read_table(tmp_path / "answers.parquet", schemas.HUMBLE_ANSWERS).empty
    assert json.loads((tmp_path / "counters.json").read_text())["questions"] == 0
    assert f"api-vlm: the API key variable {KEY_ENV} is not set or empty; skipping its 6 questions" in caplog.text


def test_a_batch_is_rounds_of_as_many_questions_as_the_client_may_have_in_flight(monkeypatch, tmp_path):
    """A batch waits for its slowest reply: BATCH_ROUNDS rounds of the client's cap, so its tail idles the
    endpoint once a batch, not once a round."""
    from blindspot.models.api.client import BATCH_ROUNDS

    monkeypatch.setenv(KEY_ENV, KEY)
    assert BATCH_ROUNDS >= 8
    assert (
        APIVLM(_spec("m", client={"concurrency": 2, "max_concurrency": 8}), 4, tmp_path).batch_size == 8 * BATCH_ROUNDS
    )
    assert load_answerer(_spec("m", client={"concurrency": 2}), None, tmp_path).batch_size == 64 * BATCH_ROUNDS


@pytest.fixture(scope="module")
def server(built_config, tmp_path_factory):
    with serving(model_spec(built_config, "tiny-qwen2.5-vl").path, tmp_path_factory.mktemp("serve")) as served:
        yield served


@pytest.mark.slow
@pytest.mark.integration
def test_a_served_vlm_answers_a_shard_then_nothing_is_asked_twice(server, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    caplog.set_level("DEBUG")
    request = {"max_tokens": 1, "temperature": 0, "logit_bias": _letter_bias(server["model"])}
    spec = _spec(server["model"], server["port"], request=request, client=FAST_CLIENT)
    cache, table, template = tmp_path / "cache", questions(tmp_path, 5), PromptTemplate.load(TEMPLATE)
    built = []

    def load():
        built.append(load_answerer(spec, 2, cache))
        return built[-1]

    def answer(journal: str):
        settings = {"original": ({}, template)}
        return answer_shard(table, settings, spec, load, letter_protocol(8), 0, tmp_path / journal)

    posts = served_posts(server["log"])
    frame, counters = answer("one.jsonl")
    assert built[0].client.requests_sent == served_posts(server["log"]) - posts == len(table)
    assert (frame["prediction_text"].isin(list("ABCDE"))).all()  # the same parser as a local model's
    # transformers serve returns no logprobs: the letter reading is the text's
    assert (frame["prediction_logits"] == frame["prediction_text"]).all()
    assert frame["letter_mass"].isna().all()
    assert all(json.loads(p) == [None] * 5 for p in frame["letter_probabilities"])
    assert counters["letters_from_text"] == counters["text_and_logits_agree"] == len(table)
    assert (frame["model_id"] == server["model"]).all()
    assert len(list(cache.rglob("*.json"))) == len(table)

    # A new job (another journal) asks the server nothing; one whose cached answer is lost asks only that one.
    posts = served_posts(server["log"])
    again, _ = answer("two.jsonl")
    assert built[1].client.requests_sent == 0
    assert built[1].cache_hits == len(table)
    assert served_posts(server["log"]) == posts
    assert again.equals(frame)
    next(cache.rglob("*.json")).unlink()
    answer("three.jsonl")
    assert built[2].client.requests_sent == served_posts(server["log"]) - posts == 1
    for path in [*cache.rglob("*"), server["log"]]:
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path
    assert KEY not in caplog.text


def test_the_plans_bill_asks_each_question_once_per_setting_at_the_registrys_prices(tiny_config):
    config = copy.deepcopy(tiny_config)
    config["models"]["api-vlm"] = {
        "id": "gemini-3-flash",
        "backend": "openai_api",
        "endpoint": "http://127.0.0.1:9/v1",
        "api_key_env": KEY_ENV,
        "gpus": 0,
        "prices": {
            "input_per_million": 0.5,
            "output_per_million": 3.0,
            "image_tokens": 258,
            "read": "2026-01-01",
            "source": "https://example.org/pricing",
        },
    }
    config["humblebench"]["vlms"] = [*config["humblebench"]["vlms"], "api-vlm"]
    result = plan.plan(config)
    jobs = result["jobs"]
    answers = jobs[jobs["rule"] == "answer_api_humble"]
    assert len(answers) == config["humblebench"]["answer_shards"]  # each job asks every setting
    # A model of the proprietary group answers the Original setting only: a sixth of the requests.
    config["models"]["api-vlm"]["group"] = "proprietary"
    proprietary = plan.plan(config)
    asked = proprietary["jobs"][proprietary["jobs"]["rule"] == "answer_api_humble"]
    assert len(asked) == config["humblebench"]["answer_shards"]
    assert proprietary["bill"].set_index("model").loc["api-vlm", "requests"] == asked["items"].sum() > 0
    assert asked["items"].sum() * len(config["humblebench"]["settings"]) == answers["items"].sum()
    assert (answers["gpus"] == 0).all()
    row = result["bill"].set_index("model").loc["api-vlm"]
    assert row["step"] == "answer_api_humble"
    assert row["requests"] == answers["items"].sum() > 0
    assert row["output_tokens"] == row["requests"] * config["humblebench"]["max_new_tokens"]
    assert row["image_tokens"] == row["requests"] * 258
    expected = (row["input_tokens"] + row["image_tokens"]) * 0.5e-6 + row["output_tokens"] * 3e-6
    assert row["cost_usd"] == pytest.approx(expected)
    from blindspot.cli import render_plan

    text = render_plan(result, "config/tiny.yaml", "md")
    assert "| answer_api_humble " in text
    assert f"{row['cost_usd']:,.2f}" in text
    assert (
        yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())["humblebench"]["vlms"]
        == tiny_config["humblebench"]["vlms"]
    )
