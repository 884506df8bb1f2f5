import copy
import json

import pytest
from helpers.outputs import whitespace_outside_strings
from helpers.workflow import REPO

from blindspot.models.spec import model_spec
from blindspot.models.textgen import load_text_generator
from blindspot.prompts import PromptTemplate
from blindspot.protobias.taxonomy import sample_seeds
from blindspot.protobias.triplets import (
    FAILURE_REASONS,
    TRIPLET_FIELDS,
    generate_triplets,
    mentions,
    validate_triplet,
)

SEED = {
    "label": "bird",
    "correct_instance": "penguin",
    "adversarial_instance": "robin",
    "correct_value": "exactly one",
    "adversarial_value": "exactly three",
}
GOOD = {
    "neutral_prompt": "A bird on a rock with exactly one branch behind it.",
    "correct_description": "A penguin on a rock with exactly one branch behind it.",
    "adversarial_description": "A robin on a rock with exactly three branches behind it.",
}


def output(**changes):
    return json.dumps(GOOD | changes)


def test_a_good_triplet_is_ok_and_normalised():
    checked = validate_triplet(output(neutral_prompt="A  bird on a rock\nwith exactly one branch."), SEED)
    assert (checked.status, checked.reason) == ("ok", "")
    assert checked.fields["neutral_prompt"] == "A bird on a rock with exactly one branch."


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ('{"neutral_prompt": "A bird', "invalid_json"),
        ("[1, 2]", "invalid_json"),
        (json.dumps({"neutral_prompt": "x", "correct_description": "y"}), "missing_field"),
        (output(correct_description="   "), "missing_field"),
        (output(adversarial_description=7), "missing_field"),
        (output(neutral_prompt="A penguin on a rock with exactly one branch."), "instance_in_neutral_prompt"),
        (output(neutral_prompt="An animal on a rock with exactly one branch."), "label_missing"),
        (output(correct_description="A puffin on a rock with exactly one branch."), "wrong_instance"),
        (output(correct_description="A penguin and a robin with exactly one branch."), "wrong_instance"),
        (output(adversarial_description="A penguin with exactly three branches."), "wrong_instance"),
        (output(neutral_prompt="A bird on a rock with two branches."), "knob_not_applied"),
        (output(correct_description="A penguin on a rock with branches."), "knob_not_applied"),
        (output(adversarial_description="A robin on a rock with exactly one branch."), "knob_not_applied"),
    ],
)
def test_every_failure_is_kept_with_its_reason(text, status):
    checked = validate_triplet(text, SEED)
    assert checked.status == status
    assert checked.status in FAILURE_REASONS
    assert checked.reason
    assert set(checked.fields) == set(TRIPLET_FIELDS)


@pytest.mark.parametrize(
    ("text", "status", "reason"),
    [
        ("[" * 5000 + "]" * 5000, "invalid_json", "not valid JSON: nested too deeply"),
        (output(neutral_prompt=[[["x"]]]), "missing_field", "missing or empty: neutral_prompt"),
        ('{"neutral_prompt": ' + "9" * 4301 + "}", "invalid_json", "not valid JSON: Exceeds the limit (4300 digits)"),
        (
            output(neutral_prompt="A bird " + "with exactly one branch " * 13),
            "schema_violation",
            "neutral_prompt has 319 characters, over the schema's maxLength 300",
        ),
        (
            output(note="x"),
            "schema_violation",
            "the output: Additional properties are not allowed ('note' was unexpected)",
        ),
        (output()[:-1] + ', "neutral_prompt": "A bird."}', "invalid_json", "not valid JSON: the key 'neutral_prompt'"),
        (output(correct_description="\ud800 penguin"), "invalid_json", "not valid JSON: a string holds a lone surro"),
        ('{"neutral_prompt": NaN}', "invalid_json", "not valid JSON: NaN is not JSON"),
        (None, "invalid_json", "expected text, got NoneType"),
    ],
)
def test_output_that_breaks_a_json_reader_or_the_schema_is_a_failed_row(text, status, reason):
    checked = validate_triplet(text, SEED)
    assert (checked.status, checked.reason[: len(reason)]) == (status, reason)
    assert len(checked.reason) < 200
    assert checked.status in FAILURE_REASONS


def test_mentions_matches_whole_words_and_plurals():
    assert mentions("Two Penguins swim", "penguin")
    assert mentions("a walking  stick insect", "walking stick insect")
    assert mentions("a wealthy LGBTQ+ person", "LGBTQ+ person")
    assert not mentions("a caterpillar", "cat")
    assert not mentions("a bobcat", "cat")
    assert not mentions("an e-scooter", "scooter")


@pytest.fixture(scope="module")
def objects_seeds():
    return sample_seeds(REPO / "config" / "taxonomy" / "objects.yaml", "objects", 4, 3)


@pytest.mark.slow
def test_constrained_decoding_gives_schema_valid_json_even_from_random_weights(built_config, objects_seeds):
    config = copy.deepcopy(built_config)
    config["models"]["tiny-qwen2"]["generation"]["max_tokens"] = 1200  # room for three full-length fields
    engine = load_text_generator(model_spec(config, "tiny-qwen2"), seed=1, batch_size=2)
    template = PromptTemplate.load(REPO / built_config["prompt_stage"]["generate_template"])
    frame, counters = generate_triplets(objects_seeds, engine, template)
    assert len(frame) == counters["rows"] == 4
    for raw in frame["raw_output"]:
        assert set(json.loads(raw)) == set(TRIPLET_FIELDS)
        assert whitespace_outside_strings(raw) == [], raw  # what vLLM emits too (tests/models/test_vllm.py)
    assert "invalid_json" not in counters["failed"]
    assert frame["template_version"].eq(template.version).all()
    assert frame["model_id"].eq("built:tiny-qwen2").all()
    assert json.loads(frame["sampling"][0])["seed"] == 1


@pytest.mark.slow
def test_a_real_small_llm_writes_valid_triplets(built_config, objects_seeds):
    engine = load_text_generator(model_spec(built_config, "smollm2-135m"), seed=7, batch_size=4)
    template = PromptTemplate.load(REPO / built_config["prompt_stage"]["generate_template"])
    frame, counters = generate_triplets(objects_seeds, engine, template)
    assert counters["ok"] >= 1
    # One row per seed, in the seeds' order, and counters that add up to the frame's statuses.
    assert frame["seed_id"].tolist() == objects_seeds["seed_id"].tolist()
    assert frame["domain"].tolist() == objects_seeds["domain"].tolist()
    assert frame["triplet_id"].is_unique
    statuses = frame["status"].value_counts().to_dict()
    assert counters["rows"] == len(frame) == len(objects_seeds)
    assert counters["ok"] == statuses.pop("ok", 0)
    assert counters["failed"] == statuses
    assert set(statuses) <= set(FAILURE_REASONS)
    for row in frame.itertuples():
        assert (row.reason == "") == (row.status == "ok"), row  # a failure says why, a success does not
        stored = [getattr(row, name) for name in TRIPLET_FIELDS]
        if row.status in ("invalid_json", "missing_field", "schema_violation"):  # nothing usable to store
            assert stored == ["", "", ""], row
        else:  # the stored fields are the model's, whitespace collapsed
            parsed = json.loads(row.raw_output)
            assert stored == [" ".join(parsed[name].split()) for name in TRIPLET_FIELDS], row.raw_output
