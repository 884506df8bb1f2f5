"""ImageReward ported onto transformers' BLIP: the key map, strict loading of the official file format,
per-pair scores on a tiny model, and (marker `ports`) equality with the official package run in
.venv-ports."""

import json
import math
import shutil
from pathlib import Path

import pytest
from helpers.metric_checks import (
    assert_half_precision_close,
    assert_refuses_unpaired,
    assert_scores_are_per_pair,
    official_scores,
    run_official,
)
from helpers.metric_checks import images_of_every_mode as images

from blindspot.metrics.image_reward import (
    BOUNDS,
    HUB_CHECKPOINT,
    RELEASE_SIZES,
    UNUSED_KEYS,
    ImageReward,
    build_model,
    load_tokenizer,
    official_key,
    read_sizes,
)
from blindspot.models.checkpoints import find_checkpoint
from blindspot.models.spec import ModelSpec
from blindspot.tiny.image_reward import TINY_SIZES, build_random_image_reward

OFFICIAL_SCRIPT = "image_reward_official.py"
PROMPTS = [
    "a red fox in the snow",
    "Two CATS asleep on a blue sofa, photorealistic!",
    "a lighthouse at dusk",
    "café naïve co-operate x2",
    # longer than the official 35 tokens: truncated
    "an extremely detailed oil painting of a crowded harbour at sunrise with fishing boats, gulls, nets, "
    "barrels, children running along the quay and a storm gathering far out over the grey sea",
    "",
]


def tiny_spec(path, dtype: str = "float32") -> ModelSpec:
    return ModelSpec(name="tiny-image-reward", backend="metric", gpus=0, dtype=dtype, path=str(path), built=True)


@pytest.fixture(scope="module")
def tiny_image_reward(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models") / "tiny-image-reward"
    build_random_image_reward(out, {"recipe": "random_image_reward"}, seed=0)
    return out


def test_the_key_map_covers_the_release_architecture_one_to_one():
    """Every weight of the port at the release's sizes has one ImageReward.pt key, no two the same, and
    the map's renamings are the ones BLIP's ViT and ImageReward's MLP use (med.py keeps its names)."""
    import torch

    with torch.device("meta"):
        names = list(build_model(RELEASE_SIZES).state_dict())
    keys = [official_key(name) for name in names]
    # ViT-L: patch, position and class embeddings (4), 12 per layer, post-norm (2); BERT-base with cross-attention:
    # word and position embeddings and their norm (4), 26 per layer; the MLP head's five linear layers (2 each).
    expected_count = (4 + 24 * 12 + 2) + (4 + 12 * 26) + 5 * 2
    assert len(set(keys)) == len(keys) == expected_count
    assert not set(keys) & set(UNUSED_KEYS)
    expected = {
        "vision.embeddings.class_embedding": "blip.visual_encoder.cls_token",
        "vision.embeddings.position_embedding": "blip.visual_encoder.pos_embed",
        "vision.embeddings.patch_embedding.weight": "blip.visual_encoder.patch_embed.proj.weight",
        "vision.encoder.layers.23.layer_norm1.bias": "blip.visual_encoder.blocks.23.norm1.bias",
        "vision.encoder.layers.0.self_attn.qkv.weight": "blip.visual_encoder.blocks.0.attn.qkv.weight",
        "vision.encoder.layers.7.self_attn.projection.bias": "blip.visual_encoder.blocks.7.attn.proj.bias",
        "vision.encoder.layers.1.layer_norm2.weight": "blip.visual_encoder.blocks.1.norm2.weight",
        "vision.encoder.layers.12.mlp.fc2.weight": "blip.visual_encoder.blocks.12.mlp.fc2.weight",
        "vision.post_layernorm.weight": "blip.visual_encoder.norm.weight",
        "text.embeddings.word_embeddings.weight": "blip.text_encoder.embeddings.word_embeddings.weight",
        "text.encoder.layer.11.crossattention.self.key.weight": (
            "blip.text_encoder.encoder.layer.11.crossattention.self.key.weight"
        ),
        "text.encoder.layer.0.attention.output.LayerNorm.bias": (
            "blip.text_encoder.encoder.layer.0.attention.output.LayerNorm.bias"
        ),
        "text.encoder.layer.5.intermediate.dense.weight": "blip.text_encoder.encoder.layer.5.intermediate.dense.weight",
        "head.0.weight": "mlp.layers.0.weight",
        "head.7.bias": "mlp.layers.7.bias",
    }
    assert {name: official_key(name) for name in expected} == expected
    assert sum(key.startswith("blip.text_encoder.encoder.layer.") and ".crossattention." in key for key in keys) == (
        12 * 10  # every text layer cross-attends: query, key, value, output dense and LayerNorm
    )


def test_an_unmapped_weight_is_an_error_not_a_guess():
    with pytest.raises(KeyError, match=r"no ImageReward\.pt key is mapped to the port's weight 'text\.pooler\.dense"):
        official_key("text.pooler.dense.weight")


def test_sizes_default_to_the_release_and_unknown_sizes_are_refused(tmp_path):
    assert read_sizes(tmp_path) == RELEASE_SIZES
    (tmp_path / "image_reward.json").write_text(json.dumps({"vision_layers": 2, "depth": 3}))
    with pytest.raises(ValueError, match="unknown size"):
        read_sizes(tmp_path)


def test_the_checkpoint_is_found_by_its_release_name_in_a_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"ImageReward model folder .* it holds none"):
        find_checkpoint("ImageReward", tmp_path, None, HUB_CHECKPOINT)
    (tmp_path / "optimizer.pt").write_bytes(b"")
    (tmp_path / HUB_CHECKPOINT).write_bytes(b"")
    assert find_checkpoint("ImageReward", tmp_path, None, HUB_CHECKPOINT) == tmp_path / HUB_CHECKPOINT


def test_the_tokenizer_is_blips_bert_base_uncased():
    """bert-base-uncased plus BLIP's [DEC] (30522) and [ENC] (30523); prompts pad to 35 tokens."""
    tokenizer = load_tokenizer(None)
    assert tokenizer.convert_tokens_to_ids(["[DEC]", "[ENC]"]) == [30522, 30523]
    assert len(tokenizer) == RELEASE_SIZES["vocab_size"]
    tokens = tokenizer("a red fox", padding="max_length", truncation=True, max_length=35)
    assert tokens["input_ids"][:6] == [101, 1037, 2417, 4419, 102, 0]
    assert len(tokens["input_ids"]) == 35


@pytest.mark.slow
def test_the_recipe_writes_the_official_format_and_is_deterministic(tiny_image_reward, tmp_path):
    import torch

    state = torch.load(tiny_image_reward / HUB_CHECKPOINT, weights_only=True)
    ports = build_model(TINY_SIZES).state_dict()
    assert set(state) == {official_key(name) for name in ports} | set(UNUSED_KEYS)
    assert json.loads((tiny_image_reward / "image_reward.json").read_text()) == TINY_SIZES
    tokenizer = load_tokenizer(tiny_image_reward)
    assert tokenizer.convert_tokens_to_ids(["[DEC]", "[ENC]"]) == [30522, 30523]
    assert (tiny_image_reward / "vocab.txt").read_text().splitlines()[:2] == ["[PAD]", "[unused0]"]
    build_random_image_reward(tmp_path / "again", {}, seed=0)
    again = torch.load(tmp_path / "again" / HUB_CHECKPOINT, weights_only=True)
    assert all(torch.equal(tensor, again[key]) for key, tensor in state.items())
    build_random_image_reward(tmp_path / "other", {}, seed=1)
    other = torch.load(tmp_path / "other" / HUB_CHECKPOINT, weights_only=True)
    assert not torch.equal(state["mlp.layers.0.weight"], other["mlp.layers.0.weight"])


@pytest.mark.slow
def test_the_port_loads_every_key_and_leaves_none_over(tiny_image_reward):
    import torch

    metric = ImageReward(tiny_spec(tiny_image_reward), batch_size=2)
    state = torch.load(tiny_image_reward / HUB_CHECKPOINT, weights_only=True)
    loaded = metric.model.state_dict()
    used = {official_key(name) for name in loaded}
    assert set(state) - used == set(UNUSED_KEYS)  # nothing else left over
    assert all(torch.equal(tensor, state[official_key(name)]) for name, tensor in loaded.items())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("drop", r"1 key\(s\) missing: blip.visual_encoder.norm.weight"),
        ("add", r"1 key\(s\) left over \(not mapped\): blip.itm_head.weight"),
    ],
)
def test_a_checkpoint_that_does_not_fit_names_the_keys(tiny_image_reward, tmp_path, change, message):
    import torch

    state = torch.load(tiny_image_reward / HUB_CHECKPOINT, weights_only=True)
    if change == "drop":
        del state["blip.visual_encoder.norm.weight"]
    else:
        state["blip.itm_head.weight"] = torch.zeros(2, 32)
    for name in ("image_reward.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_image_reward / name, tmp_path / name)
    torch.save(state, tmp_path / HUB_CHECKPOINT)
    with pytest.raises(ValueError, match=message):
        ImageReward(tiny_spec(tmp_path / HUB_CHECKPOINT), batch_size=2)


@pytest.mark.slow
def test_scores_are_finite_and_per_pair(tiny_image_reward):
    metric = ImageReward(tiny_spec(tiny_image_reward), batch_size=4)
    assert (metric.name, metric.model_id, metric.revision) == ("tiny-image-reward", "built:tiny-image-reward", "")
    assert metric.bounds == BOUNDS == (-3.0, 3.0)
    pictures = images(len(PROMPTS))
    scores = [s.raw for s in metric.score(PROMPTS, pictures)]
    assert len(scores) == len(PROMPTS)
    assert all(math.isfinite(s) for s in scores)
    assert_scores_are_per_pair(metric, PROMPTS, pictures, scores)


@pytest.mark.slow
def test_half_precision_scores_close_to_float32(tiny_image_reward):
    assert_half_precision_close(
        lambda dtype: ImageReward(tiny_spec(tiny_image_reward, dtype), 2), PROMPTS[:3], images(3), 5e-3
    )


@pytest.mark.slow
def test_prompts_and_images_must_pair_up(tiny_image_reward):
    assert_refuses_unpaired(ImageReward(tiny_spec(tiny_image_reward), 2), PROMPTS[:2], images(1))


@pytest.mark.ports
@pytest.mark.slow
def test_the_port_scores_as_the_official_package(tiny_image_reward, tmp_path):
    """The official `ImageReward.score(prompt, image)`, one pair at a time, on the same file and the
    same PNG images, equals the port's batched scores within 1e-4."""
    official, reloaded = official_scores(
        OFFICIAL_SCRIPT, ["score", str(tiny_image_reward)], PROMPTS, images(len(PROMPTS)), tmp_path
    )
    ours = [s.raw for s in ImageReward(tiny_spec(tiny_image_reward), batch_size=4).score(PROMPTS, reloaded)]
    assert ours == pytest.approx(official, abs=1e-4)
    assert max(official) - min(official) > 1e-2  # the pairs differ, so equality means something


@pytest.mark.ports
@pytest.mark.slow
def test_the_release_architecture_has_the_ports_keys_and_shapes(tiny_image_reward, tmp_path):
    """The official model at the release's sizes (what ImageReward.pt was saved from) has exactly the
    port's mapped keys, with the same shapes, plus the keys the reward does not read."""
    import torch

    run_official(OFFICIAL_SCRIPT, "release-keys", str(tiny_image_reward), str(tmp_path / "keys.json"))
    official = json.loads((tmp_path / "keys.json").read_text())
    with torch.device("meta"):
        port = {official_key(name): list(t.shape) for name, t in build_model(RELEASE_SIZES).state_dict().items()}
    assert set(official) == set(port) | set(UNUSED_KEYS)
    assert {key: official[key] for key in port} == port
