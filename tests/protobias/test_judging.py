import json

import pandas as pd
import pytest
from helpers.workflow import REPO

from blindspot.models.spec import model_spec
from blindspot.models.textgen import load_text_generator
from blindspot.prompts import PromptTemplate
from blindspot.protobias.judging import JUDGE_REASONS, accept_unanimous, judge_triplets, parse_verdict
from blindspot.protobias.taxonomy import sample_seeds


@pytest.mark.parametrize(
    ("text", "accept", "status"),
    [
        ('{"decision": "accept", "reason": "ok", "explanation": "fine"}', True, "ok"),
        ('{"decision": "reject", "reason": "wrong_domain", "explanation": "a fish"}', False, "ok"),
        ('{"decision": "accept", "reason": "wrong_instance", "explanation": ""}', False, "inconsistent_verdict"),
        ('{"decision": "reject", "reason": "ok", "explanation": ""}', False, "inconsistent_verdict"),
        ('{"decision": "maybe", "reason": "ok"}', False, "invalid_value"),
        ('{"decision": "accept"}', False, "missing_field"),
        ('{"decision": "acc', False, "invalid_json"),
    ],
)
def test_parse_verdict(text, accept, status):
    verdict = parse_verdict(text)
    assert (verdict["accept"], verdict["status"]) == (accept, status)


@pytest.mark.parametrize(
    ("text", "status", "reason"),
    [
        ("[" * 5000 + "]" * 5000, "invalid_json", "not valid JSON: nested too deeply"),
        (
            '{"decision": "accept", "reason": "ok", "explanation": ' + "[" * 5000 + "]" * 5000 + "}",
            "invalid_json",
            "not valid JSON: nested too deeply",
        ),
        ('{"decision": ' + "1" * 4301 + ', "reason": "ok"}', "invalid_json", "not valid JSON: Exceeds the limit"),
        (
            json.dumps({"decision": "accept", "reason": "ok", "explanation": "x" * 161}),
            "schema_violation",
            "explanation has 161 characters, over the schema's maxLength 160",
        ),
        (
            json.dumps({"decision": "reject", "reason": "other", "explanation": ["a", "b"]}),
            "schema_violation",
            "explanation: ['a', 'b'] is not of type 'string'",
        ),
        (
            json.dumps({"decision": "accept", "reason": "ok"}),
            "schema_violation",
            "the output: 'explanation' is a required property",
        ),
        (
            json.dumps({"decision": "accept", "reason": "ok", "explanation": "", "confidence": 1}),
            "schema_violation",
            "the output: Additional properties are not allowed ('confidence' was unexpected)",
        ),
        (
            '{"decision": "reject", "reason": "ok", "decision": "accept", "explanation": ""}',
            "invalid_json",
            "not valid JSON: the key 'decision' is repeated",
        ),
        (json.dumps({"decision": "x" * 10**6, "reason": ["ok"]}), "invalid_value", "decision='xxxxxxxx"),
    ],
)
def test_a_verdict_that_breaks_a_json_reader_or_the_schema_is_a_rejection_with_a_reason(text, status, reason):
    verdict = parse_verdict(text)
    assert (verdict["accept"], verdict["status"], verdict["reason"][: len(reason)]) == (False, status, reason)
    assert len(verdict["reason"]) < 200
    assert len(verdict["explanation"]) <= 160


def raw_row(triplet_id, seed_id, status="ok", generator="g1"):
    return {
        "triplet_id": triplet_id,
        "seed_id": seed_id,
        "domain": "animals",
        "generator": generator,
        "neutral_prompt": "T",
        "correct_description": "Dc",
        "adversarial_description": "Da",
        "model": generator,
        "model_id": f"hub/{generator}",
        "model_revision": "",
        "template_version": "generate/v1+ab",
        "sampling": "{}",
        "raw_output": "{}",
        "status": status,
        "reason": "",
    }


def verdict_row(triplet_id, judge, accept, reason="ok", status="ok"):
    return {"triplet_id": triplet_id, "judge": judge, "accept": accept, "verdict_reason": reason, "status": status}


@pytest.fixture
def seeds():
    frame = sample_seeds(REPO / "config" / "taxonomy" / "animals.yaml", "animals", 4, 0)
    return frame


def test_only_triplets_every_judge_accepted_are_kept(seeds):
    ids = list(seeds["seed_id"])
    raw = pd.DataFrame(
        [
            raw_row("t1", ids[0]),
            raw_row("t2", ids[1]),
            raw_row("t3", ids[2], generator="g2"),
            raw_row("t4", ids[3], status="wrong_instance"),
        ]
    )
    judgments = pd.DataFrame(
        [
            verdict_row("t1", "j1", True),
            verdict_row("t1", "j2", True),
            verdict_row("t2", "j1", True),
            verdict_row("t2", "j2", False, "more_than_one_change"),
            verdict_row("t3", "j1", False, "", "invalid_json"),
            verdict_row("t3", "j2", True),
        ]
    )
    kept, counters = accept_unanimous(raw, judgments, seeds, ["j1", "j2"])
    assert list(kept["triplet_id"]) == ["t1"]
    assert kept.loc[0, "correct_instance"] == seeds.loc[0, "correct_instance"]
    assert kept.loc[0, "judges"] == "j1,j2"
    assert counters["generated"] == 4
    assert counters["valid"] == 3
    assert counters["accepted"] == 1
    assert counters["generation_failures"] == {"g1": {"wrong_instance": 1}}
    assert counters["rejections_per_judge"] == {"j1": {"invalid_json": 1}, "j2": {"more_than_one_change": 1}}
    assert counters["accepted_per_generator"] == {"g1": 1}


def test_a_valid_triplet_without_a_verdict_is_an_error(seeds):
    raw = pd.DataFrame([raw_row("t1", seeds["seed_id"][0]), raw_row("t2", seeds["seed_id"][1])])
    judgments = pd.DataFrame([verdict_row("t1", "j1", True), verdict_row("t2", "j1", True)])
    with pytest.raises(ValueError, match="without a verdict"):
        accept_unanimous(raw, judgments, seeds, ["j1", "j2"])


@pytest.mark.slow
def test_the_schema_ties_decision_to_reason_even_for_a_random_judge(built_config, seeds):
    triplets = pd.DataFrame([raw_row(f"t{i}", s) for i, s in enumerate(seeds["seed_id"])])
    engine = load_text_generator(model_spec(built_config, "tiny-qwen2"), seed=3, batch_size=4)
    template = PromptTemplate.load(REPO / built_config["prompt_stage"]["judge_template"])
    frame, counters = judge_triplets(triplets, seeds, engine, template)
    assert counters["rows"] == len(seeds)
    for raw in frame["raw_output"]:
        verdict = json.loads(raw)
        assert verdict["reason"] in JUDGE_REASONS
        assert (verdict["decision"] == "accept") == (verdict["reason"] == "ok")
    assert (frame["status"] == "ok").all()
    assert frame["judge"].eq("tiny-qwen2").all()
