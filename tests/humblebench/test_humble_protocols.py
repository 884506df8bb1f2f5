"""Each VLM asked as its authors ran it (`humblebench.protocols`): the request this project sends, held
against what the official HumbleBench wrapper builds (tests/data/humblebench_official_wrappers.json, read
from the official code), the answer cut where the wrapper cuts, and the settings each model answers."""

import copy
import json

import pytest
from helpers.humble import OPTIONS, TEMPLATE, letter_protocol
from helpers.workflow import REPO

from blindspot.config import ConfigError
from blindspot.humblebench.answers import Asked
from blindspot.humblebench.protocols import cut_answer, question_seed
from blindspot.humblebench.settings import Question, lettered, present
from blindspot.prompts import PromptTemplate
from blindspot.registry import Decoding, answer_protocol, vlm_settings

OFFICIAL = json.loads((REPO / "tests" / "data" / "humblebench_official_wrappers.json").read_text())
QUESTION = Question("7", "What is the colour of the car?", OPTIONS, "B", "Attribute")


def official_decoding(generate: dict) -> Decoding:
    """What an official wrapper's decoding arguments do: top_k=1 is greedy whatever the temperature; vLLM's
    SamplingParams (`max_tokens`) sample at their temperature; transformers' `do_sample` samples at its
    default temperature, 1.0; a wrapper that passes only a budget leaves the checkpoint's generation config."""
    if generate.get("top_k") == 1:
        return Decoding()
    if "max_tokens" in generate:
        return Decoding("sampled", generate["temperature"])
    if generate.get("do_sample"):
        return Decoding("sampled", generate.get("temperature", 1.0))
    assert set(generate) == {"max_new_tokens"}, generate
    return Decoding("checkpoint")


@pytest.mark.parametrize("vlm", [name for name in OFFICIAL if not name.startswith("_")])
def test_each_model_is_asked_as_its_official_wrapper_asks_it(paper_config, vlm):
    """A reasoning prompt (Mulberry, R1-VL), a system message (Gemma-3, Visionary-R1's reasoning prompt), and
    sampling (Pixtral at 0.7, InternVL3's `do_sample`): the text, system message, decoding and budget."""
    official = OFFICIAL[vlm]
    protocol = answer_protocol(paper_config, vlm)
    asked = Asked.load({"original": PromptTemplate.load(TEMPLATE)}, protocol, paper_config["seed"])
    messages = asked.conversation(present(QUESTION, "original", {}, 0))
    # the release's question text: the stem, then its lettered options
    question = f"{QUESTION.question}\n{lettered(QUESTION.options)}"
    system = [m["content"] for m in messages if m["role"] == "system"]
    assert system == ([official["system"]] if official["system"] else [])
    [user] = [m["content"] for m in messages if m["role"] == "user"]
    assert user[0] == {"type": "image"}  # one image, before the text
    assert user[1:] == [{"type": "text", "text": official["user"].format(question=question)}]
    generate = official["generate"]
    assert protocol.max_tokens == generate.get("max_new_tokens", generate.get("max_tokens"))
    assert protocol.decoding == official_decoding(generate)


def test_the_uniform_protocol_asks_every_model_the_letter_prompt_greedily(paper_config):
    config = copy.deepcopy(paper_config)
    config["humblebench"]["protocol"] = "uniform"
    for vlm in config["humblebench"]["vlms"]:
        protocol = answer_protocol(config, vlm)
        assert (protocol.name, protocol.prompt, protocol.system) == ("uniform", config["humblebench"]["prompt"], "")
        assert protocol.decoding == Decoding()
        assert protocol.answer_after == ()
    assert answer_protocol(paper_config, "mulberry-7b").name == "official"


@pytest.mark.parametrize(
    ("vlm", "generated", "reasoning", "answer"),
    [
        # GLM-4.1V: after </think>, then after <answer> (its wrapper: <answer> if present, else </think>)
        (
            "glm-4.1v-9b-thinking",
            "<think>x</think><answer><|begin_of_box|>C<|end_of_box|></answer>",
            "<think>x</think><answer>",
            "<|begin_of_box|>C<|end_of_box|></answer>",
        ),
        ("glm-4.1v-9b-thinking", "<think>x</think> B", "<think>x</think>", "B"),
        # R1-Onevision: after </think>, then after the last "Answer"/"answer"
        ("r1-onevision-7b", "<think>so</think>\nAnswer: B", "<think>so</think>\nAnswer", ": B"),
        # LLaVA-CoT: after <CONCLUSION>, its closing tag kept as the wrapper keeps it
        (
            "llava-cot-11b",
            "<SUMMARY>s</SUMMARY><CONCLUSION> E </CONCLUSION>",
            "<SUMMARY>s</SUMMARY><CONCLUSION>",
            "E </CONCLUSION>",
        ),
        (
            "mulberry-7b",
            "### Step 1: ...\n### The final answer is: C. A clock tower",
            "### Step 1: ...\n### The final answer is:",
            "C. A clock tower",
        ),
        # no marker: all of it is the answer, and nothing ended the reasoning
        ("r1-vl-7b", "<think>never done", "", "<think>never done"),
    ],
)
def test_the_answer_is_cut_where_the_official_wrapper_cuts_it(paper_config, vlm, generated, reasoning, answer):
    split = cut_answer(generated, answer_protocol(paper_config, vlm).answer_after)
    assert (split.reasoning, split.answer, split.closed) == (reasoning, answer, bool(reasoning))


def test_a_model_answers_its_entrys_settings_else_its_groups_else_all(tiny_config, paper_config):
    settings = list(paper_config["humblebench"]["settings"])
    assert vlm_settings(paper_config, "gemini-2.5-pro") == ["original"]  # the proprietary group's
    assert vlm_settings(paper_config, "mulberry-7b") == settings
    config = copy.deepcopy(tiny_config)
    config["models"]["tiny-internvl3"]["humble_settings"] = ["nota_only", "original"]
    assert vlm_settings(config, "tiny-internvl3") == ["original", "nota_only"]  # in the config's order
    config["models"]["tiny-internvl3"]["humble_settings"] = ["original", "unheard"]
    from blindspot.checks import validate_config

    with pytest.raises(ConfigError, match=r"models\.tiny-internvl3\.humble_settings': 'unheard' is not one"):
        validate_config(config)


def test_an_api_models_decoding_is_its_request(paper_config):
    config = copy.deepcopy(paper_config)
    config["models"]["gemini-2.5-pro"]["humble_protocol"] = {"decoding": {"temperature": 0.5}}
    with pytest.raises(ConfigError, match=r"gemini-2\.5-pro\.humble_protocol\.decoding: an API model decodes as its"):
        answer_protocol(config, "gemini-2.5-pro")
    # every API model of the paper config names its temperature: the cache keeps one reply per request
    for vlm in paper_config["humblebench"]["vlms"]:
        if paper_config["models"][vlm]["backend"] == "openai_api":
            assert "temperature" in paper_config["models"][vlm]["request"], vlm


def test_a_checkpoints_decoding_is_its_generation_config():
    from transformers import GenerationConfig

    checkpoint = Decoding("checkpoint")
    assert checkpoint.resolved(GenerationConfig()) == Decoding()  # no do_sample: greedy, as `generate`
    sampling = GenerationConfig(do_sample=True, temperature=0.6, top_p=0.9)
    assert checkpoint.resolved(sampling) == Decoding("sampled", 0.6, 0.9, sampling.top_k)
    assert Decoding("sampled", 0.7).resolved(GenerationConfig()) == Decoding("sampled", 0.7)


def test_a_questions_seed_is_its_own_whatever_the_batch():
    assert question_seed(0, "7", "original") == question_seed(0, "7", "original")
    assert (
        len(
            {
                question_seed(0, "7", "original"),
                question_seed(1, "7", "original"),
                question_seed(0, "8", "original"),
                question_seed(0, "7", "noise"),
            }
        )
        == 4
    )
    assert 0 <= question_seed(0, "7", "original") < 2**31


@pytest.mark.slow
def test_a_sampled_answer_is_the_same_on_a_rerun_and_its_protocol_is_in_the_rows(built_config):
    from PIL import Image

    from blindspot.humblebench.answers import answer_questions
    from blindspot.models.spec import model_spec
    from blindspot.models.vlm_scoring import TransformersVLMScorer

    scorer = TransformersVLMScorer(model_spec(built_config, "tiny-qwen2.5-vl"), batch_size=2)
    shown = [present(Question(str(i), "What colour?", OPTIONS, "A", "Attribute"), "original", {}, 0) for i in range(3)]
    items = [(question, Image.new("RGB", (32, 32), "red")) for question in shown]
    sampled = Asked.load({"original": PromptTemplate.load(TEMPLATE)}, letter_protocol(6), 0)
    sampled = Asked(sampled.templates, sampled.prompt, sampled.protocol, Decoding("sampled", 1.5), 0)
    first, again = answer_questions(items, scorer, sampled), answer_questions(items, scorer, sampled)
    assert [row["text"] for row in first] == [row["text"] for row in again]
    other_seed = Asked(sampled.templates, sampled.prompt, sampled.protocol, sampled.decoding, 1)
    greedy = Asked(sampled.templates, sampled.prompt, sampled.protocol, Decoding(), 0)
    texts = {
        tuple(row["text"] for row in answer_questions(items, scorer, asked)) for asked in (sampled, other_seed, greedy)
    }
    assert len(texts) == 3  # a random model at temperature 1.5: another seed, or greedy, says something else
    assert {row["protocol"] for row in first} == {"uniform"}
    assert {row["prompt_version"] for row in first} == {sampled.prompt.version}


def test_fidelity_cites_each_local_models_protocol_as_the_config_holds_it(paper_config):
    """docs/fidelity.md's table of protocols (H-P1) has a row per local HumbleBench VLM of the paper config,
    whose prompt, decoding and budget are the registry entry's."""
    text = (REPO / "docs" / "fidelity.md").read_text().split("### HumbleBench protocols, model by model")[1]
    rows = {
        cells[0]: cells
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| registry name")
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }
    humble = paper_config["humblebench"]
    local = [vlm for vlm in humble["vlms"] if paper_config["models"][vlm]["backend"] != "openai_api"]
    assert sorted(rows) == sorted(local)
    for vlm in local:
        protocol, (_, prompt, _, decoding, budget, _, _) = answer_protocol(paper_config, vlm), rows[vlm]
        assert int(budget) == protocol.max_tokens, vlm
        assert (prompt == "letter") == (protocol.prompt == humble["prompt"]), vlm
        mode = {"checkpoint": "checkpoint", "sampled,": "sampled", "greedy": "greedy"}[decoding.split()[0]]
        assert mode == protocol.decoding.mode, vlm
        if mode == "sampled":
            assert decoding.endswith(f"temperature {protocol.decoding.temperature}"), vlm
