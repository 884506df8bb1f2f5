"""CLIP-FlanT5's VQAScore ported onto transformers' T5 and CLIP: the key map, strict loading of the
release format, the official prompt format, per-pair scores on a tiny model, and (marker `ports`)
equality with the official t2v_metrics package run in .venv-ports."""

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
)
from helpers.metric_checks import images_of_every_mode as images
from PIL import Image

from blindspot.metrics.clip_flant5 import (
    ALIAS_KEYS,
    BEFORE_IMAGE,
    TOWER_PREFIX,
    CLIPFlanT5,
    build_model,
    build_projector,
    expand_to_square,
    official_key,
    read_config,
    unique_keys,
)
from blindspot.models.spec import ModelSpec
from blindspot.tiny.clip_flant5 import EXTRA_ROWS, build_random_clip_flant5

OFFICIAL_SCRIPT = "clip_flant5_official.py"
PROMPTS = [
    "a red fox in the snow",
    "Two CATS asleep on a blue sofa, photorealistic!",
    'a sign that reads "OPEN"',
    "café naïve co-operate x2",
    "a lighthouse at dusk,\nwith  two   gulls ",
    "",
]
# zhiqiulin/clip-flant5-xxl: FlanT5-XXL's config.json with LLaVA's vision keys, and CLIP ViT-L/14-336.
RELEASE_CONFIG = {
    "model_type": "clip_t5",
    "d_model": 4096,
    "d_ff": 10240,
    "d_kv": 64,
    "num_heads": 64,
    "num_layers": 24,
    "num_decoder_layers": 24,
    "vocab_size": 32128,
    "feed_forward_proj": "gated-gelu",
    "tie_word_embeddings": False,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "layer_norm_epsilon": 1e-6,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
    "mm_vision_tower": "openai/clip-vit-large-patch14-336",
    "mm_hidden_size": 1024,
    "mm_projector_type": "mlp2x_gelu",
    "mm_vision_select_layer": -2,
    "mm_vision_select_feature": "patch",
}
RELEASE_VISION = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "image_size": 336,
    "patch_size": 14,
    "hidden_act": "quick_gelu",
    "projection_dim": 768,
}


def tiny_spec(path, dtype: str = "float32") -> ModelSpec:
    return ModelSpec(name="tiny-clip-flant5", backend="metric", gpus=0, dtype=dtype, path=str(path), built=True)


@pytest.fixture(scope="module")
def tiny_clip_flant5(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models") / "tiny-clip-flant5"
    build_random_clip_flant5(out, {"recipe": "random_clip_flant5"}, seed=0)
    return out


def test_the_key_map_covers_the_release_architecture_one_to_one():
    """Every weight of the port at the release's sizes has one release key, no two the same; the LM head
    is FlanT5's own (not tied to the embedding), and the vision keys are transformers 4's, as saved."""
    import torch
    from transformers import CLIPVisionConfig

    with torch.device("meta"):
        model = build_model(RELEASE_CONFIG, CLIPVisionConfig(**RELEASE_VISION))
    keys = [official_key(name) for name in unique_keys(model)]
    # T5: shared and lm_head, 9 (encoder) and 14 (decoder) per block, relative bias and final norm each;
    # CLIP: embeddings and pre-norm, 16 per layer, post-norm; the projector's two layers.
    expected_count = 2 + (24 * 9 + 2) + (24 * 14 + 2) + (5 + 24 * 16 + 2) + 4
    assert len(set(keys)) == len(keys) == expected_count
    assert not set(keys) & set(ALIAS_KEYS)
    expected = {
        "language.shared.weight": "shared.weight",
        "language.lm_head.weight": "lm_head.weight",
        "language.encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": (
            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        ),
        "language.decoder.block.23.layer.2.DenseReluDense.wi_1.weight": (
            "decoder.block.23.layer.2.DenseReluDense.wi_1.weight"
        ),
        "vision.embeddings.class_embedding": "vision_tower.vision_tower.vision_model.embeddings.class_embedding",
        "vision.encoder.layers.22.self_attn.q_proj.bias": (
            "vision_tower.vision_tower.vision_model.encoder.layers.22.self_attn.q_proj.bias"
        ),
        "vision.pre_layrnorm.weight": "vision_tower.vision_tower.vision_model.pre_layrnorm.weight",
        "projector.0.weight": "mm_projector.0.weight",
        "projector.2.bias": "mm_projector.2.bias",
    }
    assert {name: official_key(name) for name in expected} == expected
    assert model.language.lm_head.weight is not model.language.shared.weight
    assert tuple(model.projector[0].weight.shape) == (4096, 1024)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(11.6e9, rel=0.02)  # 11.3B FlanT5 + 0.3B CLIP


def test_an_unmapped_weight_is_an_error_not_a_guess():
    with pytest.raises(KeyError, match=r"no CLIP-FlanT5 key is mapped to the port's weight 'head\.weight'"):
        official_key("head.weight")


def test_a_config_without_the_vision_keys_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5", "d_model": 8, "mm_hidden_size": 8}))
    with pytest.raises(ValueError, match="not a CLIP-FlanT5 config: no mm_vision_tower, mm_projector_type"):
        read_config(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"holds no config\.json"):
        read_config(tmp_path / "missing")


def test_the_projector_is_llavas():
    from torch import nn

    mlp = build_projector("mlp2x_gelu", 6, 4)
    assert [type(m) for m in mlp] == [nn.Linear, nn.GELU, nn.Linear]
    assert mlp[1].approximate == "none"
    assert isinstance(build_projector("linear", 6, 4), nn.Linear)
    with pytest.raises(ValueError, match="mm_projector_type 'qformer' is not supported"):
        build_projector("qformer", 6, 4)


def test_images_are_padded_to_a_centred_square_of_the_background():
    image = Image.new("RGB", (4, 2), (255, 255, 255))
    square = expand_to_square(image, (1, 2, 3))
    assert square.size == (4, 4)
    assert [square.getpixel((0, y)) for y in range(4)] == [(1, 2, 3), (255, 255, 255), (255, 255, 255), (1, 2, 3)]
    assert expand_to_square(image.rotate(90, expand=True), (0, 0, 0)).getpixel((0, 0)) == (0, 0, 0)


@pytest.mark.slow
def test_the_recipe_writes_the_release_format_and_is_deterministic(tiny_clip_flant5, tmp_path):
    import torch
    from transformers import CLIPVisionConfig

    state = torch.load(tiny_clip_flant5 / "pytorch_model.bin", weights_only=True)
    config = read_config(tiny_clip_flant5)
    assert (config["model_type"], config["mm_vision_tower"]) == ("clip_t5", "vision_tower")
    assert config["vocab_size"] == 2100 + EXTRA_ROWS  # the tokenizer's 2,000 pieces and 100 sentinels, plus 28
    tower = tiny_clip_flant5 / "vision_tower"
    port = build_model(config, CLIPVisionConfig.from_pretrained(tower))
    assert set(state) == {official_key(name) for name in unique_keys(port)} | set(ALIAS_KEYS[:3])
    assert torch.equal(state["embed_tokens.weight"], state["shared.weight"])
    assert not torch.equal(state["lm_head.weight"], state["shared.weight"][: state["lm_head.weight"].shape[0]])
    assert all(torch.equal(t, t.bfloat16().float()) for t in state.values())  # on bfloat16's grid
    vision = torch.load(tower / "pytorch_model.bin", weights_only=True)
    assert all(torch.equal(t, state[TOWER_PREFIX + key]) for key, t in vision.items())
    build_random_clip_flant5(tmp_path / "again", {}, seed=0)
    again = torch.load(tmp_path / "again" / "pytorch_model.bin", weights_only=True)
    assert all(torch.equal(tensor, again[key]) for key, tensor in state.items())
    assert (tmp_path / "again" / "spiece.model").read_bytes() == (tiny_clip_flant5 / "spiece.model").read_bytes()


@pytest.mark.slow
def test_the_port_loads_every_key_and_reads_the_official_prompt(tiny_clip_flant5):
    import torch

    metric = CLIPFlanT5(tiny_spec(tiny_clip_flant5), batch_size=2)
    state = torch.load(tiny_clip_flant5 / "pytorch_model.bin", weights_only=True)
    loaded = metric.model.state_dict()
    assert all(torch.equal(loaded[name], state[official_key(name)]) for name in unique_keys(metric.model))
    assert metric.vocab == 2100  # the softmax runs over the tokenizer's tokens, not the 2,128 rows
    tokenizer = metric.tokenizer
    # each chunk around the image ends with T5's </s>, as the official t5_tokenizer_image_token makes it
    assert metric.before.tolist() == tokenizer(BEFORE_IMAGE).input_ids
    assert metric.before[-1].item() == tokenizer.eos_token_id == 1
    question = tokenizer.decode(metric.encode_question("a red fox"))
    assert question == 'Does this figure show "a red fox"? Please answer yes or no. ASSISTANT:</s>'
    assert tokenizer.decode(metric.labels) == "Yes</s>"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("drop", r"1 key\(s\) missing: lm_head.weight"),
        ("add", r"1 key\(s\) left over \(not mapped\): mm_projector.4.weight"),
    ],
)
def test_a_checkpoint_that_does_not_fit_names_the_keys(tiny_clip_flant5, tmp_path, change, message):
    import torch

    shutil.copytree(tiny_clip_flant5, tmp_path / "model")
    state = torch.load(tiny_clip_flant5 / "pytorch_model.bin", weights_only=True)
    if change == "drop":
        del state["lm_head.weight"]
    else:
        state["mm_projector.4.weight"] = torch.zeros(32, 32)
    torch.save(state, tmp_path / "model" / "pytorch_model.bin")
    with pytest.raises(ValueError, match=message):
        CLIPFlanT5(tiny_spec(tmp_path / "model"), batch_size=2)


@pytest.mark.slow
def test_scores_are_probabilities_per_pair(tiny_clip_flant5):
    metric = CLIPFlanT5(tiny_spec(tiny_clip_flant5), batch_size=4)
    assert (metric.name, metric.model_id, metric.revision) == ("tiny-clip-flant5", "built:tiny-clip-flant5", "")
    assert metric.bounds == (0.0, 1.0)
    pictures = images(len(PROMPTS))
    scores = [s.raw for s in metric.score(PROMPTS, pictures)]
    assert len(scores) == len(PROMPTS)
    assert all(0.0 < s < 1.0 and math.isfinite(s) for s in scores)
    assert_scores_are_per_pair(metric, PROMPTS, pictures, scores)


@pytest.mark.slow
def test_without_the_tower_in_the_checkpoint_it_loads_from_the_configs_tower(tiny_clip_flant5, tmp_path):
    """A release that leaves the frozen CLIP tower out is read from `mm_vision_tower`, as the official
    model builds it, and scores the same."""
    import torch

    shutil.copytree(tiny_clip_flant5, tmp_path / "model")
    state = torch.load(tiny_clip_flant5 / "pytorch_model.bin", weights_only=True)
    state = {key: t for key, t in state.items() if not key.startswith(TOWER_PREFIX)}
    torch.save(state, tmp_path / "model" / "pytorch_model.bin")
    pictures = images(3)
    full = [s.raw for s in CLIPFlanT5(tiny_spec(tiny_clip_flant5), 3).score(PROMPTS[:3], pictures)]
    without = [s.raw for s in CLIPFlanT5(tiny_spec(tmp_path / "model"), 3).score(PROMPTS[:3], pictures)]
    assert without == pytest.approx(full, rel=1e-5)


@pytest.mark.slow
def test_half_precision_scores_close_to_float32(tiny_clip_flant5, monkeypatch):
    import torch

    from blindspot.metrics import clip_flant5

    built, real_build = [], clip_flant5.build_model

    def build_model(*args):  # the real one, watched: XXL built in float32 and then cast takes 45 GB of GPU
        model = real_build(*args)
        built.append({p.dtype for p in model.parameters()})
        return model

    monkeypatch.setattr(clip_flant5, "build_model", build_model)
    assert_half_precision_close(
        lambda dtype: CLIPFlanT5(tiny_spec(tiny_clip_flant5, dtype), 2), PROMPTS[:3], images(3), 1e-5
    )
    assert built == [{torch.float32}, {torch.float16}]  # each built in its own dtype
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.slow
def test_prompts_and_images_must_pair_up(tiny_clip_flant5):
    assert_refuses_unpaired(CLIPFlanT5(tiny_spec(tiny_clip_flant5), 2), PROMPTS[:2], images(1))


@pytest.mark.ports
@pytest.mark.slow
def test_the_port_scores_as_the_official_package(tiny_clip_flant5, tmp_path):
    """The official `CLIPT5Model.forward(images, texts)` on all pairs in one batch, on the same folder
    and the same PNG images, equals the port's scores (batches of 4) within a relative 1e-4; and the
    official model's state dict has exactly the keys the recipe wrote (and CLIP's position ids)."""
    official, reloaded = official_scores(
        OFFICIAL_SCRIPT, [str(tiny_clip_flant5)], PROMPTS, images(len(PROMPTS)), tmp_path
    )
    ours = [s.raw for s in CLIPFlanT5(tiny_spec(tiny_clip_flant5), batch_size=4).score(PROMPTS, reloaded)]
    assert ours == pytest.approx(official, rel=1e-4)
    assert max(official) / min(official) > 1.1  # the pairs differ, so equality means something
    import torch

    keys = json.loads((tmp_path / "official.json").read_text())["keys"]
    written = torch.load(tiny_clip_flant5 / "pytorch_model.bin", weights_only=True)
    assert set(keys) == set(written) | {ALIAS_KEYS[3]}
