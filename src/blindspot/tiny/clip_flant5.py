"""A tiny CLIP-FlanT5 with random weights, written in the release's format (`zhiqiulin/clip-flant5-xxl`):
config.json (a T5 v1.1 config, model type `clip_t5`, with LLaVA's vision keys), the weights under the
official model's names (`pytorch_model.bin`), FlanT5's tokenizer files, and the CLIP vision tower the
config names, as a folder beside them (`vision_tower/`: config, weights and image processor). The
official package loads the same folder (`tests/ports/clip_flant5_official.py`), which is how the port
is proven equal to it.

The release architecture at tiny sizes: T5 v1.1 (gated GELU, untied LM head) with 28 embedding rows
more than the tokenizer has (FlanT5's 32,128 for 32,100 tokens), a CLIP vision tower with quick GELU
whose second-to-last layer is read, and the 2-layer GELU projector. FlanT5's own sentencepiece
vocabulary ships in no package here, so the tokenizer is a sentencepiece model trained with T5's
settings (unigram, NFKC, <pad> 0, </s> 1, <unk> 2, 100 sentinels) on Python's own documentation text
(training needs sentencepiece, which pyiqa brings into the build environment).
Weights are drawn on bfloat16's grid: the official loader casts the model to bfloat16, which then
changes nothing, so its float32 scores can be compared with the port's exactly.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blindspot.metrics.clip_flant5 import ALIAS_KEYS, TOWER_PREFIX, build_model, official_key, unique_keys
from blindspot.tiny.image_reward import random_tensor

VISION_FOLDER = "vision_tower"
EXTRA_ROWS = 28  # FlanT5's embedding has 32,128 rows for a tokenizer of 32,100 tokens
TINY_LANGUAGE = {
    "d_model": 32,
    "d_ff": 64,
    "d_kv": 8,
    "num_heads": 4,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
}
# The release's settings (FlanT5-XXL's config.json and LLaVA's ModelArguments) that the sizes leave alone.
RELEASE_LANGUAGE = {
    "model_type": "clip_t5",
    "architectures": ["CLIPT5ForConditionalGeneration"],
    "feed_forward_proj": "gated-gelu",
    "is_gated_act": True,
    "dense_act_fn": "gelu_new",
    "tie_word_embeddings": False,
    "layer_norm_epsilon": 1e-6,
    "dropout_rate": 0.1,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
    "use_cache": False,
    "mm_projector_type": "mlp2x_gelu",
    "mm_vision_select_layer": -2,
    "mm_vision_select_feature": "patch",
    "use_mm_proj": True,
    "mm_vision_tower": VISION_FOLDER,
}
TINY_VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 2,
    "image_size": 56,
    "patch_size": 14,
    "hidden_act": "quick_gelu",
    "layer_norm_eps": 1e-5,
    "projection_dim": 32,
}
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
SENTENCEPIECE = {
    "vocab_size": 2000,
    "model_type": "unigram",
    "character_coverage": 1.0,
    "normalization_rule_name": "nmt_nfkc",
    "pad_id": 0,
    "eos_id": 1,
    "unk_id": 2,
    "bos_id": -1,
    "pad_piece": "<pad>",
    "eos_piece": "</s>",
    "unk_piece": "<unk>",
    "num_threads": 1,
    "minloglevel": 2,
}


def train_tokenizer(out: Path) -> int:
    """Write spiece.model and T5Tokenizer's config into `out`; return the tokenizer's length."""
    from pydoc_data.topics import topics

    import sentencepiece
    from transformers import T5Tokenizer

    model = io.BytesIO()
    text = (line for topic in sorted(topics) for line in topics[topic].splitlines() if line.strip())
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=text, model_writer=model, **SENTENCEPIECE)
    (out / "spiece.model").write_bytes(model.getvalue())
    config = {
        "tokenizer_class": "T5Tokenizer",
        "extra_ids": 100,
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": 512,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    # The converted fast tokenizer too (as google/flan-t5-xxl ships one), so that scoring needs no
    # sentencepiece; the official slow tokenizer reads spiece.model.
    T5Tokenizer.from_pretrained(out).backend_tokenizer.save(str(out / "tokenizer.json"))
    return SENTENCEPIECE["vocab_size"] + config["extra_ids"]


def build_random_clip_flant5(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """The tiny release folder. Recipe keys (optional): `language` and `vision`, overrides of the tiny sizes."""
    import torch
    from transformers import CLIPVisionConfig

    out.mkdir(parents=True, exist_ok=True)
    vocab = train_tokenizer(out) + EXTRA_ROWS
    vision_config = CLIPVisionConfig(**TINY_VISION | dict(recipe.get("vision", {})))
    language = TINY_LANGUAGE | dict(recipe.get("language", {}))
    config = RELEASE_LANGUAGE | language | {"vocab_size": vocab, "mm_hidden_size": vision_config.hidden_size}
    with torch.device("meta"):
        port = build_model(config, vision_config)
    generator = torch.Generator().manual_seed(seed)
    state = {}
    shapes = {official_key(name): tuple(port.state_dict()[name].shape) for name in unique_keys(port)}
    for key, shape in sorted(shapes.items()):  # on bfloat16's grid, see the module's docstring
        state[key] = random_tensor(key, shape, generator).to(torch.bfloat16).float()
    for alias in ALIAS_KEYS[:3]:  # the official model's state dict holds its shared embedding under these too
        state[alias] = state["shared.weight"]
    torch.save(state, out / "pytorch_model.bin")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tower = out / VISION_FOLDER
    tower.mkdir()
    # the tower's own checkpoint, in transformers 4's layout (as openai/clip-vit-large-patch14-336's)
    vision_state = {key.removeprefix(TOWER_PREFIX): t for key, t in state.items() if key.startswith(TOWER_PREFIX)}
    torch.save(vision_state, tower / "pytorch_model.bin")
    (tower / "config.json").write_text(vision_config.to_json_string())
    size = vision_config.image_size  # openai/clip-vit-large-patch14-336's preprocessor_config.json, at the tiny size
    processor = {
        "crop_size": size,
        "do_center_crop": True,
        "do_normalize": True,
        "do_resize": True,
        "feature_extractor_type": "CLIPFeatureExtractor",
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "resample": 3,
        "size": size,
    }
    (tower / "preprocessor_config.json").write_text(json.dumps(processor, indent=2) + "\n")
