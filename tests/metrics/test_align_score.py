"""AlignScore through a caption: the official `nli_sp` chunking and aggregation, strict loading of the
release's checkpoint format, and scores on the tiny AlignScore with the tiny Qwen2.5-VL as captioner."""

import shutil

import numpy as np
import pytest
from PIL import Image

from blindspot.metrics.align_score import context_chunks, model_weights, sentences
from blindspot.models.spec import model_spec
from blindspot.plugins import load_metric
from blindspot.tiny.align_score import CHECKPOINT_FILE


def test_sentences_end_at_a_stop_before_a_capital_or_digit():
    assert sentences("A red fox. Two cats sleep! Is it 3 p.m.? 4 dogs") == [
        "A red fox.",
        "Two cats sleep!",
        "Is it 3 p.m.?",
        "4 dogs",
    ]
    assert sentences("a cat e.g. a tabby sits") == ["a cat e.g. a tabby sits"]
    assert sentences("  ") == [""]


def test_context_chunks_follow_the_official_word_budget():
    short = "One. Two. Three."
    assert context_chunks(short) == [short]  # under 350 words: one chunk of every sentence
    long = " ".join(f"Sentence {i} has " + "word " * 97 + "end." for i in range(8))  # 8 x 100 words
    # 800 words -> 800 // 350 + 1 = 3 chunks wanted -> 8 // 3 = 2 sentences a chunk -> 4 chunks
    chunks = context_chunks(long)
    assert len(chunks) == 4
    assert [c.count("Sentence") for c in chunks] == [2, 2, 2, 2]
    assert " ".join(chunks) == long
    assert context_chunks("One. Two. Three.", chunk_words=1) == ["One.", "Two.", "Three."]


def test_the_release_weights_split_into_encoder_and_tri_label_head():
    state = {
        "base_model.embeddings.word_embeddings.weight": 1,
        "base_model.embeddings.position_ids": 2,
        "base_model.pooler.dense.bias": 3,
        "tri_layer.weight": 4,
        "tri_layer.bias": 5,
        "bin_layer.weight": 6,
        "reg_layer.bias": 7,
        "mlm_head.dense.weight": 8,
        "something_else.weight": 9,
    }
    encoder, head = model_weights(state)
    assert encoder == {"embeddings.word_embeddings.weight": 1, "pooler.dense.bias": 3, "something_else.weight": 9}
    assert head == {"weight": 4, "bias": 5}


@pytest.fixture(scope="module")
def align_score(built_config):
    spec = model_spec(built_config, "tiny-alignscore")
    captioner = model_spec(built_config, "tiny-qwen2.5-vl")
    return load_metric("align_score", spec, batch_size=3, cache_dir="", captioner=captioner, caption_tokens=6)


def by_hand(metric, chunk: str, sentence: str) -> float:
    """P(aligned) of one (context chunk, claim sentence) pair, tokenised alone (no padding)."""
    import torch

    inputs = metric.tokenizer([chunk], [sentence], return_tensors="pt")
    with torch.inference_mode():
        pooled = metric.encoder(**inputs).pooler_output
        return torch.softmax(metric.head(pooled), dim=-1)[0, 0].item()


@pytest.mark.slow
def test_align_is_the_mean_over_claim_sentences_of_the_best_chunk(align_score):
    # 4 sentences of 94 words: 376 words make 2 chunks of 2 sentences
    context = " ".join(f"Part {i} shows " + "a red barn in a field " * 15 + "today." for i in range(4))
    claim = "A red barn. Two cows graze nearby."
    chunks, claims = context_chunks(context), sentences(claim)
    assert (len(chunks), len(claims)) == (2, 2)
    expected = np.mean([max(by_hand(align_score, c, s) for c in chunks) for s in claims])
    short = ("A dog runs on a beach.", "a dog on a beach")
    got = align_score.align([context, short[0]], [claim, short[1]])
    assert got == pytest.approx([expected, by_hand(align_score, *short)], abs=1e-5)
    assert all(0.0 < value < 1.0 for value in got)


@pytest.mark.slow
def test_an_image_is_scored_through_its_caption(align_score):
    rng = np.random.default_rng(0)
    pictures = [Image.fromarray(rng.integers(0, 255, (40, 40 + 8 * i, 3), dtype=np.uint8)) for i in range(4)]
    prompts = ["a red fox in the snow", "two cats on a sofa", "a lighthouse at dusk", "a bowl of apples"]
    scores = align_score.score(prompts, pictures)
    captions = align_score.captioner.describe([align_score.instruction] * 4, pictures, align_score.caption_tokens)
    assert [s.detail for s in scores] == captions
    assert [s.raw for s in scores] == pytest.approx(align_score.align(captions, prompts), abs=1e-5)
    other = [s.raw for s in align_score.score(prompts[::-1], pictures)]
    assert other != pytest.approx([s.raw for s in scores], abs=1e-5)  # the prompt matters
    with pytest.raises(ValueError, match="2 prompts for 1 images"):
        align_score.score(prompts[:2], pictures[:1])


@pytest.mark.slow
def test_a_checkpoint_with_a_foreign_weight_is_refused_by_name(built_config, tmp_path):
    import torch

    broken = tmp_path / "tiny-alignscore"
    shutil.copytree(model_spec(built_config, "tiny-alignscore").path, broken)
    checkpoint = torch.load(broken / CHECKPOINT_FILE, weights_only=True)
    checkpoint["state_dict"]["base_model.extra.weight"] = torch.zeros(1)
    del checkpoint["state_dict"]["tri_layer.bias"]
    torch.save(checkpoint, broken / CHECKPOINT_FILE)
    config = built_config | {
        "models": built_config["models"]
        | {"tiny-alignscore": {"id": str(broken), "backend": "transformers", "gpus": 0, "dtype": "float32"}}
    }
    spec = model_spec(config, "tiny-alignscore")
    captioner = model_spec(built_config, "tiny-qwen2.5-vl")
    with pytest.raises(ValueError, match=r"does not fit AlignScore's RoBERTa .*1 unexpected key\(s\): extra\.weight"):
        load_metric("align_score", spec, batch_size=1, cache_dir="", captioner=captioner)
    del checkpoint["state_dict"]["base_model.extra.weight"]
    torch.save(checkpoint, broken / CHECKPOINT_FILE)
    with pytest.raises(ValueError, match=r"tri-label head: 1 missing key\(s\): bias"):
        load_metric("align_score", spec, batch_size=1, cache_dir="", captioner=captioner)
    # the release's checkpoint alone, without the config of the model it was fine-tuned from
    (broken / "config.json").unlink()
    with pytest.raises(ValueError, match=r"has no config\.json; name the base model in the metric's args"):
        load_metric("align_score", spec, batch_size=1, cache_dir="", captioner=captioner)
