"""Reasoning models: the answer read after the reasoning, the reasoning kept, an answer the token budget
cut off counted; on answers written the way the paper's reasoning models write them, and end to end
with the tiny preset's reasoning-template VLM (config/tiny.yaml, `tiny-qwen2.5-vl-thinking`)."""

import dataclasses
import json

import pytest
from helpers.humble import OPTIONS, TEMPLATE, questions
from PIL import Image

from blindspot import schemas
from blindspot.humblebench.humility import parsed_texts
from blindspot.humblebench.parsing import parse_answer
from blindspot.humblebench.reasoning import cut_off, split_reasoning
from blindspot.humblebench.tables import metrics_table
from blindspot.io import read_table, write_table

# (what the model writes, the reasoning kept, the letter read). Each reasoning names other letters, so
# the whole text, read as one answer, names several: only the part after the reasoning is the answer.
WRITTEN = {
    # R1-Onevision (its prompt asks for the letter at the end; the official wrapper answers after </think>)
    "R1-Onevision": (
        "<think>\nThe car is red, so option A fits; B and C do not.\n</think>\n\nAnswer: A",
        "<think>\nThe car is red, so option A fits; B and C do not.",
        "A",
    ),
    # GLM-4.1V-Thinking boxes its answer inside <answer>
    "GLM-4.1V-Thinking": (
        "<think>Not B (green), not C (blue): the car is yellow.</think>"
        "<answer><|begin_of_box|>D<|end_of_box|></answer>",
        "<think>Not B (green), not C (blue): the car is yellow.",
        "D",
    ),
    # Visionary-R1: <info> describes, <think> reasons, <answer> answers
    "Visionary-R1": (
        "<info> A red car on a street. </info> <think> A is red; B, C, D are not. </think> <answer>A</answer>",
        "<info> A red car on a street. </info> <think> A is red; B, C, D are not.",
        "A",
    ),
    # LLaVA-CoT's four stages; the official wrapper answers after <CONCLUSION>
    "LLaVA-CoT": (
        "<SUMMARY> I will compare the car with options A to D. </SUMMARY>\n\n<CAPTION> A grey car. "
        "</CAPTION>\n\n<REASONING> Neither A, B, C nor D is grey. </REASONING>\n\n<CONCLUSION> E "
        "</CONCLUSION>",
        "<SUMMARY> I will compare the car with options A to D. </SUMMARY>\n\n<CAPTION> A grey car. "
        "</CAPTION>\n\n<REASONING> Neither A, B, C nor D is grey. </REASONING>",
        "E",
    ),
    # Mulberry and R1-VL answer "The final answer is: xxx", as their prompts ask
    "Mulberry": (
        "### Image Description:\nA blue car.\n### Rationales:\nA and B are wrong.\n### Let's think step "
        "by step.\n### Step 1: The car is blue.\n### The final answer is: C",
        "### Image Description:\nA blue car.\n### Rationales:\nA and B are wrong.\n### Let's think step by "
        "step.\n### Step 1: The car is blue.\n### The",
        "C",
    ),
    "R1-VL": (
        "The car is green, which rules out A and C. The final answer is: B. green",
        "The car is green, which rules out A and C. The",
        "B",
    ),
    # Kimi-VL-Thinking's own markers
    "Kimi-VL-Thinking": (
        "\u25c1think\u25b7Is it A or B? It is B.\u25c1/think\u25b7The answer is B.",
        "\u25c1think\u25b7Is it A or B? It is B.",
        "B",
    ),
    # a chat template that opens <think> itself (Qwen3-VL-Thinking): the text starts inside the reasoning
    "template opens <think>": (
        "Red is A, but the car is blue, so not A or B.\n</think>\n\nC",
        "Red is A, but the car is blue, so not A or B.",
        "C",
    ),
}


@pytest.mark.parametrize("model", WRITTEN)
def test_the_answer_is_read_after_the_reasoning_the_way_each_model_writes_it(model):
    written, reasoning, letter = WRITTEN[model]
    split = split_reasoning(written)
    assert split.closed
    assert split.reasoning == reasoning
    assert parse_answer(split.answer, OPTIONS) == letter
    assert parse_answer(written, OPTIONS) == letter  # the parser reads after the reasoning itself
    assert split_reasoning(split.answer).answer == split.answer  # an answer has no reasoning left in it
    # Stopped or not, an answer after a closed reasoning was not cut off.
    assert not cut_off(stopped=False, split=split)


def test_an_answer_without_reasoning_is_all_answer_and_one_cut_off_is_counted():
    plain = split_reasoning("E. None of the above")
    assert (plain.reasoning, plain.answer, plain.closed) == ("", "E. None of the above", False)
    assert not cut_off(stopped=True, split=plain)
    # The budget ran out inside the reasoning: no end of sequence, no closing marker.
    cut = split_reasoning("<think>\nThe car could be red (A) or green (B); looking at the")
    assert cut_off(stopped=False, split=cut)
    assert parse_answer(cut.answer, OPTIONS) is None
    # The last marker ends the reasoning; any case.
    twice = split_reasoning("<think>a</think> wait <think>b</THINK> E")
    assert (twice.reasoning, twice.answer) == ("<think>a</think> wait <think>b", "E")


@pytest.mark.slow
def test_the_tiny_reasoning_vlm_answers_with_its_own_budget_and_its_cut_off_answers_are_counted(
    built_config, tmp_path, monkeypatch
):
    """`answer_humble` as its rule calls it, with the tiny preset's reasoning-template VLM: its protocol's
    budget (humble_protocol.max_tokens: 12) overrides humblebench.max_new_tokens (8); its random weights never
    close the reasoning its template opened, nor end the sequence, so every answer is cut off, counted in the
    job's counters and in the metrics per model."""
    from blindspot.models.spec import model_spec
    from blindspot.models.vlm_scoring import TransformersVLMScorer
    from blindspot.registry import answer_protocol
    from blindspot.steps.humble import answer_humble

    name = "tiny-qwen2.5-vl-thinking"
    humble = built_config["humblebench"]
    assert name in humble["vlms"]
    spec = model_spec(built_config, name)
    protocol = answer_protocol(built_config, name)
    assert protocol.max_tokens == 12 != humble["max_new_tokens"]
    scorer = TransformersVLMScorer(spec, batch_size=4)
    prompt = scorer.processor.apply_chat_template([{"role": "user", "content": "?"}], add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")  # the template opens the reasoning

    budgets, choose = [], TransformersVLMScorer.choose  # the real method, its budget noted

    def noting_budget(self, conversations, images, candidates, max_new_tokens, decoding=None, seeds=None):
        budgets.append(max_new_tokens)
        return choose(self, conversations, images, candidates, max_new_tokens, decoding, seeds)

    monkeypatch.setattr(TransformersVLMScorer, "choose", noting_budget)
    table = questions(tmp_path, 4)
    write_table(tmp_path / "questions.parquet", table, schemas.HUMBLE_QUESTIONS)
    out, counters_out = tmp_path / "answers.parquet", tmp_path / "counters.json"
    answer_humble(
        questions=str(tmp_path / "questions.parquet"),
        templates=[str(TEMPLATE)],
        prompt=protocol.prompt,
        model=dataclasses.asdict(spec),
        protocol=protocol.params(),
        settings={"original": {}},
        answer_shards=1,
        batch_size=4,
        seed=3,
        journal=str(tmp_path / "journal.jsonl"),
        vlm=name,
        shard="00000",
        out=str(out),
        counters_out=str(counters_out),
    )
    frame = read_table(out, schemas.HUMBLE_ANSWERS)
    assert len(frame) == 4
    assert (~frame["stopped"]).all()
    assert frame["cut_off"].all()
    assert (frame["reasoning"] == "").all()  # never closed: all of it stands as the answer, read as such
    assert parsed_texts(frame).tolist() == frame["prediction_text"].tolist()
    counters = json.loads(counters_out.read_text())
    assert (counters["questions"], counters["cut_off"], counters["reasoned"]) == (4, 4, 0)
    assert budgets == [12]  # the protocol's budget, not humblebench.max_new_tokens's 8
    # The metrics report the share cut off per model; answers that do not say (made elsewhere) have none.
    found = metrics_table(frame.assign(vlm=name), readings=("text",))
    assert found["cut_off"].tolist() == [1.0]
    assert metrics_table(frame.drop(columns="cut_off"), readings=("text",))["cut_off"].isna().all()


@pytest.mark.slow
def test_an_answer_that_ends_its_sequence_is_stopped(built_config, tmp_path):
    """`choose` says whether each answer ended on its own: the tiny VLM's greedy first token made its
    end-of-sequence token, it stops there."""
    from blindspot.models.spec import model_spec
    from blindspot.models.vlm_scoring import TransformersVLMScorer, image_question

    scorer = TransformersVLMScorer(model_spec(built_config, "tiny-qwen2.5-vl"), batch_size=2)
    images = [Image.new("RGB", (40, 32), "red"), Image.new("RGB", (32, 48), "blue")]
    conversations = [image_question("What colour?")] * 2
    letters = [scorer.tokenizer.encode(letter, add_special_tokens=False)[0] for letter in "ABCDE"]
    first = scorer.choose(conversations, images, letters, 6)
    assert [stopped for _, _, stopped in first] == [False, False]  # random weights never end it in 6
    prompt = scorer.inputs(conversations[:1], images[:1])
    greedy = scorer.model.generate(**prompt, max_new_tokens=1, do_sample=False)[0, -1].item()
    scorer.model.generation_config.eos_token_id = [greedy]
    again = scorer.choose(conversations[:1], images[:1], letters, 6)
    assert again[0][2] is True
    assert again[0][0] == pytest.approx(first[0][0])  # the same first position
