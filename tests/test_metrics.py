"""T2I metric plug-ins on tiny models of the real architectures, the score cache, and the stage."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import REPO
from PIL import Image

from blindspot import tables
from blindspot.config import model_spec
from blindspot.io import read_table, write_table
from blindspot.metrics import MetricSkipped, Score, load_metric, normalise
from blindspot.metrics.scoring import ScoreCache, image_sha256, metric_identity, score_pairs
from blindspot.metrics.vqa_score import QUESTION
from blindspot.split import split_of

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

    from blindspot.tiny_models import clip_tokenizer

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
        rows.append({"pair_id": f"p{index}", "domain": "objects", "neutral_prompt": prompt,
                     "corr_path": str(corr_path), "adv_path": str(adv_path)})  # fmt: skip
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
    assert metric.scored == counters["images_scored"] == 5
    assert counters["cache_hits"] == 0

    def must_not_load():
        raise AssertionError("a fully cached run loaded the model")

    again, counters = score_pairs(pairs_on_disk, "clipscore", identity, must_not_load, cache)
    assert counters == counters | {"images_scored": 0, "cache_hits": 6}
    pd.testing.assert_frame_equal(first, again)
    assert list(first.columns) == [f.name for f in tables.METRIC_SCORES]
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
    (tmp_path / "image.png.sha256").write_text("f" * 64 + "  image.png\n")
    assert image_sha256(path) == "f" * 64


def test_cached_nan_stays_nan(tmp_path):
    cache = ScoreCache(tmp_path)
    cache.put("ab12", Score(math.nan, "no digit"), (1.0, 10.0))
    score, bounds = cache.get("ab12")
    assert math.isnan(score.raw)
    assert (score.detail, bounds) == ("no digit", (1.0, 10.0))


def test_metric_identity_changes_with_the_template(tiny_config, tmp_path):
    template = tmp_path / "judge.yaml"
    template.write_text((REPO / "config" / "prompts" / "judge_semantic_v1.yaml").read_text())
    tiny_config["evaluation"]["metrics"]["vlm-judge"]["args"]["template"] = str(template)
    before = metric_identity(tiny_config, "vlm-judge")
    template.write_text(template.read_text().replace("Answer with the number only.", "Answer with one number."))
    assert metric_identity(tiny_config, "vlm-judge")["version"] != before["version"]


def test_metric_identity_follows_score_settings_not_run_settings(tiny_config):
    before = metric_identity(tiny_config, "api-judge")
    tiny_config["models"]["local-api-judge"] |= {"client": {"concurrency": 16}, "endpoint": "http://10.0.0.1/v1"}
    assert metric_identity(tiny_config, "api-judge") == before  # same answers, another route
    tiny_config["models"]["local-api-judge"]["request"] = {"temperature": 0.7}
    assert metric_identity(tiny_config, "api-judge")["version"] != before["version"]
    clip = metric_identity(tiny_config, "clipscore")
    tiny_config["models"]["tiny-clip"]["dtype"] = "float16"
    assert metric_identity(tiny_config, "clipscore")["version"] != clip["version"]


def test_a_metric_without_its_api_key_is_skipped_not_failed(tiny_config, pairs_on_disk, tmp_path, monkeypatch):
    from blindspot.stages import score_metric

    monkeypatch.delenv("BLINDSPOT_TINY_API_KEY", raising=False)
    seeds = pd.DataFrame({c: ["s0"] if c == "seed_id" else ["x"] for c in tables.SEEDS.names}).assign(sample_seed=1)
    write_table(tmp_path / "seeds.parquet", seeds, tables.SEEDS)
    # A kept pair of a triplet that the hash puts in the test split.
    triplet_id = next(t for t in (f"t{i}" for i in range(100)) if split_of(t, tiny_config["seed"], 0.5) == "test")
    tiny_config["benchmark"]["test_fraction"] = 0.5
    triplet = {f.name: "x" for f in tables.TRIPLETS} | {"triplet_id": triplet_id, "seed_id": "s0", "domain": "objects"}
    write_table(tmp_path / "triplets.parquet", pd.DataFrame([triplet]), tables.TRIPLETS)
    pair = {f.name: "x" for f in tables.PAIRS} | {
        "triplet_id": triplet_id, "seed": 1, "min_corr_score": 9.0, "min_adv_score": 9.0, "kept": True,
        "corr_path": pairs_on_disk["corr_path"][0], "adv_path": pairs_on_disk["adv_path"][0],
    }  # fmt: skip
    write_table(tmp_path / "pairs.parquet", pd.DataFrame([pair]), tables.PAIRS)
    score_metric(tiny_config, "objects", "api-judge", "00000", str(tmp_path / "pairs.parquet"),
                 str(tmp_path / "triplets.parquet"), str(tmp_path / "seeds.parquet"), str(tmp_path / "cache"), [],
                 str(tmp_path / "out.parquet"), str(tmp_path / "out.json"))  # fmt: skip
    assert read_table(tmp_path / "out.parquet", tables.METRIC_SCORES).empty
    assert "BLINDSPOT_TINY_API_KEY is not set" in json.loads((tmp_path / "out.json").read_text())["skipped"]
    with pytest.raises(MetricSkipped):
        load_metric("api_judge", model_spec(tiny_config, "local-api-judge"), 1, str(tmp_path / "cache"))


@pytest.mark.slow
def test_pairs_are_scored_a_batch_at_a_time_and_each_batch_is_cached_at_once(built_config, pairs_on_disk, tmp_path):
    spec = model_spec(built_config, "tiny-clip")
    identity = {"model_id": spec.model_id, "revision": "", "version": '{"weight": 2.5}'}
    metric = CountingMetric(spec)
    whole, _ = score_pairs(pairs_on_disk, "clipscore", identity, lambda: metric, ScoreCache(tmp_path / "whole"))
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
