"""T2I metric plug-ins on tiny models of the real architectures, the score cache, and the stage."""

import math

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from blindspot import schemas
from blindspot.images import hash_sidecar
from blindspot.metrics.vqa_score import QUESTION
from blindspot.models.spec import model_spec
from blindspot.plugins import Score, load_metric, normalise
from blindspot.protobias.metric_scores import ScoreCache, image_sha256, score_pairs

PROMPTS = ["a red fox in the snow", "two cats asleep on a blue sofa", "a lighthouse at dusk", "a bowl of green apples"]


def images(n: int) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (64 + 8 * i, 64, 3), dtype=np.uint8)) for i in range(n)]


def test_normalise_maps_the_bounds_onto_zero_one_and_clips():
    assert normalise(2.5, (0.0, 2.5)) == 1.0
    assert normalise(0.5, (-1.0, 1.0)) == 0.75
    assert normalise(7.0, (1.0, 10.0)) == pytest.approx(6 / 9)
    assert normalise(-3.0, (0.0, 1.0)) == 0.0
    assert normalise(12.0, (1.0, 10.0)) == 1.0
    assert math.isnan(normalise(math.nan, (0.0, 1.0)))


def test_the_tiny_clip_tokenizer_is_clips_own():
    """The tokenizer built from open_clip's vocabulary file encodes like open_clip's tokenizer."""
    from open_clip.tokenizer import SimpleTokenizer

    from blindspot.tiny.build import clip_tokenizer

    ours, theirs = clip_tokenizer(), SimpleTokenizer()
    texts = [*PROMPTS, "A Red-Tailed HAWK  perched on   a fence post, 3 crows!", "café naïve co-operate x2"]
    for text in texts:
        ids = ours(text)["input_ids"]
        assert (ids[0], ids[-1]) == (49406, 49407)  # <|startoftext|>, <|endoftext|> as in OpenAI's CLIP
        assert ids[1:-1] == theirs.encode(text)


@pytest.mark.slow
def test_clip_similarity_is_a_per_pair_cosine(built_config):
    import torch
    from transformers import CLIPModel, CLIPProcessor

    spec = model_spec(built_config, "tiny-clip")
    metric = load_metric("clip_similarity", spec, batch_size=3, cache_dir="", weight=2.5)
    pictures = images(4)
    scores = [s.raw for s in metric.score(PROMPTS, pictures)]
    model, processor = CLIPModel.from_pretrained(spec.path).eval(), CLIPProcessor.from_pretrained(spec.path)
    for prompt, picture, score in zip(PROMPTS, pictures, scores, strict=True):
        inputs = processor(text=[prompt], images=[picture], return_tensors="pt", padding=True)
        with torch.inference_mode():
            # Each tower's pooled output through its projection: CLIP's embeddings, computed by hand.
            text_out = model.text_model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
            text = model.text_projection(text_out.pooler_output)
            image = model.visual_projection(model.vision_model(pixel_values=inputs["pixel_values"]).pooler_output)
        assert score == pytest.approx(2.5 * torch.cosine_similarity(text, image).item(), abs=1e-5)
    alone = [metric.score([p], [i])[0].raw for p, i in zip(PROMPTS, pictures, strict=True)]
    assert alone == pytest.approx(scores, abs=1e-5)  # batching does not change a pair's score
    floored = load_metric("clip_similarity", spec, batch_size=3, cache_dir="", weight=2.5, floor_at_zero=True)
    assert [s.raw for s in floored.score(PROMPTS, pictures)] == pytest.approx([max(s, 0) for s in scores], abs=1e-5)
    pick = load_metric("clip_similarity", spec, batch_size=3, cache_dir="")  # PickScore: the model's logit scale
    scale = metric.model.logit_scale.detach().exp().item()
    assert pick.bounds == pytest.approx((-scale, scale))


@pytest.mark.slow
def test_vqa_score_is_the_probability_of_yes(built_config):
    import torch

    spec = model_spec(built_config, "tiny-qwen2.5-vl")
    metric = load_metric("vqa_score", spec, batch_size=2, cache_dir="")
    pictures = images(3)
    scores = [s.raw for s in metric.score(PROMPTS[:3], pictures)]
    assert all(0.0 < s < 1.0 for s in scores)
    vlm = metric.vlm
    for prompt, picture, score in zip(PROMPTS[:3], pictures, scores, strict=True):
        question = 'Does this figure show "' + prompt + '"? Please answer Yes or No.'
        conversation = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        with torch.inference_mode():
            logits = vlm.model(**vlm.inputs([conversation], [picture])).logits[0, -1].float()
        yes = vlm.processor.tokenizer.encode("Yes", add_special_tokens=False)[0]
        assert score == pytest.approx(torch.softmax(logits, dim=-1)[yes].item(), rel=1e-4)
    # The metric asks for the answer position's logits only (`logits_to_keep`); the full logits of the
    # same batches give the same probabilities.
    questions = [
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION.format(prompt=p)}]}]
        for p in PROMPTS[:3]
    ]
    for start in (0, 2):
        with torch.inference_mode():
            full = vlm.model(**vlm.inputs(questions[start : start + 2], pictures[start : start + 2])).logits
        expected = torch.softmax(full[:, -1].float(), dim=-1)[:, metric.answer].tolist()
        assert scores[start : start + 2] == pytest.approx(expected, abs=1e-5)


@pytest.fixture
def pairs_on_disk(tmp_path):
    rows = []
    pictures = zip(images(3), images(3)[::-1], strict=True)
    for index, (prompt, (corr, adv)) in enumerate(zip(PROMPTS[:3], pictures, strict=True)):
        corr_path, adv_path = tmp_path / f"c{index}.png", tmp_path / f"a{index}.png"
        corr.save(corr_path)
        adv.save(adv_path)
        rows.append(
            {
                "pair_id": f"p{index}",
                "domain": "objects",
                "neutral_prompt": prompt,
                "corr_path": str(corr_path),
                "adv_path": str(adv_path),
            }
        )
    return pd.DataFrame(rows)


class CountingMetric:
    """A real plug-in (tiny CLIP) that counts what it is asked to score."""

    def __init__(self, spec):
        self.inner = load_metric("clip_similarity", spec, batch_size=4, cache_dir="", weight=2.5)
        self.bounds = self.inner.bounds
        self.scored = 0

    def score(self, prompts, pictures):
        self.scored += len(prompts)
        return self.inner.score(prompts, pictures)


@pytest.mark.slow
def test_the_score_cache_scores_only_what_is_new(built_config, pairs_on_disk, tmp_path):
    spec = model_spec(built_config, "tiny-clip")
    identity = {"model_id": spec.model_id, "revision": "", "version": '{"weight": 2.5}'}
    cache = ScoreCache(tmp_path / "cache")
    metric = CountingMetric(spec)
    first, counters = score_pairs(pairs_on_disk, "clipscore", identity, lambda: metric, cache)
    # The middle pair shows one image twice under one prompt: scored once.
    assert metric.scored == counters["images_scored"] == counters["computed_items"] == 5
    assert counters["cache_hits"] == 0

    def must_not_load():
        raise AssertionError("a fully cached run loaded the model")

    again, counters = score_pairs(pairs_on_disk, "clipscore", identity, must_not_load, cache)
    assert counters == counters | {"images_scored": 0, "cache_hits": 6, "computed_items": 0}
    pd.testing.assert_frame_equal(first, again)
    assert list(first.columns) == [f.name for f in schemas.METRIC_SCORES]
    assert first["corr_score"].between(0, 1).all()
    assert first["corr_raw"].tolist() == pytest.approx(
        [
            s.raw
            for s in metric.inner.score(
                pairs_on_disk["neutral_prompt"].tolist(),
                [Image.open(p).convert("RGB") for p in pairs_on_disk["corr_path"]],
            )
        ]
    )
    # A new pair scores only its own images; another prompt or settings are new entries.
    more = pd.concat([pairs_on_disk, pairs_on_disk.iloc[[0]].assign(pair_id="p3", neutral_prompt="a fox")])
    metric.scored = 0
    score_pairs(more, "clipscore", identity, lambda: metric, cache)
    assert metric.scored == 2
    score_pairs(pairs_on_disk, "clipscore", identity | {"version": '{"weight": 1.0}'}, lambda: metric, cache)
    assert metric.scored == 2 + 5


def test_image_hash_comes_from_the_sidecar_when_there_is_one(tmp_path):
    path = tmp_path / "image.png"
    images(1)[0].save(path)
    computed = image_sha256(path)
    assert len(computed) == 64
    hash_sidecar(path).write_text("f" * 64 + "\n")  # where the render stage writes it: image.sha256
    assert image_sha256(path) == "f" * 64


def test_cached_nan_stays_nan(tmp_path):
    cache = ScoreCache(tmp_path)
    cache.put("ab12", Score(math.nan, "no digit"), (1.0, 10.0))
    score, bounds = cache.get("ab12")
    assert math.isnan(score.raw)
    assert (score.detail, bounds) == ("no digit", (1.0, 10.0))


def _scored_whole(built_config, pairs_on_disk, tmp_path):
    """The tiny CLIP plug-in, its identity, and its scores of the pairs in one uninterrupted job."""
    spec = model_spec(built_config, "tiny-clip")
    identity = {"model_id": spec.model_id, "revision": "", "version": '{"weight": 2.5}'}
    metric = CountingMetric(spec)
    whole, _ = score_pairs(pairs_on_disk, "clipscore", identity, lambda: metric, ScoreCache(tmp_path / "whole"))
    return spec, identity, metric, whole


@pytest.mark.slow
def test_pairs_are_scored_a_batch_at_a_time_and_each_batch_is_cached_at_once(built_config, pairs_on_disk, tmp_path):
    spec, identity, metric, whole = _scored_whole(built_config, pairs_on_disk, tmp_path)
    batches = []

    class CrashesOnItsSecondBatch(CountingMetric):
        def score(self, prompts, pictures):
            batches.append(len(pictures))
            if len(batches) == 2:
                raise RuntimeError("preempted")
            return super().score(prompts, pictures)

    cache = ScoreCache(tmp_path / "cache")
    with pytest.raises(RuntimeError, match="preempted"):
        score_pairs(pairs_on_disk, "clipscore", identity, lambda: CrashesOnItsSecondBatch(spec), cache, batch_size=2)
    assert batches == [2, 2]  # five distinct images: the first batch is scored, the second crashes
    resumed, counters = score_pairs(pairs_on_disk, "clipscore", identity, lambda: metric, cache, batch_size=2)
    assert counters["images_scored"] == 3  # the first batch was cached before the crash
    pd.testing.assert_frame_equal(resumed, whole, atol=1e-5)


@pytest.mark.slow
def test_a_metric_that_runs_out_of_gpu_memory_above_two_images_scores_as_one_that_fits(
    built_config, pairs_on_disk, tmp_path
):
    """A plug-in whose batches of more than two images raise torch's OutOfMemoryError: its job scores every pair,
    in halves, the same as the plug-in that fits (tiny CLIP), to float32's rounding."""
    import torch

    spec, identity, _, whole = _scored_whole(built_config, pairs_on_disk, tmp_path)
    asked = []

    class TwoAtATime(CountingMetric):
        def score(self, prompts, pictures):
            asked.append(len(prompts))
            if len(prompts) > 2:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
            return super().score(prompts, pictures)

    halves, counters = score_pairs(
        pairs_on_disk, "clipscore", identity, lambda: TwoAtATime(spec), ScoreCache(tmp_path / "halves")
    )
    assert asked[:2] == [5, 3]  # the batch of five failed, then its first half of three
    assert max(asked[2:]) == 2  # then every call at the size that ran
    assert sum(asked[2:]) == 5
    assert counters["images_scored"] == 5
    for column in ("corr_raw", "adv_raw"):
        assert halves[column].tolist() == pytest.approx(whole[column].tolist(), rel=1e-5)
