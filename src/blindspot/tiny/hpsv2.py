"""A tiny HPSv2: an open_clip CLIP of HPSv2's kind (a ViT image tower, a text transformer over CLIP's
real BPE vocabulary and 77-token context) with random weights, saved as HPSv2 ships its model: a
torch file with the weights under `state_dict`, plus the open_clip config file that the HPSv2
plug-in takes as its `architecture`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The file names in the built folder; the registry entry's `args.architecture` names the config.
CONFIG_FILE = "tiny-hpsv2-vit.json"
CHECKPOINT_FILE = "hpsv2_random.pt"


def tiny_config(image_size: int = 32) -> dict[str, Any]:
    """ViT-H-14's config (open_clip's model_configs/ViT-H-14.json) shrunk: same keys, same tokenizer."""
    return {
        "embed_dim": 32,
        "vision_cfg": {
            "image_size": image_size,
            "layers": 2,
            "width": 32,
            "head_width": 16,
            "patch_size": image_size // 4,
        },
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
    }


def build_random_hpsv2(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """Recipe `random_open_clip`: `image_size` (default 32) sets the image tower's input size."""
    import open_clip
    import torch

    from blindspot.metrics.hpsv2 import register_architecture

    out = Path(out)
    out.mkdir(parents=True)
    config_file = out / CONFIG_FILE
    config_file.write_text(json.dumps(tiny_config(recipe.get("image_size", 32)), indent=2) + "\n")
    torch.manual_seed(seed)
    model = open_clip.create_model(register_architecture(config_file), pretrained=None)
    torch.save({"state_dict": model.eval().state_dict()}, out / CHECKPOINT_FILE)
