import functools

import numpy as np
import pandas as pd
import pytest
from helpers.workflow import REPO

from blindspot.models.spec import model_spec
from blindspot.models.vlm_scoring import (
    SCORES,
    ScoreTokens,
    TransformersVLMScorer,
    judge_images,
    score_distribution,
    summarise,
    text_score,
)
from blindspot.prompts import PromptTemplate

VOCAB = 20


def logprobs(probabilities: dict[int, float]) -> np.ndarray:
    """Log-probabilities over a 20-token vocabulary; the rest of the mass goes to token 19."""
    p = np.zeros(VOCAB)
    for token, value in probabilities.items():
        p[token] = value
    p[19] += 1 - p.sum()
    with np.errstate(divide="ignore"):
        return np.log(p)


# Tokens 1..9 are the digits "1".."9", token 0 is "0", token 10 is a single-token "10".
SPLIT_TEN = ScoreTokens(single={k: k for k in range(1, 10)}, ten_after_one=0)
SINGLE_TEN = ScoreTokens(single={k: k for k in range(1, 11)}, ten_after_one=None)


def test_split_digit_tokenizers_share_the_mass_of_one_between_one_and_ten():
    first = logprobs({1: 0.5, 8: 0.25})
    after_one = logprobs({0: 0.6})  # "1" is followed by "0" 60% of the time
    probabilities, mass = score_distribution(first, after_one, SPLIT_TEN)
    expected = np.zeros(10)
    expected[0], expected[9], expected[7] = 0.5 * 0.4, 0.5 * 0.6, 0.25
    assert mass == pytest.approx(0.75)
    assert probabilities == pytest.approx(expected / 0.75)
    value, best = summarise(probabilities)
    assert value == pytest.approx((1 * 0.2 + 10 * 0.3 + 8 * 0.25) / 0.75)
    assert best == 10


def test_single_token_ten_is_read_directly():
    first = logprobs({10: 0.3, 9: 0.1, 1: 0.1})
    probabilities, mass = score_distribution(first, logprobs({0: 0.9}), SINGLE_TEN)
    assert mass == pytest.approx(0.5)
    assert probabilities[9] == pytest.approx(0.6)
    assert probabilities[0] == pytest.approx(0.2)  # no "1" -> "10" correction with a single-token ten
    assert summarise(probabilities)[1] == 10


def test_no_mass_on_any_score_gives_a_uniform_distribution_and_zero_mass():
    probabilities, mass = score_distribution(logprobs({}), logprobs({}), SPLIT_TEN)
    assert mass == 0.0
    assert probabilities == pytest.approx(np.full(10, 0.1))
    assert summarise(probabilities)[0] == pytest.approx(5.5)


@pytest.mark.slow
def test_score_tokens_from_real_tokenizers(built_config):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_spec(built_config, "smollm2-135m").path)
    tokens = ScoreTokens.from_tokenizer(tokenizer)
    assert set(tokens.single) == set(range(1, 10))  # SmolLM2 splits digits, as Qwen does
    assert tokenizer.decode([tokens.ten_after_one]) == "0"


@pytest.mark.parametrize(
    ("text", "score"),
    [("8", 8), ("Score: 10.", 10), ("I'd say 7/10", 7), ("100 percent", None), ("no digits", None), ("(3)", 3)],
)
def test_text_score(text, score):
    assert text_score(text) == score


@pytest.mark.slow
@pytest.mark.parametrize("vlm", ["tiny-qwen2.5-vl", "tiny-internvl3"])
def test_a_tiny_vlm_scores_images_against_their_descriptions(built_config, vlm, tmp_path):
    from PIL import Image

    paths = []
    for i in range(3):
        path = tmp_path / f"{i}.png"
        Image.fromarray(np.full((96, 96, 3), 40 * i, dtype=np.uint8)).save(path)
        paths.append(str(path))
    renders = pd.DataFrame(
        {
            "image_id": ["a", "b", "c"],
            "triplet_id": ["t", "t", "u"],
            "role": ["corr", "adv", "corr"],
            "t2i": "tiny-flux",
            "description": ["a penguin", "a robin", "a tuk-tuk"],
            "path": paths,
        }
    )
    template = PromptTemplate.load(REPO / built_config["image_stage"]["judge_template"])
    scorer = TransformersVLMScorer(model_spec(built_config, vlm), batch_size=2)
    score, scored = scorer.score, []

    def scoring(conversations, images, kill=False):
        scored.append(len(images))
        if kill:
            raise RuntimeError("the job is killed")
        return score(conversations, images)

    scorer.score = functools.partial(scoring, kill=True)  # killed in its first batch: nothing journaled
    with pytest.raises(RuntimeError, match="killed"):
        judge_images(renders, scorer, template, tmp_path / "scores.journal.jsonl")
    scorer.score = scoring
    frame, counters = judge_images(renders, scorer, template, tmp_path / "scores.journal.jsonl")
    assert scored == [2, 2, 1]
    # Resumed from its journal after the first batch (cut down to it), the job scores only the second,
    # and its table is the uninterrupted job's to the last bit (the journal keeps the scores as JSON).
    journal = tmp_path / "scores.journal.jsonl"
    journal.write_text("".join(journal.read_text().splitlines(keepends=True)[:2]))
    resumed, resumed_counters = judge_images(renders, scorer, template, journal)
    assert scored == [2, 2, 1, 1]
    pd.testing.assert_frame_equal(resumed, frame)
    assert (counters["computed_items"], resumed_counters["computed_items"]) == (3, 1)
    assert list(frame["image_id"]) == ["a", "b", "c"]
    for row in frame.itertuples():
        assert sum(row.probabilities) == pytest.approx(1.0)
        assert 1 <= row.expected_score <= 10
        assert row.argmax_score == SCORES[int(np.argmax(row.probabilities))]
        assert 0 < row.valid_mass <= 1
        assert pd.isna(row.text_score) or row.text_score in SCORES
    assert counters["images"] == 3
    # The same image and description score the same, whatever else is in the batch.
    alone, _ = judge_images(renders.iloc[[2]], scorer, template, tmp_path / "alone.journal.jsonl")
    assert alone["expected_score"].iloc[0] == pytest.approx(frame["expected_score"].iloc[2], abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("vlm", ["tiny-qwen2.5-vl", "tiny-internvl3"])
def test_reading_only_the_answer_positions_logits_equals_reading_them_all(built_config, vlm):
    """`score` and `choose` read the first answer position from `generate`'s own logits (one prefill), and
    `score` what follows "1" from one step continued on that generation's cache (left-padded rows included);
    on the same batches, a full forward pass gives the same numbers."""
    import torch
    from PIL import Image

    from blindspot.models.vlm_scoring import image_question, scored

    scorer = TransformersVLMScorer(model_spec(built_config, vlm), batch_size=2)
    rng = np.random.default_rng(1)
    pictures = [Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8)) for _ in range(3)]
    conversations = [image_question(f"Rate 1 to 10: {text}") for text in ("a fox", "two cats on a sofa", "a boat")]
    letters = [scorer.tokenizer.encode(letter, add_special_tokens=False)[0] for letter in "ABCDE"]
    rows, chosen = scorer.score(conversations, pictures), scorer.choose(conversations, pictures, letters, 2)
    for start in (0, 2):  # the batches of two the scorer made
        batch = conversations[start : start + 2], pictures[start : start + 2]
        with torch.inference_mode():
            full = scorer.model(**scorer.inputs(*batch, "1")).logits[:, -2:].float()
            answer = scorer.model(**scorer.inputs(*batch)).logits[:, -1].float()
        for i, (first, after_one) in enumerate(torch.log_softmax(full, dim=-1).numpy()):
            expected = scored(first, after_one, rows[start + i]["text"], scorer.tokens)
            assert rows[start + i]["probabilities"] == pytest.approx(expected["probabilities"], abs=1e-5)
            assert rows[start + i]["valid_mass"] == pytest.approx(expected["valid_mass"], abs=1e-5)
        for i, probabilities in enumerate(torch.softmax(answer, dim=-1)[:, letters].tolist()):
            assert chosen[start + i][0] == pytest.approx(probabilities, abs=1e-5)


def test_vllm_messages_carry_the_image_in_its_placeholder():
    from PIL import Image

    from blindspot.models.vlm_scoring import with_image

    image = Image.new("RGB", (4, 4))
    conversation = [
        {"role": "system", "content": "rubric"},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "a red apple"}]},
    ]
    filled = with_image(conversation, image)
    assert filled[0] == conversation[0]
    assert filled[1]["content"] == [{"type": "image_pil", "image_pil": image}, {"type": "text", "text": "a red apple"}]
    assert conversation[1]["content"][0] == {"type": "image"}  # the template's conversation is left as it was
    assert with_image(conversation[:1], None) == conversation[:1]
    with pytest.raises(ValueError, match="1 image placeholders cannot take no image"):
        with_image(conversation, None)
    with pytest.raises(ValueError, match="0 image placeholders cannot take an image"):
        with_image(conversation[:1], image)


def test_the_generation_cache_is_read_under_either_name_transformers_gives_it():
    """transformers 5.2x returns `generate`'s cache as `cache` and takes it back by that keyword; earlier 5.x (the
    GPU machine's 5.17) as `past_key_values`."""
    import dataclasses

    from transformers.generation.utils import GenerateDecoderOnlyOutput

    from blindspot.models.vlm_scoring import generation_cache

    @dataclasses.dataclass
    class Older:  # a 5.17 output's fields
        sequences: object = None
        past_key_values: object = "the cache"

    assert generation_cache(Older()) == ("past_key_values", "the cache")
    current = GenerateDecoderOnlyOutput(sequences=None, cache="the cache")
    assert generation_cache(current) == ("cache", "the cache")
